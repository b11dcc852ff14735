"""Whether an elementwise body is a sum of pieces that tile its box (a split's adjoint).

``g.grad[i, j] = [j < 512] di[i, j] + [512 <= j < 1024] df[i, j - 512] + ...`` -- the adjoint
of a tensor that ``topi.split`` (or any set of slices) cuts into pieces -- is nonzero
everywhere, each term on its own part of the box.  Inlined into a sum that reads it (a
matrix product's weight gradient ``sum_i g.grad[i, o] X[i, k]``), :mod:`.sums.split` cuts that sum
into one product per piece, each over its slice of the output and with a temporary of the
whole output to add up: the same work in several small products, padded operands, memsets
and a pass adding the pieces.  Kept as one tensor, the sum stays one product over one
operand written once.  Inlining such a body saves no work (its pieces cover the box, so no
zero is skipped) and it is the only case kept: pieces that overlap or leave part of the box
zero (an unused gate) are inlined as before, as the split then skips zeros; so are pieces
whose conditions tie two axes (a diagonal and the rest: the split of a sum over the diagonal
eliminates its variable), as only a slicing's pieces, each a condition on one axis at a time,
are known to lose nothing by it.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorad.ir.expr import Expr
from tensorad.ir.rewrite import free_vars
from tensorad.poly.domain import IndexSet

from ..algebra.logic import conjuncts
from .eliminate import space_of, split_affine
from .split import group_terms


def tiles_box(axes: Sequence[Expr], body: Expr, ctx=None) -> bool:
    """Whether ``body`` is a sum of 2+ groups of terms whose affine nonzeroness conditions
    over ``axes`` are pairwise disjoint, none the whole box, and together cover the box, each
    condition a conjunction of tests of one axis each."""
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
