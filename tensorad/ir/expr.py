"""Scalar expression nodes: one immutable, hash-consed class for the whole expression IR.

Every node is ``Expr(op, dtype, src, arg)``: ``op`` an :class:`Op`, ``dtype`` the result's dtype string,
``src`` the operand nodes, and ``arg`` the non-expression payload (a constant's value, a variable's
:class:`VarInfo`, a ``READ``'s tensor, a ``REDUCE``'s :class:`ReduceArg`).

Building the same node twice returns the same object, so structural equality is identity and memo tables
keyed by nodes are free.  As ``a == b`` builds a comparison, ``bool()`` of an ``EQ``/``NE`` node answers
the identity question, and ``bool()`` of any other node raises.  A binary node's operands share one dtype
(ints are cast to float where they meet floats).

A Python float is a *weak* float32 constant (``weak=True``; apart from a strong one in the table), an
expression of weak values and the integers they meet is weak, and meeting a strong float operand rebuilds
it at that dtype (:func:`adopt`): ``(1.0 - 0.1) * X[i]`` computes in float64 for a float64 ``X``, as in
NumPy and JAX.  A strong node's operands are strong (the constructor makes weak ones float32), so tensor
bodies and every pass see strong nodes only."""

from __future__ import annotations

import enum
import itertools
import math
import weakref
from _weakref import _remove_dead_weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import dtype as dt
from .locks import process_lock


class Op(enum.Enum):
    """Every kind of expression node. A test walks this enum to prove each pass covers it."""

    VAR = "var"
    CONST = "const"
    # arithmetic (operands share the result dtype)
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    FLOORDIV = "//"
    MOD = "%"
    NEG = "neg"
    POW = "pow"
    MAXIMUM = "max"
    MINIMUM = "min"
    # comparisons and logic (result dtype bool)
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ = "=="
    NE = "!="
    AND = "&&"
    OR = "||"
    NOT = "!"
    # choice: SELECT evaluates both branches, IF_THEN_ELSE only the taken one
    SELECT = "select"
    IF_THEN_ELSE = "if_then_else"
    CAST = "cast"
    # scalar math
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    ABS = "abs"
    SIN = "sin"
    COS = "cos"
    ERF = "erf"
    # a gather index: an integer checked, clipped or wrapped into [0, extent) of an axis (arg: DataIndex)
    DATA_INDEX = "data_index"
    # tensor access and reduction
    READ = "read"
    REDUCE = "reduce"

    # Members are singletons: hashed by identity (a C slot), not by Enum's hash of the name.
    __hash__ = object.__hash__


BINARY_ARITH = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.MOD, Op.POW,
                          Op.MAXIMUM, Op.MINIMUM})
COMPARISONS = frozenset({Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE})
LOGICAL = frozenset({Op.AND, Op.OR, Op.NOT})
UNARY_MATH = frozenset({Op.EXP, Op.LOG, Op.SQRT, Op.TANH, Op.SIGMOID, Op.ABS, Op.SIN, Op.COS,
                        Op.ERF})


_uids = itertools.count(1)


def fresh_uid() -> int:
    """A process-unique integer; variables and placeholders carry one so they never alias."""
    return next(_uids)


@dataclass(frozen=True)
class VarInfo:
    """Identity and range of a variable: ``lo <= v < hi`` (``None`` for value variables)."""

    name: str
    uid: int
    lo: int | None = None
    hi: int | None = None


@dataclass(frozen=True)
class SizeInfo(VarInfo):
    """A size variable (``ta.size_var``): an integer in ``[min, max]`` (``max`` ``None``: unbounded), a
    multiple of ``multiple_of``; usable in shapes, reduction bounds and expressions.  Its ``lo`` and
    ``hi`` stay ``None``: it ranges over no loop.  ``case_of``: the size whose values it narrows, in one
    case of a derivative made per case (``tensorad.symbolic``)."""

    min: int = 1
    max: int | None = None
    multiple_of: int = 1
    case_of: Expr | None = None


def is_size(e: Any) -> bool:
    """Whether ``e`` is a size variable (its kind, never its name, says so)."""
    return isinstance(e, Expr) and e.op is Op.VAR and type(e.arg) is SizeInfo


@dataclass(frozen=True)
class ReduceArg:
    """The payload of a ``REDUCE`` node, ``src`` ``(condition, *sources)``: the combiner folds the sources
    over every point of ``axes`` where ``condition`` holds, from its identity, into result ``value_index``."""

    combiner: Any  # tensorad.ir.reducer.CommReducer (kept untyped to avoid an import cycle)
    axes: tuple  # tuple of VAR Exprs with ranges
    value_index: int = 0


GATHER_MODES = ("raise", "clip", "wrap")


@dataclass(frozen=True)
class DataIndex:
    """The payload of a ``DATA_INDEX`` node: an index read from data (``E[I[i], j]``), brought into
    ``[0, extent)`` as ``np.take`` does: ``mode="raise"`` makes an out-of-range value a run-time
    ``IndexError``, ``"clip"`` is ``min(max(v, 0), extent - 1)``, ``"wrap"`` is ``v mod extent``.  The
    bounds proof and the optimizer treat the node as an opaque value in range.  ``tensor`` and ``axis``
    name what it indexes, for error messages.  ``extent`` may be an integer expression in size variables
    (binding the sizes makes it an int)."""

    extent: int | Expr
    mode: str
    tensor: str
    axis: int

    def message(self, value: int, index: str, where: str, who: str) -> str:
        """The error of an index out of range (``ta.evaluate`` and built kernels share it)."""
        return (f"{who}: gather index out of range: {index} = {value} indexes axis {self.axis} "
                f"of tensor {self.tensor}, of size {self.extent} (valid: 0 <= index < "
                f"{self.extent}; mode='clip' or 'wrap' bring it into range), at {where}")


class SizeDecisionError(TypeError):
    """A choice that depends on the values of size variables (``ta.size_var``), made where only static
    sizes are handled; ``condition``: the condition on the sizes it asked, where known."""

    def __init__(self, message: str, condition: Expr | None = None) -> None:
        super().__init__(message)
        self.condition = condition


def _nodes(root: Expr) -> list[Expr]:
    stack, seen = [root], {}
    while stack:
        n = stack.pop()
        if n not in seen:
            seen[n] = None
            stack.extend(n.src)
    return list(seen)


class Expr:
    """An immutable, hash-consed expression node.  See the module docstring."""

    __slots__ = ("op", "dtype", "src", "arg", "weak", "__weakref__")
    _table: dict[tuple, _Ref] = {}  # node key -> a weak reference to the node (see _Ref)
    _lock = process_lock()

    op: Op
    dtype: str
    src: tuple[Expr, ...]
    arg: Any
    weak: bool

    def __new__(cls, op: Op, dtype: str, src: tuple[Expr, ...] = (), arg: Any = None,
                weak: bool = False) -> Expr:
        key = (op, dtype, tuple(map(id, src)), arg if arg is None  # (most nodes: no call)
               else (type(arg), arg) if type(arg) in _INTEGERS else _arg_key(arg))
        if weak:
            key += (True,)
        ref = _TABLE.get(key)  # (a node already made: no lock; a new one is made under it)
        if ref is not None:
            node = ref()
            if node is not None:
                return node
        if not weak and any(s.weak for s in src):  # strong operands only (no entry's key has a weak one)
            return Expr(op, dtype, tuple(map(strong, src)), arg)
        with cls._lock:
            ref = _TABLE.get(key)
            node = None if ref is None else ref()
            if node is None:
                node = object.__new__(cls)
                object.__setattr__(node, "op", op)
                object.__setattr__(node, "dtype", dtype)
                object.__setattr__(node, "src", tuple(src))
                object.__setattr__(node, "arg", arg)
                object.__setattr__(node, "weak", weak)
                ref = _Ref(node, _drop)
                ref.key = key
                _TABLE[key] = ref
        return node

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Expr nodes are immutable")

    __hash__ = object.__hash__

    def __reduce__(self):  # pickling rebuilds through the hash-consing constructor
        return (Expr, (self.op, self.dtype, self.src, self.arg) + ((True,) if self.weak else ()))

    def replace(self, src: tuple[Expr, ...] | None = None, arg: Any = None, dtype: str | None = None) -> Expr:
        """The same node with some fields changed (``None`` keeps a field)."""
        return Expr(self.op, dtype or self.dtype, self.src if src is None else tuple(src),
                    self.arg if arg is None else arg)

    @property
    def name(self) -> str:
        if self.op is not Op.VAR:
            raise AttributeError(f"a {self.op.name} node has no name")
        return self.arg.name

    @property
    def lo(self) -> int | None:
        return self.arg.lo

    @property
    def hi(self) -> int | None:
        return self.arg.hi

    @property
    def extent(self) -> int:
        return self.arg.hi - self.arg.lo

    @property
    def dom(self) -> tuple[int, int]:
        """``(lo, hi)`` of a variable, TVM-style ``IterVar.dom``."""
        return (self.arg.lo, self.arg.hi)

    @property
    def var(self) -> Expr:
        """A variable is its own ``IterVar.var`` (TVM code writes ``k.var``)."""
        return self

    @property
    def value(self) -> Any:
        if self.op is not Op.CONST:
            raise AttributeError(f"a {self.op.name} node has no constant value")
        return self.arg

    @property
    def tensor(self):
        if self.op is not Op.READ:
            raise AttributeError(f"a {self.op.name} node reads no tensor")
        return self.arg

    def __bool__(self) -> bool:
        if self.op is Op.EQ:
            return self.src[0] is self.src[1]
        if self.op is Op.NE:
            return self.src[0] is not self.src[1]
        if self.op is Op.CONST and self.dtype == dt.BOOL:
            return bool(self.arg)
        sizes = sorted({n.name for n in _nodes(self) if is_size(n)})
        if sizes:
            raise SizeDecisionError(
                f"a decision on the size variables {', '.join(sizes)} ({self}) that tensorad makes only "
                f"at static sizes here: bind them first (ta.bind(tensors, {sizes[0]}=...))", self)
        raise TypeError(
            "the truth value of a tensor expression is not known when it is built; "
            "use ta.select(cond, a, b) or ta.if_then_else(cond, a, b) for a data-dependent "
            "choice, and `a is b` to ask whether two expressions are the same node")

    __iter__ = None  # an Expr is not a sequence: stop accidental unpacking early

    # ---- operators: the language of API.md section 1 ---------------------------------------
    def __add__(self, o): return binary(Op.ADD, self, o)
    def __radd__(self, o): return binary(Op.ADD, o, self)
    def __sub__(self, o): return binary(Op.SUB, self, o)
    def __rsub__(self, o): return binary(Op.SUB, o, self)
    def __mul__(self, o): return binary(Op.MUL, self, o)
    def __rmul__(self, o): return binary(Op.MUL, o, self)
    def __truediv__(self, o): return binary(Op.DIV, self, o)
    def __rtruediv__(self, o): return binary(Op.DIV, o, self)
    def __floordiv__(self, o): return binary(Op.FLOORDIV, self, o)
    def __rfloordiv__(self, o): return binary(Op.FLOORDIV, o, self)
    def __mod__(self, o): return binary(Op.MOD, self, o)
    def __rmod__(self, o): return binary(Op.MOD, o, self)
    def __pow__(self, o): return binary(Op.POW, self, o)
    def __rpow__(self, o): return binary(Op.POW, o, self)
    def __neg__(self): return unary(Op.NEG, self)
    def __pos__(self): return self
    def __lt__(self, o): return compare(Op.LT, self, o)
    def __le__(self, o): return compare(Op.LE, self, o)
    def __gt__(self, o): return compare(Op.GT, self, o)
    def __ge__(self, o): return compare(Op.GE, self, o)
    def __eq__(self, o):  # type: ignore[override]
        return compare(Op.EQ, self, o) if _is_scalar(o) else NotImplemented

    def __ne__(self, o):  # type: ignore[override]
        return compare(Op.NE, self, o) if _is_scalar(o) else NotImplemented
    def __and__(self, o): return logical(Op.AND, self, o)
    def __rand__(self, o): return logical(Op.AND, o, self)
    def __or__(self, o): return logical(Op.OR, self, o)
    def __ror__(self, o): return logical(Op.OR, o, self)
    def __invert__(self): return logical_not(self)

    def astype(self, dtype: str) -> Expr: return cast(dtype, self)

    # ``repr``/``str`` are the printer's :func:`.printer.expr_to_str`, attached by the package


def _is_scalar(x: Any) -> bool:
    return isinstance(x, (Expr, bool, int, float)) or (hasattr(x, "dtype") and hasattr(x, "item"))


_INTEGERS = (bool, int)


class _Ref(weakref.ref):
    """A weak reference to a hash-consed node that knows the node's key in the table (a plain dict's)."""

    __slots__ = ("key",)


_TABLE = Expr._table


def _drop(ref: _Ref, table: dict = _TABLE, remove: Any = _remove_dead_weakref) -> None:
    """A node died: its entry goes unless a new node took the key already (globals bound as defaults)."""
    remove(table, ref.key)


def _arg_key(arg: Any) -> Any:
    # Constants: keep int 1, float 1.0 and True apart even though they compare equal, and -0.0 from 0.0.
    if isinstance(arg, float):
        return (float, arg, math.copysign(1.0, arg))
    if isinstance(arg, (bool, int)):
        return (type(arg), arg)
    return arg


def const(value: Any, dtype: str | None = None) -> Expr:
    """A constant node; ``dtype`` defaults to bool / int32 by the Python type (a NumPy scalar's own dtype),
    and a float without one is weak (float32 until it meets a float dtype: see the module docstring)."""
    if isinstance(value, Expr):
        return value if dtype is None or value.dtype == dtype and not value.weak else cast(dtype, value)
    if dtype is None:
        if isinstance(value, float):  # (a NumPy float64 too: it is a Python float)
            return Expr(Op.CONST, dt.ACCUMULATE, (), float(value), True)
        if hasattr(value, "dtype") and hasattr(value, "item"):  # a NumPy scalar keeps its type
            value, dtype = value.item(), value.dtype
        else:
            dtype = dt.BOOL if isinstance(value, bool) else "int32" if isinstance(value, int) else "float32"
    dtype = dt.check_dtype(dtype)
    if dt.is_half(dtype):
        value = dt.round_to(value, dtype)  # a half constant holds exactly what it stores
    elif dt.is_float(dtype):
        value = float(value)
    elif dt.is_int(dtype):
        if isinstance(value, float) and not value.is_integer():
            raise TypeError(f"constant {value!r} is not an integer but dtype is {dtype}")
        value = int(value)
    else:
        value = bool(value)
    return Expr(Op.CONST, dtype, (), value)


def var(name: str, lo: int | None = None, hi: int | None = None, dtype: str = dt.INDEX) -> Expr:
    """A fresh variable (never equal to any other) ranging over ``lo <= v < hi``."""
    return Expr(Op.VAR, dtype, (), VarInfo(name, fresh_uid(), lo, hi))


def copies(variables: Iterable[Expr]) -> tuple[Expr, ...]:
    """Fresh variables with the names, ranges and dtypes of ``variables``, in their order."""
    return tuple(var(v.name, v.lo, v.hi, v.dtype) for v in variables)


def box(axes: Iterable[Expr]) -> int:
    """The number of points of the box of ``axes``."""
    return math.prod(a.extent for a in axes)


def data_index(value: Any, extent: int | Expr, mode: str = "raise", tensor: str = "?", axis: int = 0) -> Expr:
    """``value`` (an integer expression read from data) as an index into ``[0, extent)``, ``extent`` an
    int or an integer expression in size variables; see :class:`DataIndex` for the modes.  A
    ``DATA_INDEX`` operand is taken as is."""
    if mode not in GATHER_MODES:
        raise ValueError(f"gather mode must be one of {', '.join(map(repr, GATHER_MODES))}, got {mode!r}")
    value = as_expr(value)
    if not dt.is_int(value.dtype):
        raise TypeError(f"{tensor}: index {axis} must be an integer expression, got "
                        f"{value.dtype} expression {value}")
    if isinstance(extent, Expr) and dt.is_int(extent.dtype) \
            and all(is_size(n) for n in _nodes(extent) if n.op in (Op.VAR, Op.READ, Op.REDUCE)):
        return Expr(Op.DATA_INDEX, dt.INDEX, (value,), DataIndex(extent, mode, str(tensor), int(axis)))
    if isinstance(extent, bool) or not isinstance(extent, int) or extent < 0:
        raise ValueError(f"{tensor}: axis {axis} has no valid extent ({extent!r})")
    if extent == 0:
        raise IndexError(f"{tensor}: cannot gather along axis {axis} of size 0")
    # (the operand keeps its own dtype: an int64 value must not wrap into range)
    return Expr(Op.DATA_INDEX, dt.INDEX, (value,), DataIndex(int(extent), mode, str(tensor), int(axis)))


def is_tensor(x: Any) -> bool:
    """True for a ``Tensor`` (tested by its attributes: ``tensor.py`` imports this module)."""
    return not isinstance(x, Expr) and hasattr(x, "op") and hasattr(x, "value_index")


def scalar_use_error(x: Any, whole: str = "") -> TypeError:
    """The error for a tensor ``x`` where a scalar expression is expected; ``whole`` names the
    ``ta.topi`` call that does the same to the whole tensor (``{}`` is replaced by its name)."""
    msg = f"tensor {x.name!r} used as a scalar: read an element with {x.name}[i, ...]"
    if whole:
        msg += f", or call {whole.format(x.name)} for the whole tensor"
    return TypeError(msg)


# the ta.topi function that applies a scalar op to whole tensors
_TOPI_NAMES = {Op.ADD: "add", Op.SUB: "subtract", Op.MUL: "multiply", Op.DIV: "divide",
               Op.POW: "power", Op.MAXIMUM: "maximum", Op.MINIMUM: "minimum", Op.NEG: "negative"}


def as_expr(x: Any, like: str | None = None) -> Expr:
    """Convert a Python scalar to a constant; ``like`` is the dtype of the other operand."""
    if isinstance(x, Expr):
        return x
    if is_tensor(x):
        raise scalar_use_error(x)
    if isinstance(x, bool):
        return const(x, dt.BOOL)
    if isinstance(x, int):
        return const(x, like) if like is not None and like != dt.BOOL else const(x, "int32")
    if isinstance(x, float):
        return const(x, like if like is not None and dt.is_float(like) else None)
    if hasattr(x, "dtype") and hasattr(x, "item"):  # numpy scalar
        return const(x.item(), dt.check_dtype(x.dtype))
    raise TypeError(f"cannot use {type(x).__name__} {x!r} in a tensor expression")


def cast(dtype: str, x: Any) -> Expr:
    """Convert ``x`` to ``dtype`` (a no-op when it already has it)."""
    dtype = dt.check_dtype(dtype)
    x = as_expr(x)
    if x.weak:  # a weak value computes in the float dtype it is cast to, else in float32
        x = adopt(x, dtype if dt.is_float(dtype) and not dt.is_half(dtype) else dt.ACCUMULATE)
    if x.dtype == dtype:
        return x
    if dt.is_half(dtype) and x.dtype != dt.ACCUMULATE and x.op is not Op.CONST:
        x = cast(dt.ACCUMULATE, x)  # a half value is always rounded from float32
    if x.op is Op.CONST:
        v = dt.round_to(x.arg, x.dtype) if dt.is_float(x.dtype) else x.arg  # the value it holds
        if dt.is_int(dtype) and dt.is_float(x.dtype):  # toward zero, saturated, NaN -> 0
            return const(dt.float_to_int(v, dtype), dtype)
        return const(v, dtype) if not dt.is_bool(dtype) else const(bool(v), dtype)
    return Expr(Op.CAST, dtype, (x,))


def strong(x: Expr) -> Expr:
    """``x`` itself, or a weak ``x`` rebuilt strong at its dtype (float32)."""
    return adopt(x, x.dtype) if x.weak else x


def adopt(x: Expr, dtype: str) -> Expr:
    """A weak expression ``x`` rebuilt as a strong one computing in the float ``dtype``: each weak
    constant keeps its Python value, each integer a weak node converts is cast to ``dtype``
    (iterative: a long chain of Python floats is no deep recursion)."""
    done: dict[Expr, Expr] = {}
    stack = [x]
    while stack:
        n = stack[-1]
        if todo := [s for s in n.src if s.weak and s not in done]:
            stack.extend(todo)
            continue
        stack.pop()
        done[n] = const(n.arg, dtype) if n.op is Op.CONST else cast(dtype, n.src[0]) if n.op is Op.CAST \
            else Expr(n.op, dtype, tuple(done.get(s, s) for s in n.src), n.arg)
    return done[x] if x.weak else x


def _weak_float(x: Expr) -> Expr:
    """An integer or boolean ``x`` as a weak float (it converts to the float dtype it meets)."""
    return const(float(x.arg)) if x.op is Op.CONST else Expr(Op.CAST, dt.ACCUMULATE, (x,), None, True)


def widen(x: Expr) -> Expr:
    """``x`` itself, or ``cast("float32", x)`` for a half value: half types only store."""
    return cast(dt.compute_dtype(x.dtype), x) if dt.is_half(x.dtype) else x


def _unify(a: Any, b: Any) -> tuple[Expr, Expr]:
    """Both operands as Exprs of one dtype (Python scalars adopt the other's); halves compute in float32.
    A weak operand adopts a strong float operand's dtype, and makes a strong integer one weak."""
    if not isinstance(a, Expr):
        b = widen(as_expr(b))
        a = as_expr(a, None if b.weak else b.dtype)
    elif not isinstance(b, Expr):
        a = widen(a)
        b = as_expr(b, None if a.weak else a.dtype)
    a, b = widen(a), widen(b)
    if a.weak != b.weak:
        w, s = (a, b) if a.weak else (b, a)
        w, s = (adopt(w, s.dtype), s) if dt.is_float(s.dtype) else (w, _weak_float(s))
        a, b = (w, s) if a.weak else (s, w)
    elif a.dtype != b.dtype:
        common = dt.promote(a.dtype, b.dtype)
        a, b = cast(common, a), cast(common, b)
    return a, b


def binary(op: Op, a: Any, b: Any) -> Expr:
    """Build an arithmetic node, checking operand kinds."""
    for x in (a, b):
        if is_tensor(x) and op in _TOPI_NAMES:
            raise scalar_use_error(x, f"ta.topi.{_TOPI_NAMES[op]}(...)")
    a, b = _unify(a, b)
    if a.dtype == dt.BOOL:
        raise TypeError(f"arithmetic {op.value!r} on boolean expressions; use & and | for logic")
    if op is Op.DIV and dt.is_int(a.dtype):
        raise TypeError("`/` on integer expressions is ambiguous: use `//` for floor division "
                        "or ta.cast('float32', x) for true division")
    if op is Op.POW and dt.is_int(a.dtype):
        a, b = _weak_float(a), _weak_float(b)
    return Expr(op, a.dtype, (a, b), None, a.weak)


def unary(op: Op, x: Any) -> Expr:
    """Build NEG or a scalar math node; math on integers computes in float32."""
    if is_tensor(x):
        raise scalar_use_error(x, f"ta.topi.{_TOPI_NAMES.get(op, op.value)}({{}})")
    x = widen(as_expr(x))
    if x.dtype == dt.BOOL:
        raise TypeError(f"{op.value} of a boolean expression")
    if op in UNARY_MATH and op is not Op.ABS and not dt.is_float(x.dtype):
        x = _weak_float(x)
    return Expr(op, x.dtype, (x,), None, x.weak)


def compare(op: Op, a: Any, b: Any) -> Expr:
    a, b = _unify(a, b)
    return Expr(op, dt.BOOL, (a, b))


def _as_bool(x: Any) -> Expr:
    x = as_expr(x)
    if x.dtype != dt.BOOL:
        raise TypeError(f"expected a condition (bool expression), got a {x.dtype} expression {x}")
    return x


def logical(op: Op, a: Any, b: Any) -> Expr:
    return Expr(op, dt.BOOL, (_as_bool(a), _as_bool(b)))


def logical_not(a: Any) -> Expr:
    return Expr(Op.NOT, dt.BOOL, (_as_bool(a),))


def conjuncts(c: Expr) -> list[Expr]:
    """The operands of a chain of ``AND`` nodes, left to right (``c`` itself when it is no ``AND``)."""
    return [x for y in c.src for x in conjuncts(y)] if c.op is Op.AND else [c]


def signed_sum(terms: list[tuple[int, Expr]]) -> Expr:
    """``s1 t1 + s2 t2 + ...`` for signs ``s`` of +-1, left to right (at least one term)."""
    (sign, acc), *rest = terms
    acc = acc if sign > 0 else Expr(Op.NEG, acc.dtype, (acc,))
    for sign, t in rest:
        acc = Expr(Op.ADD if sign > 0 else Op.SUB, t.dtype, (acc, t))
    return acc


def choice(op: Op, cond: Any, a: Any, b: Any) -> Expr:
    """SELECT or IF_THEN_ELSE with a boolean condition and branches of one dtype."""
    cond = _as_bool(cond)
    a, b = _unify(a, b)
    return Expr(op, a.dtype, (cond, a, b), None, a.weak)


TRUE = const(True)
FALSE = const(False)
