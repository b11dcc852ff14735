"""``ta.evaluate`` evaluates a large grid box by box (the unoptimized gradient
of a 5x5 convolution broadcast a 17 GiB mask over its outer and reduce axes; the worker was
killed for memory).  Oracles: NumPy formulas written here, and the evaluator with one box."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorad as ta
from tensorad.ir.rewrite import substitute
from tensorad.ir.tensor import ComputeOp
from tensorad.reference import numpy_eval
from tensorad.reference.numpy_eval import grid_boxes


@settings(deadline=None, max_examples=60, derandomize=True)
@given(st.lists(st.integers(0, 5), max_size=4), st.integers(0, 7), st.integers(1, 40))
def test_boxes_tile_the_outer_grid_once_within_the_budget(extents, inner, budget):
    boxes = grid_boxes(extents, inner, budget)
    seen = np.zeros(extents, dtype=int)
    for box in boxes:
        assert len(box) == len(extents)
        seen[tuple(slice(r.start, r.stop) for r in box)] += 1
        points = int(np.prod([len(r) for r in box])) * max(inner, 1)
        assert points <= max(budget, max(inner, 1))  # one outer point at least
    assert (seen == 1).all()


def _matmul(n):
    a = ta.placeholder((n, n), "float64", name="A")
    b = ta.placeholder((n, n), "float64", name="B")
    k = ta.reduce_axis((0, n), name="k")
    return a, b, ta.compute((n, n), lambda i, j: ta.sum(a[i, k] * b[k, j], axis=k), name="C")


def test_a_large_reduction_grid_stays_within_its_budget():
    n = 400  # 64e6 grid points: 512 MB per float64 array in one box
    a, b, c = _matmul(n)
    rng = np.random.default_rng(0)
    av, bv = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    tracemalloc.start()
    try:
        got = ta.evaluate(c, {a: av, b: bv})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(got, av @ bv, rtol=1e-10, atol=1e-10)
    assert peak < 30 * numpy_eval.GRID_BUDGET * 8  # a few arrays of one box, not 512 MB each


@pytest.mark.parametrize("budget", [1, 7, 64])
def test_boxes_give_the_one_box_result(monkeypatch, budget):
    x = ta.placeholder((5, 6), "float64", name="X")
    k = ta.reduce_axis((1, 5), name="k")
    y = ta.compute((5, 6, 3), lambda i, j, c: ta.if_then_else(
        i + c >= 2, ta.sum(x[k, j] * x[i, (j + c) % 6], axis=k, where=k != i), -1.0), name="Y")
    xv = np.random.default_rng(1).standard_normal((5, 6))
    want = ta.evaluate(y, {x: xv})
    monkeypatch.setattr(numpy_eval, "GRID_BUDGET", budget)
    got = ta.evaluate(y, {x: xv})
    np.testing.assert_array_equal(got, want)
    ref = np.full((5, 6, 3), -1.0)
    for i in range(5):
        for j in range(6):
            for c in range(3):
                if i + c >= 2:
                    ref[i, j, c] = sum(xv[kk, j] * xv[i, (j + c) % 6] for kk in range(1, 5) if kk != i)
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_an_out_of_range_gather_is_named_at_its_point_in_a_later_box(monkeypatch):
    x = ta.placeholder((4,), "float64", name="X")
    g = ta.placeholder((6,), "int32", name="G")
    y = ta.compute((6, 2), lambda i, j: x.take(g[i], mode="raise") + j, name="Y")
    gv = np.array([0, 1, 2, 3, 9, 0], "int32")  # 9 is out of range, at i = 4
    monkeypatch.setattr(numpy_eval, "GRID_BUDGET", 2)
    with pytest.raises(IndexError, match=r"i=4") as info:
        ta.evaluate(y, {x: np.arange(4.0), g: gv})
    monkeypatch.setattr(numpy_eval, "GRID_BUDGET", 1 << 21)
    with pytest.raises(IndexError) as whole:
        ta.evaluate(y, {x: np.arange(4.0), g: gv})
    assert str(info.value) == str(whole.value)


def test_the_box_budget_counts_reduce_points_of_one_reduction_not_the_union():
    """Passes put several reductions in one body (inlined bodies); each one's arrays span its
    own reduce axes, the others' are size-1 grid dimensions."""
    x = ta.placeholder((10, 20), "float64", name="X")
    a, b = ta.reduce_axis((0, 10), name="a"), ta.reduce_axis((0, 20), name="b")
    s1 = ta.compute((3,), lambda i: ta.sum(x[a, i], axis=a), name="S1")
    s2 = ta.compute((3,), lambda i: ta.sum(x[i, b] * x[0, b], axis=b), name="S2")
    i1, i2 = s1.op.axes[0], s2.op.axes[0]
    both = s1.op.body[0] + substitute(s2.op.body[0], {i2: i1})
    assert numpy_eval._widest_reduction([both]) == 20  # not 10 x 20
    op = ComputeOp("S", "", (i1,), (both,), ())
    xv = np.random.default_rng(2).standard_normal((10, 20))
    got = numpy_eval.evaluate_op(op, {x: xv})[0]
    np.testing.assert_allclose(got, [xv[:, i].sum() + xv[i] @ xv[0] for i in range(3)], rtol=1e-12)
