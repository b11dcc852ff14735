"""Checked gathers in derivatives: which reads run everywhere, and indices that must not raise.

A gather with ``mode="raise"`` tests its index where it runs, and a derivative may evaluate it at more
points than the program did (an adjoint's equation over its whole sum, a tangent's read the optimizer
takes out of its guard).  There the index is clipped instead: exact where the guard holds, harmless where
it does not (the term carries the guard).  A read the program runs at every point keeps its test.

An adjoint's equation ``index == j`` through a guarded checked gather ``data_index(f)`` whose ``f`` is one
of the sum's variables ``v`` plus data (``len[p] - 1 - i``) is solved for ``v`` here
(:func:`landing_equations`): the equation is a gather of the head (each ``j`` reads the one ``v``), not a
scatter-add over ``v``, when ``v`` has no fewer points than the axis ``j``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..ir.expr import TRUE, Expr, Op, compare, data_index
from ..ir.rewrite import free_vars, rewrite, walk_along
from ..poly.linear import solve_for, to_linear


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


def landing_equations(index: Sequence[Expr], j: Sequence[Expr], shape: Sequence[int],
                      variables: Sequence[Expr]) -> list[Expr]:
    """``index == j`` for a read's ``index`` into ``shape`` under a guard, one equation per axis: a checked
    gather ``data_index(f)`` with ``f = v + rest`` or ``-v + rest`` (``v`` the one of the sum's ``variables``
    it holds that no other axis's index is, of as many points as the axis or more) as ``f == j``, exact
    where the guard holds (the program's check proved ``f`` in bounds there), which the optimizer solves
    for ``v``: a gather of the head; else :func:`unchecked`'s equation."""
    out = []
    for e, jk, extent in zip(index, j, shape):
        held = [v for v in variables if v in free_vars(e) and v not in index]
        raw = e.op is Op.DATA_INDEX and e.arg.mode == "raise" and len(held) == 1 \
            and solve_for(to_linear(e.src[0]), held[0]) is not None \
            and all(type(b) is int for b in held[0].dom) and held[0].hi - held[0].lo >= extent
        out.append(compare(Op.EQ, e.src[0] if raw else unchecked(e), jk))
    return out
