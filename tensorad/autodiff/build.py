"""Small builders shared by the autodiff modules: fresh variables, conditions, tensors.  Every tensor
autodiff creates gets its own axis and reduce-axis variables, so no two ops share one
(:func:`~tensorad.ir.rewrite.rename` substitutes them, the axes inside ``REDUCE`` nodes included)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..ir import dtype as dt
from ..ir.expr import TRUE, Expr, Op, choice, compare, const, copies, logical, var
from ..ir.reducer import sum as sum_reducer
from ..ir.rewrite import rename as rename
from ..ir.rewrite import walk
from ..ir.tensor import Provenance, Role, Tensor
from ..lang import make_compute

Optimizer = Callable[[Tensor], Tensor]  # the facade's optimizer, passed in


def copy_vars(variables: Sequence[Expr]) -> dict[Expr, Expr]:
    """Fresh variables with the same names and ranges, by the variables they copy."""
    return dict(zip(variables, copies(variables)))


def axis_vars(shape: Sequence[int], prefix: str = "ax", start: int = 0) -> list[Expr]:
    return [var(f"{prefix}{start + d}", 0, s) for d, s in enumerate(shape)]


def all_of(conds: Sequence[Expr]) -> Expr:
    """The conjunction of ``conds`` (``True`` drops out)."""
    out = TRUE
    for c in conds:
        if c is TRUE:
            continue
        out = c if out is TRUE else logical(Op.AND, out, c)
    return out


def equal_all(lhs: Sequence[Expr], rhs: Sequence[Expr]) -> Expr:
    """``lhs[0] == rhs[0] && lhs[1] == rhs[1] && ...``"""
    return all_of([compare(Op.EQ, a, b) for a, b in zip(lhs, rhs)])


def delta(cond: Expr, dtype: str) -> Expr:
    """``select(cond, 1, 0)``: the derivative of a read by an element (1 when they coincide)."""
    return const(1, dtype) if cond is TRUE else choice(Op.SELECT, cond, const(1, dtype), const(0, dtype))


def head_sum(value: Expr, axes: Sequence[Expr], where: Expr) -> Expr:
    """``sum(value, axes, where)``; with no axes, ``select(where, value, 0)``."""
    if axes:
        return sum_reducer(value, list(axes), where=None if where is TRUE else where)
    return value if where is TRUE else choice(Op.SELECT, where, value, const(0, value.dtype))


def compute(name: str, axes: Sequence[Expr], bodies: Sequence[Expr],
            provenance: Provenance | None = None) -> tuple[Tensor, ...]:
    """A compute op built by a pass (no isl bounds proof: reads are in bounds by construction)."""
    return make_compute(name, axes, bodies, check_bounds=False, provenance=provenance)


def compute_each(name: str, axes: Sequence[Expr], bodies: Sequence[Expr]) -> list[Tensor]:
    """One compute of ``bodies`` over ``axes`` when they are one reduction's outputs (or none is a
    reduction), else one compute per body over copies of ``axes`` (the derivatives of a tuple's
    components apart, as a sum beside a product, are reductions of their own)."""
    calls = {(b.arg.combiner, b.arg.axes, b.src) if b.op is Op.REDUCE else None for b in bodies}
    if len(calls) == 1 or calls == {None}:
        return list(compute(name, axes, bodies))
    out = []
    for v, b in enumerate(bodies):
        bound = dict.fromkeys(k for n in walk(b) if n.op is Op.REDUCE for k in n.arg.axes)
        m = copy_vars(list(axes) + list(bound))
        out += compute(f"{name}{v}", [m[a] for a in axes], [rename(b, m)])
    return out


def adjoint_of(x: Tensor) -> Provenance:
    """The provenance of ``x``'s adjoint (the optimizer may fuse gathers of adjoint sums)."""
    return Provenance(Role.ADJOINT, source=x)


def zeros(shape: Sequence[int], dtype: str, name: str, provenance: Provenance | None = None) -> Tensor:
    return compute(name, axis_vars(shape), [const(0, dtype)], provenance)[0]


def identity(shape: Sequence[int], dtype: str, name: str) -> Tensor:
    """``I[p..., i...] = 1 if p == i else 0`` with ``p`` and ``i`` both of ``shape``."""
    p = axis_vars(shape)
    i = axis_vars(shape, start=len(shape))
    return compute(name, p + i, [delta(equal_all(p, i), dtype)])[0]


def check_float(t: Tensor, what: str) -> None:
    if not isinstance(t, Tensor):  # arrays and expressions have a dtype too: say what is wrong
        raise TypeError(f"{what}: expected a tensor, got {type(t).__name__}")
    if not dt.is_float(t.dtype):
        raise TypeError(f"{what}: tensor {t.name!r} has dtype {t.dtype}; only floating-point "
                        "tensors are differentiable (integer tensors have no gradient)")
