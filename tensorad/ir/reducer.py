"""Commutative reducers: the combiner of a ``REDUCE`` node.

A :class:`CommReducer` is ``(lhs, rhs) -> result`` over tuples of value variables, with an identity;
``kind`` names the built-ins (``sum``, ``max``, ``min``, ``prod``), else ``custom``.  :class:`Reducer` is
the user-facing callable (``ta.sum``, ``ta.comm_reducer(...)``) that builds ``REDUCE`` nodes, with one
cached ``CommReducer`` per tuple of source dtypes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import dtype as dt
from .expr import TRUE, Expr, Op, ReduceArg, as_expr, cast, const, is_tensor, scalar_use_error, var, widen


@dataclass(frozen=True)
class CommReducer:
    """``result = combine(lhs, rhs)`` elementwise over tuples; ``identity`` is the start value."""

    name: str
    kind: str  # "sum" | "max" | "min" | "prod" | "custom"
    lhs: tuple[Expr, ...]
    rhs: tuple[Expr, ...]
    result: tuple[Expr, ...]
    identity: tuple[Expr, ...]
    #: a custom combiner whose terms give the same bits combined in any order and grouping (a
    #: winner's: ties broken by index, counts added); code generation may then combine in lanes
    order_free: bool = False
    #: the combiners autodiff derives from this one (its pair, mean-tie and winner forms), each
    #: made once, so that derived nodes hash-cons; they live as long as this combiner
    derived: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def arity(self) -> int:
        return len(self.lhs)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(v.dtype for v in self.lhs)


class Reducer:
    """A reduction the user calls like ``ta.sum(expr, axis, where=None)``.

    ``fcombine(lhs, rhs)`` and ``fidentity(*dtypes)`` receive/return single expressions for a
    one-value reducer and tuples for a multi-value reducer (argmax: ``(index, value)``)."""

    def __init__(self, fcombine: Callable, fidentity: Callable, name: str = "reducer",
                 kind: str = "custom") -> None:
        self.fcombine, self.fidentity, self.name, self.kind = fcombine, fidentity, name, kind
        self._instances: dict[tuple[str, ...], CommReducer] = {}

    def instantiate(self, dtypes: tuple[str, ...]) -> CommReducer:
        """The combiner for sources of ``dtypes`` (built once per dtype tuple)."""
        found = self._instances.get(dtypes)
        if found is not None:
            return found
        n = len(dtypes)
        lhs = tuple(var("x" if n == 1 else f"x{i}", dtype=d) for i, d in enumerate(dtypes))
        rhs = tuple(var("y" if n == 1 else f"y{i}", dtype=d) for i, d in enumerate(dtypes))
        if n == 1:
            result = (self.fcombine(lhs[0], rhs[0]),)
            identity = (self.fidentity(*dtypes),)
        else:
            result = tuple(self.fcombine(lhs, rhs))
            identity = tuple(self.fidentity(*dtypes))
        if len(result) != n or len(identity) != n:
            raise ValueError(f"reducer {self.name!r}: combiner and identity must return "
                             f"{n} values, one per reduced source")
        result = tuple(_coerce(r, d, self.name, "combiner") for r, d in zip(result, dtypes))
        identity = tuple(_coerce(v, d, self.name, "identity") for v, d in zip(identity, dtypes))
        inst = CommReducer(self.name, self.kind, lhs, rhs, result, identity)
        self._instances[dtypes] = inst
        return inst

    def __call__(self, expr: Any, axis: Any, where: Any = None) -> Any:
        single = not isinstance(expr, (tuple, list))
        sources = (expr,) if single else tuple(expr)
        for s in sources:
            if is_tensor(s):
                axis_text = axis if isinstance(axis, int) else "..."
                whole = (f"ta.topi.{self.kind}({{}}, axis={axis_text})"
                         if self.kind in ("sum", "max", "min", "prod") else "")
                raise scalar_use_error(s, whole)
        sources = tuple(widen(as_expr(s)) for s in sources)  # half values accumulate in float32
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        for ax in axes:
            if not (isinstance(ax, Expr) and ax.op is Op.VAR and ax.lo is not None):
                raise TypeError(f"{self.name}: axis must be a ta.reduce_axis, got {ax!r}")
        if len(set(axes)) != len(axes):
            raise ValueError(f"{self.name}: an axis is listed twice")
        cond = TRUE if where is None else as_expr(where)
        if cond.dtype != dt.BOOL:
            raise TypeError(f"{self.name}: `where` must be a condition, got a {cond.dtype} expression")
        for s in sources:
            if s.dtype == dt.BOOL:
                raise TypeError(f"{self.name}: cannot reduce a boolean expression; cast it first")
        comb = self.instantiate(tuple(s.dtype for s in sources))
        nodes = tuple(Expr(Op.REDUCE, s.dtype, (cond,) + sources, ReduceArg(comb, axes, i))
                      for i, s in enumerate(sources))
        return nodes[0] if single else nodes

    def __repr__(self) -> str:
        return f"Reducer({self.name})"


def _coerce(x: Any, dtype: str, name: str, what: str) -> Expr:
    e = as_expr(x, dtype)
    if e.weak and dt.is_float(dtype):
        return cast(dtype, e)
    if e.dtype != dtype:
        if e.op is Op.CONST:
            return const(e.arg, dtype)
        raise TypeError(f"reducer {name!r}: {what} has dtype {e.dtype}, expected {dtype}")
    return e


def comm_reducer(fcombine: Callable, fidentity: Callable, name: str = "reducer") -> Reducer:
    """A custom commutative reducer (API.md section 1)."""
    return Reducer(fcombine, fidentity, name, "custom")


sum = Reducer(lambda x, y: x + y, lambda d: const(0, d), "sum", "sum")  # noqa: A001
prod = Reducer(lambda x, y: x * y, lambda d: const(1, d), "prod", "prod")
max = Reducer(lambda a, b: Expr(Op.MAXIMUM, a.dtype, (a, b)),  # noqa: A001
              lambda d: const(dt.min_value(d), d), "max", "max")
min = Reducer(lambda a, b: Expr(Op.MINIMUM, a.dtype, (a, b)),  # noqa: A001
              lambda d: const(dt.max_value(d), d), "min", "min")

BUILTIN_REDUCERS: dict[str, Reducer] = {"sum": sum, "prod": prod, "max": max, "min": min}
