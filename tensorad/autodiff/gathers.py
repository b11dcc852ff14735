"""Checked gathers in derivatives: which reads run everywhere, and indices that must not raise.

A gather with ``mode="raise"`` tests its index where it runs, and a derivative may evaluate it at more
points than the program did (an adjoint's equation over its whole sum, a tangent's read the optimizer
takes out of its guard).  There the index is clipped instead: exact where the guard holds, harmless where
it does not (the term carries the guard).  A read the program runs at every point keeps its test."""

from __future__ import annotations

from dataclasses import replace

from ..ir.expr import TRUE, Expr, Op, data_index
from ..ir.rewrite import rewrite, walk_along


def unguarded_reads(source: Expr) -> set[Expr]:
    """The reads of ``source`` evaluated at every point (in no ``if_then_else`` branch nor ``where``)."""
    def evaluated(node: Expr) -> tuple[Expr, ...]:
        lazy = node.op is Op.IF_THEN_ELSE or node.op is Op.REDUCE and node.src[0] is not TRUE
        return node.src[:1] if lazy else node.src

    return {n for n in walk_along(source, evaluated) if n.op is Op.READ}


def unchecked(e: Expr) -> Expr:
    """``e`` with its ``mode="raise"`` gather indices clipped instead (see the module docstring)."""
    def rule(n: Expr) -> Expr | None:
        if n.op is Op.DATA_INDEX and n.arg.mode == "raise":
            return Expr(Op.DATA_INDEX, n.dtype, n.src, replace(n.arg, mode="clip"))
        return None
    return rewrite(e, rule)


def unchecked_read_index(index: tuple[Expr, ...], shape: tuple[int, ...], tensor: str) -> tuple[Expr, ...]:
    """A read's ``index`` with its checked gathers clipped (:func:`unchecked`), each axis whose index that
    changed clipped into the axis as well, so that the read stays provably in bounds where its guard
    fails.  Affine indices are left alone: the optimizer reads them."""
    out = []
    for k, (e, n) in enumerate(zip(index, shape)):
        u = unchecked(e)
        out.append(e if u == e else data_index(u, n, "clip", tensor, k))
    return tuple(out)
