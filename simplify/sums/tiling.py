"""Whether an elementwise body is a sum of pieces that tile its box (a split's adjoint).

``g.grad[i, j] = [j < 512] di[i, j] + [512 <= j < 1024] df[i, j - 512] + ...`` is nonzero everywhere, each
term on its part of the box.  Inlined into a sum, :mod:`.sums.split` would cut that sum into one per
piece, with the same work; kept as one tensor, the sum stays one.  Only such a body is kept: pieces that
overlap, leave part of the box zero, or whose conditions tie two axes are inlined."""

from __future__ import annotations

from collections.abc import Sequence

from tensorad.ir.expr import Expr
from tensorad.ir.rewrite import free_vars
from tensorad.poly.domain import IndexSet

from ..algebra.logic import conjuncts
from .eliminate import space_of, split_affine
from .split import group_terms


def tiles_box(axes: Sequence[Expr], body: Expr, ctx=None) -> bool:
    """Whether ``body`` is a sum of 2+ groups of terms whose affine nonzeroness conditions over ``axes``
    (each testing one axis at a time) partition the box."""
    groups = group_terms(body, ctx)
    if groups is None or not axes:
        return False
    space = space_of(axes, ctx)
    box = IndexSet.box(axes, space=space).set
    union = None
    for nz, _ in groups:
        affine, _ = split_affine(conjuncts(nz), axes, ctx)
        if any(len(set(free_vars(c)) & set(axes)) > 1 for c in affine):
            return False
        piece = IndexSet.from_conditions(axes, affine, space).set
        if piece.is_empty() or box.is_subset(piece):
            return False
        if union is not None and not union.intersect(piece).is_empty():
            return False
        union = piece if union is None else union.union(piece)
    return union is not None and box.is_subset(union)
