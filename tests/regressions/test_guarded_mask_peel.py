"""A scatter's masks keep what their lazy guards protect.

The scatter-add (codegen/strategies/scatter.py) peeled ``if_then_else(c, select(d, e, 0), 0)`` into
one condition ``c && d`` of its nest.  ``&&`` computes both sides, so ``d`` ran where ``c``
excludes it: the gradient of a guarded ReLU of a checked gather raised IndexError (the
index the guard excludes), and a mask read proved in bounds only under its guard read
outside its tensor.  The oracles: ``ta.evaluate`` and NumPy formulas written here.
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.codegen.strategies.zero_masks import all_of, peel_masks

import tensorad as ta
from tensorad.ir.expr import FALSE, Op, choice, data_index
from tensorad.ir.intrange import may_fault

G = np.array([0, 1, -3, 5, 1, -1], "int32")  # 2 g is in [0, 3) at rows 0 and 1 only
X = np.array([0.5, -1.0, 2.0])
H = np.arange(1.0, 7.0)


def _guarded_relu_of_a_gather():
    x = ta.placeholder((3,), "float64", name="x")
    g = ta.placeholder((6,), "int32", name="g")
    h = ta.placeholder((6,), "float64", name="h")
    y = ta.compute((6,), lambda i: ta.if_then_else(
        (2 * g[i] >= 0) & (2 * g[i] < 3),
        ta.select(x.take(2 * g[i], mode="raise") > 0.0, x.take(2 * g[i], mode="raise") * h[i], 0.0),
        0.0), name="y")
    r = ta.reduce_axis((0, 6), name="r")
    loss = ta.compute((), lambda: ta.sum(y[r], axis=r), name="loss")
    return x, g, h, y, loss


def _want_grad():
    """d/dx of sum_i [0 <= 2 g_i < 3] relu-mask(x[2 g_i]) x[2 g_i] h_i."""
    want = np.zeros(3)
    for gi, hi in zip(G, H):
        k = 2 * int(gi)
        if 0 <= k < 3 and X[k] > 0:
            want[k] += hi
    return want


@pytest.mark.parametrize("checked", [False, True])
def test_gradient_of_a_guarded_relu_of_a_checked_gather(checked):
    x, g, h, y, loss = _guarded_relu_of_a_gather()
    dx, = ta.gradient(loss, [x])
    got = ta.build([dx], [x, g, h], checked=checked)(X, G, H)
    np.testing.assert_allclose(got, _want_grad())
    np.testing.assert_allclose(ta.evaluate([dx], {x: X, g: G, h: H})[0], _want_grad())


@pytest.mark.parametrize("checked", [False, True])
def test_hvp_and_jvp_of_a_guarded_relu_of_a_checked_gather(checked):
    """``y_i = [0 <= 2 g_i < 3] [x_k > 0] x_k^2 h_i`` with ``k = 2 g_i``: the HVP scatters
    ``2 h_i v_k`` under both masks, the jvp is ``2 x_k v_k h_i`` there."""
    x = ta.placeholder((3,), "float64", name="x")
    g = ta.placeholder((6,), "int32", name="g")
    h = ta.placeholder((6,), "float64", name="h")
    v = ta.placeholder((3,), "float64", name="v")
    y = ta.compute((6,), lambda i: ta.if_then_else(
        (2 * g[i] >= 0) & (2 * g[i] < 3),
        ta.select(x.take(2 * g[i]) > 0.0, x.take(2 * g[i]) * x.take(2 * g[i]) * h[i], 0.0),
        0.0), name="y")
    r = ta.reduce_axis((0, 6), name="r")
    loss = ta.compute((), lambda: ta.sum(y[r], axis=r), name="loss")
    V = np.array([0.25, -2.0, 1.0])
    on = [(2 * int(gi), hi) for gi, hi in zip(G, H) if 0 <= 2 * gi < 3 and X[2 * gi] > 0]
    hv, = ta.hessian_vector_product(loss, [x], [v])
    want = np.zeros(3)
    for k, hi in on:
        want[k] += 2 * hi * V[k]
    np.testing.assert_allclose(ta.build([hv], [x, g, h, v], checked=checked)(X, G, H, V), want)
    ty = ta.jvp(y, [x], [v])
    want = [2 * X[2 * gi] * V[2 * gi] * hi if 0 <= 2 * gi < 3 and X[2 * gi] > 0 else 0.0
            for gi, hi in zip(G, H)]
    np.testing.assert_allclose(ta.build([ty], [x, g, h, v], checked=checked)(X, G, H, V), want)


def test_scatter_mask_read_in_bounds_only_under_its_guard():
    """``W[v - 2]`` is in bounds where ``v >= 2``; the scatter puts ``v = data_index(I[r])``
    in both tests, so the eager ``&&`` read ``W[-2]`` (checked mode caught it)."""
    i = ta.placeholder((6,), "int32", name="I")
    w = ta.placeholder((3,), "float64", name="W")
    h = ta.placeholder((6,), "float64", name="h")
    r = ta.reduce_axis((0, 6), name="r")
    y = ta.compute((5,), lambda v: ta.sum(ta.if_then_else(
        data_index(i[r], 5, "clip") == v,
        ta.if_then_else(v >= 2, ta.select(w[v - 2] > 0.0, h[r], 0.0), 0.0), 0.0), axis=r), name="y")
    I_ = np.array([0, 1, 4, 3, 2, 1], "int32")
    W_ = np.array([1.0, -1.0, 2.0])
    want = np.zeros(5)
    for v, hv in zip(I_, H):
        if v >= 2 and W_[v - 2] > 0:
            want[v] += hv
    assert "scatter" in str(ta.lower([y], [i, w, h]))
    for checked in (False, True):
        np.testing.assert_allclose(ta.build([y], [i, w, h], checked=checked)(I_, W_, H), want)


def test_peeled_conjuncts_keep_a_lazy_guard():
    g = ta.placeholder((6,), "int32", name="g")
    x = ta.placeholder((3,), "float64", name="x")
    r = ta.reduce_axis((0, 6), name="r")
    guard = (2 * g[r] >= 0) & (2 * g[r] < 3)
    d = x.take(2 * g[r], mode="raise") > 0.0
    safe = x.take(g[r], mode="clip") > 0.0
    e = ta.if_then_else(guard, ta.select(safe, ta.select(d, 1.0, 0.0), 0.0), 0.0)
    conds, value = peel_masks(e)
    assert value.op is Op.CONST and value.arg == 1.0
    assert may_fault(d) and not may_fault(safe) and not may_fault(guard)
    assert conds[-1] is choice(Op.IF_THEN_ELSE, all_of(conds[:2]), d, FALSE)
    assert safe in conds  # a conjunct that cannot fault stays plain (a scatter solves those)
    # under a select (computed everywhere already), nothing is wrapped
    conds, _ = peel_masks(ta.select(guard, ta.select(d, 1.0, 0.0), 0.0))
    assert d in conds


def test_scatter_mask_read_at_a_solved_axis_out_of_its_range():
    """``W[v] > 0`` is in bounds for every output ``v``; the scatter solves ``v = I[r] + 2``,
    which can pass the last row, and tested ``W[I[r] + 2]`` before its range check (the same
    eager ``&&``): checked mode caught the read of ``W[6]``."""
    i = ta.placeholder((6,), "int32", name="I")
    w = ta.placeholder((5,), "float64", name="W")
    h = ta.placeholder((6,), "float64", name="h")
    r = ta.reduce_axis((0, 6), name="r")
    y = ta.compute((5,), lambda v: ta.sum(ta.if_then_else(
        data_index(i[r], 5, "clip") + 2 == v, ta.select(w[v] > 0.0, h[r], 0.0), 0.0), axis=r), name="y")
    I_ = np.array([0, 1, 4, 3, 2, 1], "int32")
    W_ = np.array([1.0, -1.0, 2.0, 3.0, 4.0])
    want = np.zeros(5)
    for k, hv in zip(I_ + 2, H):
        if k < 5 and W_[k] > 0:
            want[k] += hv
    assert "scatter" in str(ta.lower([y], [i, w, h]))
    for checked in (False, True):
        np.testing.assert_allclose(ta.build([y], [i, w, h], checked=checked)(I_, W_, H), want)
