"""A box cut into the pieces its zero-guards decide (codegen/loops/box_pieces.py ``guard_pieces``), and the
points of an unrolled stencil that run as scalar code (codegen/strategies/stencil.py ``scalar_points``)."""

from __future__ import annotations

import pytest
from tensorad.codegen.loops import box_pieces
from tensorad.codegen.loops.box_pieces import GUARD_ATTR, guard_pieces
from tensorad.codegen.strategies.stencil import scalar_points
from tensorad.codegen.target import parse_target

import tensorad as ta
from tensorad.ir.tensor import ComputeOp
from tensorad.poly.affine import IndexSpace


def _shifted_sum(n: int) -> ComputeOp:
    """``T[i] = A[i - 1] + A[i + 1]``, each read guarded: pieces ``[1, n - 2]``, ``[n - 1]``, ``[0]``."""
    A = ta.placeholder((n,), name="A")
    i = ta.ir.var("i", 0, n)
    body = ta.if_then_else(i >= 1, A[i - 1], 0.0) + ta.if_then_else(i <= n - 2, A[i + 1], 0.0)
    return ComputeOp("T", "", (i,), (body,), ((GUARD_ATTR, True),))


def test_pieces_not_decided_are_the_decided_pieces_and_rewrite_nothing(monkeypatch):
    """Without ``decide`` the pieces are those the guards decide (equal sets, in the same order), each with
    the op's own body, and no body is rewritten for them."""
    op = _shifted_sum(10)
    space = IndexSpace(op.axes)
    decided = guard_pieces(space, space.box(), op.body[0])
    rewrites: list = []
    monkeypatch.setattr(box_pieces, "substitute", lambda *a: rewrites.append(a))
    alone = guard_pieces(space, space.box(), op.body[0], decide=False)
    assert not rewrites and len(alone) == len(decided) == 3
    assert all(p.is_equal(q) and body is op.body[0] for (p, body), (q, _) in zip(alone, decided))
    assert [p.count_val().to_python() for p, _ in alone] == [8, 1, 1]


@pytest.mark.parametrize("n, spec, want", [
    (10, "llvm -mcpu=haswell", (10, 0)),          # rows 8, 1, 1: each within a vector of 8
    (20, "llvm -mcpu=haswell", (4, 2)),           # a row of 18: 18 % 8 = 2 scalar, foldable where masked
    (20, "llvm -mcpu=skylake-avx512", (2, 0)),    # masked memory folds the row of 18 (8 < 18 < 4 * 8)
])
def test_scalar_points_of_each_piece_and_those_masked_memory_folds(n, spec, want):
    """The scalar points of the pieces ``[1, n - 2]``, ``[n - 1]`` and ``[0]`` at 8 lanes, and of those the
    ones a target with cheap masked memory would fold into a masked vector."""
    assert scalar_points(_shifted_sum(n), parse_target(spec), 8) == want
