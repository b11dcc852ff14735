"""A sum over ``q`` of a choice between two values free of ``q``, whose condition fixes ``q`` by an equation
(a smoothed one-hot, ``sum_q select(q == T[i], a, b)``), counts: ``a + (n - 1) b`` where the equation's point
is in range and the rest of the condition holds there, else ``n b``, with no loop over ``q``.  Checked against
NumPy formulas with labels inside and outside the range, a condition that reads data at the point, and one
class; and the work of a label-smoothed cross-entropy's gradient (``simplify/sums/factor.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.simplify import Optimizer

import tensorad as ta

F64 = "float64"
TARGET = "llvm -mcpu=skylake-avx512"


def _rows(n, c, masked):
    H, t = ta.placeholder((n,), F64, "H"), ta.placeholder((n,), "int32", "t")
    w = ta.placeholder((c,), F64, "w")
    q = ta.reduce_axis((0, c), "q")

    def body(i):
        cond = (q == t[i]) & (w[q] > 0.0) if masked else q == t[i]
        return ta.sum(H[i] * ta.select(cond, 0.75, 0.125), q)

    S = ta.compute((n,), body, name="S")
    return S, (H, t, w)


@pytest.mark.parametrize("c", [1, 6])
@pytest.mark.parametrize("masked", [False, True])
def test_sum_of_a_choice_fixed_by_an_equation_is_counted_without_a_loop(c, masked):
    n = 7
    S, (H, t, w) = _rows(n, c, masked)
    optimizer = Optimizer()
    (opt,) = optimizer.finish([optimizer(S)])
    low = ta.lower([opt], [H, t, w], target=TARGET)
    assert low.work <= n, f"work {low.work}: a loop over the classes is left"
    rng = np.random.default_rng(1)
    h = rng.standard_normal(n)
    labels = np.array([0, c - 1, -1, c, c + 3, 0, c // 2], np.int32)  # (three outside [0, c))
    wv = np.where(np.arange(c) % 2 == 0, 1.0, -1.0)
    got = ta.build([opt], [H, t, w])(h, labels, wv)
    inside = (labels >= 0) & (labels < c)
    if masked:
        inside &= np.where(inside, wv[np.clip(labels, 0, c - 1)] > 0, False)
    want = h * np.where(inside, 0.75 + 0.125 * (c - 1), 0.125 * c)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
    np.testing.assert_allclose(ta.evaluate(S, {H: h, t: labels, w: wv}), want, rtol=1e-13, atol=0)


def test_label_smoothed_cross_entropy_gradient_sums_no_target_weights():
    """``sum_q (lse[i] - Z[i, q]) w(q == T[i])``: the head of ``lse`` is ``H sum_q w``, no pass over the
    classes; the gradient is the forward's max and exponential sum, then ``dZ``: three passes."""
    n, c, eps = 4, 9, 0.1
    Z, t = ta.placeholder((n, c), F64, "Z"), ta.placeholder((n,), "int32", "t")
    q1, q2, i, q = (ta.reduce_axis((0, e), nm) for e, nm in ((c, "q1"), (c, "q2"), (n, "i"), (c, "q")))
    m = ta.compute((n,), lambda a: ta.max(Z[a, q1], q1), name="m")
    lse = ta.compute((n,), lambda a: ta.log(ta.sum(ta.exp(Z[a, q2] - m[a]), q2)) + m[a], name="lse")
    weight = ta.select(q == t[i], ta.const(1.0 - eps + eps / c, F64), ta.const(eps / c, F64))
    L = ta.compute((), lambda: ta.sum((lse[i] - Z[i, q]) * weight, [i, q]), name="L")
    H = ta.placeholder((), F64, "H")
    (dZ,) = ta.JacobianRecursive(L, [Z], H)
    assert ta.lower([dZ], [Z, t, H], target=TARGET).work == 3 * n * c

    rng = np.random.default_rng(2)
    z, labels, h = rng.standard_normal((n, c)), np.array([0, 8, 3, 5], np.int32), np.array(1.5)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    target = np.full((n, c), eps / c)
    target[np.arange(n), labels] += 1.0 - eps
    np.testing.assert_allclose(ta.build([dZ], [Z, t, H])(z, labels, h), h * (p - target), rtol=1e-12,
                               atol=1e-14)
