"""LLVM IR for expressions: two fold tables, one for values and one for index arithmetic.

* **Index mode** computes ``int32`` index expressions in ``i64``.  Floor division and modulo by a positive
  constant ``c``: ``q = sdiv(a, c) - (srem(a, c) < 0)``, ``r = srem(a, c) + c * (srem(a, c) < 0)``; by a
  power of two, ``ashr`` and ``and``.
* **Value mode** computes in each node's dtype, with exact index arithmetic as ``ta.evaluate``: a loop
  variable, an ``int32`` node with an ``i64`` operand and an ``int32`` constant past int32 are ``i64``;
  ``int32`` values read from tensors, and arithmetic among them only, wrap.  Integer ``//`` and ``%`` by a
  runtime divisor give 0 at a zero divisor and ``INT_MIN // -1``; float-to-int casts saturate.

``IF_THEN_ELSE`` is lazy: one whose branches read memory or test a gather index is a placeholder while
folding, where the condition is computed and each branch emitted in its own block and memo scope, joined
by a phi.  ``SELECT`` computes both branches.

Math: exp, log, tanh, sigmoid, erf and pow are inline vector code (:mod:`.llvm.vector_math`) or calls of
an out-of-line copy (:mod:`.llvm.math_functions`); the rest are LLVM intrinsics.  Float
``maximum``/``minimum`` propagate NaN."""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.ir as ir
import numpy as np

from tensorad.ir.dtype import numpy_dtype
from tensorad.ir.expr import Expr, Op, binary, const, var
from tensorad.ir.intrange import cast_keeps_value
from tensorad.ir.rewrite import MissingRuleError, fold, rewrite, walk, walk_along

from . import half as halfconv
from .ir_loops import declare
from .math_functions import EMIT

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
# half values (float16, bfloat16) are their i16 bit patterns; only a cast converts (halfconv.py)
LLTYPE = {"float32": F32, "float64": F64, "int32": I32, "int64": I64, "bool": I1,
          "float16": I16, "bfloat16": I16}
MEMTYPE = {"float32": F32, "float64": F64, "int32": I32, "int64": I64, "bool": I8,
           "float16": I16, "bfloat16": I16}
FSUFFIX = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64"}

# integer powers up to this (absolute) exponent multiply under fast math (``small_power``)
MAX_MULTIPLIED_POWER = 4

_ICMP = {Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">=", Op.EQ: "==", Op.NE: "!="}
_UNARY_INTRINSIC = {Op.EXP: "exp", Op.LOG: "log", Op.SQRT: "sqrt", Op.SIN: "sin", Op.COS: "cos",
                    Op.TANH: "tanh", Op.ABS: "fabs"}


_EVAL, _APPLY, _STEP = "eval", "apply", "step"  # the kinds of work items of ExprEmitter.value


def _float_minmax_shaped(node: Expr) -> bool:
    """Whether ``node`` is ``select(a <cmp> b, a, b)`` (either order) on floats: a min/max to instcombine."""
    cond, x, y = node.src
    return (node.dtype.startswith("float") and cond.op in _ICMP and cond.src[0].dtype.startswith("float")
            and {cond.src[0], cond.src[1]} == {x, y})


def _raises(node: Expr) -> bool:
    """A gather index tested at run time (``mode="raise"``): evaluating it may raise."""
    return node.op is Op.DATA_INDEX and node.arg.mode == "raise"


def freeze(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """``freeze value``: the same value, which instcombine cannot reason through (LLVM 22 folds a compare
    of a float min/max-shaped select with its constant as if NaN could not arise).  Unlike an
    ``llvm.arithmetic.fence``, it keeps loops vectorizable and costs no instruction."""
    instr = ir.Instruction(b.block, value.type, "freeze", [value])
    b._insert(instr)
    return instr


def recombine_digits(index: tuple[Expr, ...], strides) -> list[tuple[Expr, int]]:
    """``(index expression, stride)`` terms of a flat address, with dimensions read as the digits of one
    value merged (constant positive divisors), so that no division is computed and the access is seen as
    unit stride:

    * ``e // c`` at stride ``c * s`` and ``e % c`` at stride ``s`` address ``e * s``;
    * ``(e // c) % d`` at stride ``c * s`` and ``e % c`` at stride ``s`` address ``(e % (c * d)) * s``,
      which the first rule may merge with ``e // (c * d)``: ``X[i, j // (H W), (j // W) % H, j % W]`` is
      ``X[i, j]``."""
    terms: list[tuple[Expr | None, int]] = list(zip(index, strides))
    while True:  # (the first mergeable pair, again until none is left)
        found = next(((i, j, merged) for i, (q, sq) in enumerate(terms) for j, (r, sr) in enumerate(terms)
                      if i != j and q is not None and r is not None
                      and (merged := _merge_digits(q, sq, r, sr)) is not None), None)
        if found is None:
            return [(e, st) for e, st in terms if e is not None]
        i, j, merged = found
        terms[i], terms[j] = (None, 0), (merged, terms[j][1])


def _const_div(n: Expr, op: Op) -> tuple[Expr, int] | None:
    if n.op is op and n.src[1].op is Op.CONST and int(n.src[1].arg) > 0:
        return n.src[0], int(n.src[1].arg)
    return None


def _merge_digits(q: Expr, sq: int, r: Expr, sr: int) -> Expr | None:
    """One expression at stride ``sr`` for the digits ``q`` (stride ``sq``) and ``r`` (``sr``), or None."""
    rem = _const_div(r, Op.MOD)
    if rem is None:
        return None
    e, c = rem
    if sq != c * sr:
        return None
    div = _const_div(q, Op.FLOORDIV)
    if div is not None and div[0] is e and div[1] == c:
        return e
    outer = _const_div(q, Op.MOD)
    if outer is not None:
        inner = _const_div(outer[0], Op.FLOORDIV)
        if inner is not None and inner[0] is e and inner[1] == c:
            return binary(Op.MOD, e, const(c * outer[1], e.dtype))
    return None


class ScopedMemo:
    """A memo table with nested scopes, what a scope adds forgotten when it is popped (an undo log)."""

    def __init__(self) -> None:
        self._table: dict = {}
        self._undo: list[list] = []

    def push(self) -> None:
        self._undo.append([])

    def pop(self) -> None:
        for key, old in reversed(self._undo.pop()):
            if old is _MISSING:
                del self._table[key]
            else:
                self._table[key] = old

    def __contains__(self, key) -> bool:
        return key in self._table

    def __getitem__(self, key):
        return self._table[key]

    def get(self, key, default=None):
        return self._table.get(key, default)

    def __setitem__(self, key, value) -> None:
        if self._undo:
            self._undo[-1].append((key, self._table.get(key, _MISSING)))
        self._table[key] = value


_MISSING = object()


class ExprEmitter:
    """Emits expressions of one function body: ``env`` maps loop variables to ``i64`` values, ``accs``
    accumulators to stack slots, ``pointer(tensor)`` a buffer's base (``strides(tensor)`` its strides)."""

    def __init__(self, builder: ir.IRBuilder, pointer: Callable, strides: Callable,
                 fastmath: tuple[str, ...] = (), target=None) -> None:
        self.b = builder
        # float16 conversions: F16C instructions where the target has them (target.py asks LLVM)
        self.f16c = bool(target is not None and target.f16c)
        self.module = builder.module
        self.pointer, self.strides = pointer, strides
        self.fast = fastmath
        self.combining: frozenset[Expr] = frozenset()  # reduction combiners: also ``reassoc``
        self.env: dict[Expr, ir.Value] = {}
        self.accs: dict[Expr, ir.Value] = {}
        self.lazy: dict[Expr, Expr] = {}
        # checked mode: ``check(tensor, kind, index_exprs, values)`` emits a bounds test
        self.check: Callable | None = None
        # ``gather_check(node, value, position)``: the run-time test of a gather index under mode="raise"
        self.gather_check: Callable | None = None
        # out-of-line math (:mod:`.llvm.math_functions`): a module's library, or None for inline code
        self.mathlib = None
        self.vmemo = ScopedMemo()
        self.imemo = ScopedMemo()
        self.bounds_memo: dict = {}  # index_bounds of nodes (a pure function of the node)
        self.vrules = _value_rules(self)
        self.irules = _index_rules(self)

    # ---- scopes: values computed inside a block are not reused after it ---------------------
    def push(self) -> None:
        self.vmemo.push()
        self.imemo.push()

    def pop(self) -> None:
        self.vmemo.pop()
        self.imemo.pop()

    def value(self, e: Expr) -> ir.Value:
        """Emit ``e`` (its value in the current block), with a work stack instead of recursion: ``eval``
        items push their operands, ``apply`` items fold a node, and a lazy ``if_then_else`` pushes its
        steps (condition, branch, join) as callables, each branch in its own memo scope."""
        e = self._lazify(e)
        stack: list = [(_EVAL, e)]
        values: list[ir.Value] = []
        while stack:
            kind, item = stack.pop()
            if kind is _STEP:
                item(values)
            elif kind is _APPLY:
                n = len(item.src)
                args = values[len(values) - n:]
                del values[len(values) - n:]
                values.append(self._apply(item, args))
            elif item in self.vmemo:
                values.append(self.vmemo[item])
            elif item in self.lazy:
                stack.extend(self._lazy_steps(item))
            else:
                stack.append((_APPLY, item))
                stack.extend((_EVAL, x) for x in reversed(item.src))
        return values[-1]

    def _apply(self, node: Expr, args: list) -> ir.Value:
        try:
            rule = self.vrules[node.op]
        except KeyError:
            raise MissingRuleError(f"no rule for {node.op.name} nodes ({node})") from None
        v = self.vmemo[node] = rule(node, *args)
        return v

    def index(self, e: Expr) -> ir.Value:
        """``e`` as an ``i64`` index; a gather index inside (``DATA_INDEX``) is data, emitted
        in value mode (:meth:`data_index`), and what lies under it is not index arithmetic."""
        memo = self.imemo
        if e in memo:
            return memo[e]
        if not any(n.op is Op.DATA_INDEX for n in walk(e)):
            return fold(e, self.irules, memo)
        # the index arithmetic around the gathers (shared nodes too)
        outside = set(walk_along(e, lambda node: () if node.op is Op.DATA_INDEX else node.src))
        for node in walk(e):
            if node in memo or node not in outside:
                continue
            if node.op is Op.DATA_INDEX:
                memo[node] = self.value(node)
            else:
                rule = self.irules.get(node.op)
                if rule is None:
                    raise MissingRuleError(f"no index rule for {node.op.name} nodes ({node})")
                memo[node] = rule(node, *[memo[c] for c in node.src])
        return memo[e]

    def data_index(self, node: Expr, x: ir.Value) -> ir.Value:
        """A gather index (:class:`~tensorad.ir.expr.DataIndex`) of the data value ``x``, as an
        ``i64`` in ``[0, extent)``: clipped, wrapped (Python's modulo), or tested at run time."""
        x = self.widen(x, I64(0))[0]
        n, mode = node.arg.extent, node.arg.mode
        if mode == "clip":
            lo = self.b.call(declare(self.module, "llvm.smax.i64", I64, [I64, I64]), [x, I64(0)])
            return self.b.call(declare(self.module, "llvm.smin.i64", I64, [I64, I64]), [lo, I64(n - 1)])
        if mode == "wrap":
            return self.floordiv_const(x, n, True)
        if self.gather_check is None:  # never a wild read: a kernel without the test is a bug
            raise RuntimeError(f"internal error: gather index {node} emitted without its run-time check")
        read = next((r for r in walk(node.src[0]) if r.op is Op.READ), None)
        position = None
        if read is not None:
            position = (read.arg.name, [self.index(i) for i in read.src])
        self.gather_check(node, x, position)
        return x

    def address(self, tensor, index: tuple[Expr, ...], kind: str = "read") -> ir.Value:
        strides = self.strides(tensor)
        if self.check is not None:
            self.check(tensor, kind, index, [self.index(i) for i in index])
        terms = [(self.index(i), s) for i, s in recombine_digits(index, strides)]
        off = None
        for term, s in terms:
            if s != 1:
                term = self.b.mul(term, I64(s), flags=("nsw",))
            off = term if off is None else self.b.add(off, term, flags=("nsw",))
        base = self.pointer(tensor)
        if off is None:
            return base
        return self.b.gep(base, [off], inbounds=True, source_etype=MEMTYPE[tensor.dtype])

    def load(self, tensor, index: tuple[Expr, ...]) -> ir.Value:
        v = self.b.load(self.address(tensor, index), typ=MEMTYPE[tensor.dtype])
        return self.b.icmp_unsigned("!=", v, I8(0)) if tensor.dtype == "bool" else v

    def store(self, tensor, index: tuple[Expr, ...], value: ir.Value) -> None:
        if tensor.dtype == "bool":
            value = self.b.zext(value, I8)
        self.b.store(self.narrow(value, MEMTYPE[tensor.dtype]), self.address(tensor, index, "write"))

    def narrow(self, value: ir.Value, t: ir.Type) -> ir.Value:
        """``value`` as type ``t``: an exact ``i64`` index value stored as ``int32`` wraps."""
        if value.type == t or not isinstance(t, ir.IntType) or value.type.width <= t.width:
            return value
        return self.b.trunc(value, t)

    def widen(self, *xs: ir.Value) -> list[ir.Value]:
        """Integer operands at one width: ``i32`` ones sign-extended when another is ``i64``."""
        if not any(x.type == I64 for x in xs):
            return list(xs)
        return [I64(x.constant) if x.type == I32 and isinstance(x, ir.Constant)
                else self.b.sext(x, I64) if x.type == I32 else x for x in xs]

    def _lazify(self, e: Expr) -> Expr:
        if not any(n.op is Op.IF_THEN_ELSE for n in walk(e)):
            return e
        # nodes with a READ or a checked gather index under them: a branch that may raise stays lazy
        reads: set[Expr] = set()

        def rule(node: Expr) -> Expr | None:
            if node.op is Op.READ or _raises(node) or any(x in reads for x in node.src):
                reads.add(node)
            if node.op is not Op.IF_THEN_ELSE:
                return None
            c, a, b = node.src
            if a not in reads and b not in reads:
                return Expr(Op.SELECT, node.dtype, node.src)
            ph = var("ite", dtype=node.dtype)
            self.lazy[ph] = node
            reads.add(ph)  # an enclosing if_then_else whose branch holds this one stays lazy too
            return ph

        return rewrite(e, rule)

    def _lazy_steps(self, ph: Expr) -> list:
        """The work items of a lazy ``if_then_else`` (pushed in reverse: the condition first),
        ending with the phi of its branches bound to the placeholder ``ph``."""
        c, a, b = self.lazy[ph].src
        blocks: dict = {}
        incoming: list = []

        def branch(values: list) -> None:  # after the condition: split the block
            blocks.update((k, self.b.append_basic_block(f"ite.{k}")) for k in ("then", "else", "join"))
            self.b.cbranch(values.pop(), blocks["then"], blocks["else"])
            self.b.position_at_end(blocks["then"])
            self.push()

        def close(values: list, then: str) -> None:  # a branch's value (maybe exact index arithmetic, i64)
            v = values.pop()
            incoming.append((self.widen(v, I64(0))[0] if ph.dtype == "int32" else v, self.b.block))
            self.pop()
            self.b.branch(blocks["join"])
            self.b.position_at_end(blocks[then])

        def then_done(values: list) -> None:
            close(values, "else")
            self.push()

        def join(values: list) -> None:
            close(values, "join")
            phi = self.b.phi(I64 if ph.dtype == "int32" else LLTYPE[ph.dtype])
            for v, bb in incoming:
                phi.add_incoming(v, bb)
            self.vmemo[ph] = phi
            values.append(phi)

        return [(_STEP, join), (_EVAL, b), (_STEP, then_done), (_EVAL, a), (_STEP, branch), (_EVAL, c)]

    # ---- helpers used by the rule tables --------------------------------------------------
    def math(self, name: str, *args: ir.Value) -> ir.Value:
        """A vector-math function (:mod:`.llvm.vector_math`): inline, or a call of :attr:`mathlib` if set."""
        return EMIT[name](self.b, *args) if self.mathlib is None else self.mathlib.call(self.b, name, *args)

    def call(self, name: str, dtype: str, *args: ir.Value, flags: tuple = ()) -> ir.Value:
        t = LLTYPE[dtype]
        fn = declare(self.module, f"llvm.{name}.{FSUFFIX[dtype]}", t, [t] * len(args))
        return self.b.call(fn, list(args), fastmath=flags)

    def floordiv_const(self, a: ir.Value, c: int, mod: bool) -> ir.Value:
        """Floor division / modulo of ``a`` by a positive constant (Python semantics)."""
        t = a.type
        if c & (c - 1) == 0:
            shift = c.bit_length() - 1
            return self.b.and_(a, t(c - 1)) if mod else self.b.ashr(a, t(shift))
        q, r = self.b.sdiv(a, t(c)), self.b.srem(a, t(c))
        neg = self.b.icmp_signed("<", r, t(0))
        if mod:
            return self.b.add(r, self.b.select(neg, t(c), t(0)))
        return self.b.sub(q, self.b.zext(neg, t))

    def float_divmod(self, dtype: str, a: ir.Value, bv: ir.Value, mod: bool) -> ir.Value:
        """``a // b`` or ``a % b`` of floats as NumPy and ``ta.evaluate`` compute them: the remainder
        ``fmod``'s, moved to the divisor's sign; the quotient ``(a - mod) / b`` rounded to an integer.  No
        fast-math flags: the special values are part of the answer."""
        b, t = self.b, a.type
        zero, half, one = t(0.0), t(0.5), t(1.0)
        fmod = b.frem(a, bv)
        copysign = declare(self.module, f"llvm.copysign.{FSUFFIX[dtype]}", t, [t, t])
        nonzero = b.fcmp_unordered("!=", fmod, zero)  # C's ``if (mod)``: NaN is true
        flip = b.and_(nonzero, b.xor(b.fcmp_ordered("<", bv, zero), b.fcmp_ordered("<", fmod, zero)))
        if mod:
            return b.select(nonzero, b.select(flip, b.fadd(fmod, bv), fmod), b.call(copysign, [zero, bv]))
        div = b.fdiv(b.fsub(a, fmod), bv)
        div = b.select(flip, b.fsub(div, one), div)
        floor = b.call(declare(self.module, f"llvm.floor.{FSUFFIX[dtype]}", t, [t]), [div])
        floor = b.select(b.fcmp_ordered(">", b.fsub(div, floor), half), b.fadd(floor, one), floor)
        quotient = b.fdiv(a, bv)
        floor = b.select(b.fcmp_unordered("!=", div, zero), floor, b.call(copysign, [zero, quotient]))
        return b.select(b.fcmp_ordered("==", bv, zero), quotient, floor)

    def int_divmod(self, a: ir.Value, bv: ir.Value, mod: bool) -> ir.Value:
        """Python ``a // b`` or ``a % b`` for runtime ``b``; 0 where ``b == 0``, and no trap
        for ``INT_MIN // -1`` (the divisor -1 is handled by negation)."""
        t = a.type
        zero, one, m1 = t(0), t(1), t(-1)
        bad = self.b.or_(self.b.icmp_signed("==", bv, zero), self.b.icmp_signed("==", bv, m1))
        d = self.b.select(bad, one, bv)
        q, r = self.b.sdiv(a, d), self.b.srem(a, d)
        # floor correction: when r != 0 and sign(r) != sign(d)
        fix = self.b.and_(self.b.icmp_signed("!=", r, zero),
                          self.b.icmp_signed("<", self.b.xor(r, d), zero))
        if mod:
            res = self.b.select(fix, self.b.add(r, d), r)
            return self.b.select(bad, zero, res)
        res = self.b.select(fix, self.b.sub(q, one), q)
        neg = self.b.sub(zero, a)
        return self.b.select(self.b.icmp_signed("==", bv, m1), neg, self.b.select(bad, zero, res))


def const_value(dtype: str, value) -> ir.Constant:
    """The LLVM constant of ``value`` in ``dtype`` (a half value as its ``i16`` bits)."""
    if dtype == "bool":
        return I1(1 if value else 0)
    if dtype in ("float16", "bfloat16"):
        return I16(int(np.asarray(value, dtype=numpy_dtype(dtype)).view(np.uint16)))
    return LLTYPE[dtype](value)


def _const(node: Expr) -> ir.Value:
    if node.dtype == "int32" and not -(1 << 31) <= int(node.arg) < (1 << 31):
        # an int32 constant past int32 is exact index arithmetic: i64, as in ``ta.evaluate``
        return I64(int(node.arg))
    return const_value(node.dtype, node.arg)


def _cast(em: ExprEmitter, node: Expr, x: ir.Value) -> ir.Value:
    b, src, dst = em.b, node.src[0].dtype, node.dtype
    t = LLTYPE[dst]
    fsrc, fdst = src.startswith("float"), dst.startswith("float")
    if src == dst:
        return x
    if src in ("float16", "bfloat16"):  # widen to float32, then on as from float32
        x = halfconv.to_float32(b, x, src, em.f16c)
        wide = Expr(Op.CAST, "float32", node.src)
        return x if dst == "float32" else _cast(em, Expr(Op.CAST, dst, (wide,)), x)
    if dst in ("float16", "bfloat16"):  # from float32 only (the language casts there first)
        if src != "float32":
            x = _cast(em, Expr(Op.CAST, "float32", node.src), x)
        return halfconv.from_float32(b, x, dst, em.f16c)
    if dst == "bool":
        return b.fcmp_unordered("!=", x, x.type(0.0)) if fsrc else b.icmp_signed("!=", x, x.type(0))
    if src == "bool":
        return b.uitofp(x, t) if fdst else b.zext(x, t)
    if fsrc and fdst:
        return b.fpext(x, t) if dst == "float64" else b.fptrunc(x, t)
    if fdst:
        return b.sitofp(x, t)
    if fsrc:
        fn = declare(em.module, f"llvm.fptosi.sat.{FSUFFIX[dst]}.{FSUFFIX[src]}", t, [x.type])
        return b.call(fn, [x])
    if dst == "int64":
        return x if x.type == I64 else b.sext(x, t)
    return b.trunc(x, t)


def _value_rules(em: ExprEmitter) -> dict:
    b = em.b

    def fl(node):  # fast-math flags for float arithmetic (see llvm_emit.VALUE_FLAGS)
        return em.fast + ("reassoc",) if node in em.combining else em.fast

    def var_rule(node: Expr) -> ir.Value:
        if node in em.env:  # a loop variable: an exact i64 (see the module docstring)
            return em.env[node]
        if node in em.accs:
            return b.load(em.accs[node], typ=LLTYPE[node.dtype])
        raise KeyError(f"variable {node.name!r} is not bound in this loop nest")

    def arith(fop: str, iop: str) -> Callable:
        def rule(node, x, y):
            if node.dtype.startswith("float"):
                return getattr(b, fop)(x, y, flags=fl(node))
            return getattr(b, iop)(*em.widen(x, y))
        return rule

    def divmod_rule(mod: bool) -> Callable:
        def rule(node, x, y):
            if node.dtype.startswith("float"):
                return em.float_divmod(node.dtype, x, y, mod)
            d = node.src[1]
            if d.op is Op.CONST and int(d.arg) > 0:
                return em.floordiv_const(x, int(d.arg), mod)
            return em.int_divmod(*em.widen(x, y), mod)
        return rule

    def minmax(fname: str, iname: str) -> Callable:
        def rule(node, x, y):
            if node.dtype.startswith("float"):  # IEEE maximum/minimum: NaN propagates, -0 < +0
                return em.call(fname, node.dtype, x, y, flags=fl(node))
            x, y = em.widen(x, y)
            fn = declare(em.module, f"llvm.{iname}.i{x.type.width}", x.type, [x.type, x.type])
            return b.call(fn, [x, y])
        return rule

    def cmp(node, x, y):
        op = _ICMP[node.op]
        if node.src[0].dtype.startswith("float"):
            return b.fcmp_unordered(op, x, y) if node.op is Op.NE else b.fcmp_ordered(op, x, y)
        if node.src[0].dtype == "bool":
            return b.icmp_unsigned(op, x, y)
        return b.icmp_signed(op, *em.widen(x, y))

    def select(node, c, x, y):
        if node.dtype == "int32":
            return b.select(c, *em.widen(x, y))
        out = b.select(c, x, y)
        return freeze(b, out) if _float_minmax_shaped(node) else out

    vector_math = {Op.EXP: "exp", Op.LOG: "log", Op.TANH: "tanh"}  # no libm calls

    def unary_math(node, x):
        if node.op in vector_math and node.dtype.startswith("float"):
            return em.math(vector_math[node.op], x)
        if node.op is Op.ABS and not node.dtype.startswith("float"):
            fn = declare(em.module, f"llvm.abs.i{x.type.width}", x.type, [x.type, I1])
            return b.call(fn, [x, I1(0)])
        return em.call(_UNARY_INTRINSIC[node.op], node.dtype, x, flags=fl(node))

    def power(node, x, y):
        if node.dtype.startswith("float"):
            e = node.src[1]
            n = float(e.arg) if e.op is Op.CONST else 0.5
            if n.is_integer() and (n in (2.0, -1.0) or (em.fast and 2 <= abs(n) <= MAX_MULTIPLIED_POWER)):
                return small_power(node, x, int(n))
            return em.math("pow", x, y)
        return em.call("pow", node.dtype, x, y, flags=fl(node))

    def small_power(node, x, n: int):
        """``x ** n`` by multiplication: squares and ``1 / x`` always (one rounding, as the correct
        power), cubes and fourth powers under fast math only (two).  No fast-math flags: a contraction in
        one copy of an expression and not another breaks exact ties."""
        k = abs(n)
        out = x if k == 1 else b.fmul(x, x)
        if k > 2:
            out = b.fmul(out, x if k == 3 else out)
        return b.fdiv(ir.Constant(out.type, 1.0), out) if n < 0 else out

    def neg(node, x):
        return b.fneg(x, flags=fl(node)) if node.dtype.startswith("float") else b.neg(x)

    rules = {
        Op.VAR: var_rule,
        Op.CONST: _const,
        Op.ADD: arith("fadd", "add"),
        Op.SUB: arith("fsub", "sub"),
        Op.MUL: arith("fmul", "mul"),
        Op.DIV: lambda n, x, y: b.fdiv(x, y, flags=fl(n)),
        Op.FLOORDIV: divmod_rule(False),
        Op.MOD: divmod_rule(True),
        Op.NEG: neg,
        Op.POW: power,
        Op.MAXIMUM: minmax("maximum", "smax"),
        Op.MINIMUM: minmax("minimum", "smin"),
        Op.AND: lambda n, x, y: b.and_(x, y),
        Op.OR: lambda n, x, y: b.or_(x, y),
        Op.NOT: lambda n, x: b.xor(x, I1(1)),
        Op.SELECT: select,
        Op.CAST: lambda n, x: _cast(em, n, x),
        Op.SIGMOID: lambda n, x: em.math("sigmoid", x),
        Op.ERF: lambda n, x: em.math("erf", x),
        Op.READ: lambda n, *idx: em.load(n.arg, n.src),
        Op.DATA_INDEX: lambda n, x: em.data_index(n, x),
    }
    for op in _ICMP:
        rules[op] = cmp
    for op in _UNARY_INTRINSIC:
        rules[op] = unary_math
    return rules


def _index_rules(em: ExprEmitter) -> dict:
    b = em.b

    def var_rule(node):
        try:
            return em.env[node]
        except KeyError:
            raise KeyError(f"index variable {node.name!r} is not bound in this loop nest") from None

    def divmod_rule(mod: bool):
        def rule(node, x, y):
            d = node.src[1]
            if d.op is Op.CONST and int(d.arg) > 0:
                return em.floordiv_const(x, int(d.arg), mod)
            return em.int_divmod(x, y, mod)
        return rule

    def minmax(name):
        return lambda n, x, y: b.call(declare(em.module, f"llvm.{name}.i64", I64, [I64, I64]), [x, y])

    def narrowing_cast(node, x):
        """Index arithmetic is exact in ``i64``; a cast to a narrower integer type wraps (as in
        ``ta.evaluate``) unless the operand is proved within the type."""
        return x if cast_keeps_value(node, em.bounds_memo) else b.sext(b.trunc(x, LLTYPE[node.dtype]), I64)

    rules = {
        Op.VAR: var_rule,
        Op.CONST: lambda n: I1(1 if n.arg else 0) if n.dtype == "bool" else I64(int(n.arg)),
        Op.ADD: lambda n, x, y: b.add(x, y, flags=("nsw",)),
        Op.SUB: lambda n, x, y: b.sub(x, y, flags=("nsw",)),
        Op.MUL: lambda n, x, y: b.mul(x, y, flags=("nsw",)),
        Op.NEG: lambda n, x: b.sub(I64(0), x, flags=("nsw",)),
        Op.FLOORDIV: divmod_rule(False),
        Op.MOD: divmod_rule(True),
        Op.MAXIMUM: minmax("smax"),
        Op.MINIMUM: minmax("smin"),
        Op.CAST: narrowing_cast,
        Op.SELECT: lambda n, c, x, y: b.select(c, x, y),
        Op.AND: lambda n, x, y: b.and_(x, y),
        Op.OR: lambda n, x, y: b.or_(x, y),
        Op.NOT: lambda n, x: b.xor(x, I1(1)),
    }
    for op, sym in _ICMP.items():
        rules[op] = lambda n, x, y, sym=sym: b.icmp_signed(sym, x, y)
    return rules
