"""Checked gathers in derivatives: which reads run everywhere, and indices that must not raise.

A gather ``X[.., I[i], ..]`` with ``mode="raise"`` tests its index where it runs.  A derivative
may evaluate an expression at more points than the program did -- the adjoint's equation
``phi(i) == j`` at every point of its sum, a tangent's read inside a sum the optimizer then
takes out of its guard (``sum_r if_then_else(G, f(U[I[i]]), 0) = if_then_else(G, [sum_r
f(U[I[i]])], 0)``: the bracket runs where ``G`` fails).  There the index is clipped instead:
exact where the guard holds (the program's read ran, so its index was in range) and harmless
where it does not (the term's value carries the guard).  A read the program runs at every
point keeps its test, so bad data still raises.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir.expr import TRUE, Expr, Op, data_index
from ..ir.rewrite import rewrite, walk_along


def unguarded_reads(source: Expr) -> set[Expr]:
    """The reads of ``source`` evaluated at every point (not only in a branch of an
    ``if_then_else``, nor only where a reduction's ``where`` holds): those whose gather
    indices may be checked wherever the term runs."""
    def evaluated(node: Expr) -> tuple[Expr, ...]:
        lazy = node.op is Op.IF_THEN_ELSE or node.op is Op.REDUCE and node.src[0] is not TRUE
        return node.src[:1] if lazy else node.src

    return {n for n in walk_along(source, evaluated) if n.op is Op.READ}


def unchecked(e: Expr) -> Expr:
    """``e`` with its ``mode="raise"`` gather indices clipped instead (see the module
    docstring)."""
    def rule(n: Expr) -> Expr | None:
        if n.op is Op.DATA_INDEX and n.arg.mode == "raise":
            return Expr(Op.DATA_INDEX, n.dtype, n.src, replace(n.arg, mode="clip"))
        return None
    return rewrite(e, rule)


def unchecked_read_index(index: tuple[Expr, ...], shape: tuple[int, ...], tensor: str) -> tuple[Expr, ...]:
    """A read's ``index`` with its checked gathers clipped (:func:`unchecked`), each axis whose
    index that changed clipped into the axis as well: where the read's guard holds the index
    is in range and nothing moves, and where it fails the read stays in bounds -- provably, for
    the bounds check at definition, which cannot relate a guard on the checked gather to the
    clipped one (a tangent read ``u[.., clip(g, 5)]`` of an axis of 3 under
    ``data_index(g, 5, raise) < 3``).  Affine indices are left alone: the optimizer reads them."""
    out = []
    for k, (e, n) in enumerate(zip(index, shape)):
        u = unchecked(e)
        out.append(e if u == e else data_index(u, n, "clip", tensor, k))
    return tuple(out)
