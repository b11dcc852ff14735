"""A stabilizing shift the outputs cancel gets no derivative, however the program is written.

The max subtracted before ``exp`` in a softmax, a log-softmax or a log-sum-exp changes nothing
in the result, so its derivative is zero; a hand-written softmax then costs the same passes as
``ta.topi``'s.  A tensor the outputs do not cancel keeps its derivative (checked by float64
central differences).
"""

import numpy as np
import pytest

import tensorad as ta
from tensorad.autodiff.shifts import cancelling_shifts
from tensorad.ir.rewrite import tensor_graph

F = "float64"
SKX = "llvm -mcpu=skylake-avx512"


def _rows(r: int = 5, d: int = 8):
    X = ta.placeholder((r, d), F, name="X")
    k1, k2 = ta.reduce_axis((0, d), "k1"), ta.reduce_axis((0, d), "k2")
    m = ta.compute((r,), lambda i: ta.max(X[i, k1], k1), name="m")
    se = ta.compute((r,), lambda i: ta.sum(ta.exp(X[i, k2] - m[i]), k2), name="se")
    return X, m, se


def _log_softmax():
    X, m, se = _rows()
    return X, m, ta.compute(X.shape, lambda i, j: X[i, j] - m[i] - ta.log(se[i]), name="Y")


def _logsumexp():
    X, m, se = _rows()
    return X, m, ta.compute(m.shape, lambda i: m[i] + ta.log(se[i]), name="lse")


@pytest.mark.parametrize("make, passes", [(_log_softmax, 4), (_logsumexp, 3)])
def test_a_hand_written_shift_costs_the_hand_formula(make, passes):
    """max, sum of exp (and sum_j H for log-softmax), dX: no routing to the max's winners."""
    X, m, Y = make()
    assert cancelling_shifts(tensor_graph([Y]), [Y]) == {m}
    H = ta.placeholder(Y.shape, F, name="H")
    grads = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower(grads, [X, H], target=SKX).work == passes * X.shape[0] * X.shape[1]


def test_logsumexp_gradient_is_the_softmax():
    X, _, Y = _logsumexp()
    rng = np.random.default_rng(0)
    x, h = rng.normal(size=X.shape) * 3, rng.normal(size=Y.shape)
    H = ta.placeholder(Y.shape, F, name="H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    want = h[:, None] * e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), want, rtol=1e-12)
    np.testing.assert_allclose(ta.build(g, [X, H])(x, h), want, rtol=1e-12)


def test_forward_mode_and_second_order_treat_the_shift_as_a_constant():
    X, _, Y = _log_softmax()
    assert ta.gradcheck(Y, [X])
    loss = ta.topi.sum(ta.topi.multiply(Y, Y))
    V = ta.placeholder(X.shape, F, name="V")
    (hv,) = ta.hessian_vector_product(loss, [X], [V])
    rng = np.random.default_rng(1)
    x, v = rng.normal(size=X.shape), rng.normal(size=X.shape)
    (gx,) = ta.JacobianRecursive(loss, [X])
    eps = 1e-6
    fd = (ta.evaluate(gx, {X: x + eps * v}) - ta.evaluate(gx, {X: x - eps * v})) / (2 * eps)
    np.testing.assert_allclose(ta.evaluate(hv, {X: x, V: v}), fd, rtol=1e-6, atol=1e-8)


def test_a_masked_softmax_cancels_its_shift():
    """``if_then_else(j <= i, exp(S - m), 0)``: a literal zero scales with any shift."""
    n = 6
    S = ta.placeholder((n, n), F, name="S")
    k1, k2 = ta.reduce_axis((0, n), "k1"), ta.reduce_axis((0, n), "k2")
    m = ta.compute((n,), lambda i: ta.max(S[i, k1], k1, where=k1 <= i), name="m")
    E = ta.compute((n, n), lambda i, j: ta.if_then_else(j <= i, ta.exp(S[i, j] - m[i]), 0.0), name="E")
    den = ta.compute((n,), lambda i: ta.sum(E[i, k2], k2), name="den")
    P = ta.compute((n, n), lambda i, j: E[i, j] / den[i], name="P")
    assert cancelling_shifts(tensor_graph([P]), [P]) == {m}
    assert ta.gradcheck(P, [S])


def test_a_shift_subtracted_in_its_own_tensor_cancels():
    X, m, _ = _rows()
    A = ta.compute(X.shape, lambda i, j: X[i, j] - m[i], name="A")
    k = ta.reduce_axis((0, X.shape[1]), "k")
    se = ta.compute(m.shape, lambda i: ta.sum(ta.exp(A[i, k]), k), name="se")
    Y = ta.compute(X.shape, lambda i, j: A[i, j] - ta.log(se[i]), name="Y")
    assert cancelling_shifts(tensor_graph([Y]), [Y]) == {m}
    assert ta.gradcheck(Y, [X])


def _kept(build):
    X, m, Y = build()
    assert m not in cancelling_shifts(tensor_graph([Y]), [Y])
    assert ta.gradcheck(Y, [X])


def test_an_uncancelled_shift_keeps_its_derivative():
    def twice():  # m + log(se) + m changes by c
        X, m, se = _rows()
        return X, m, ta.compute(m.shape, lambda i: m[i] + ta.log(se[i]) + m[i], name="Y")

    def unnormalized():  # exp(X - m) alone scales by exp(-c)
        X, m, _ = _rows()
        return X, m, ta.compute(X.shape, lambda i, j: ta.exp(X[i, j] - m[i]), name="Y")

    def compared():  # a comparison with the shift changes with it
        X, m, se = _rows()
        return X, m, ta.compute(X.shape, lambda i, j: ta.if_then_else(
            X[i, j] - m[i] > -0.5, ta.exp(X[i, j] - m[i]) / se[i], 0.0), name="Y")

    for build in (twice, unnormalized, compared):
        _kept(build)


def test_a_shift_indexed_by_the_summed_axis_is_kept():
    """``sum_k exp(X[i, k] - m[k])`` scales by a different factor at each ``k``."""
    r, d = 4, 5
    X = ta.placeholder((r, d), F, name="X")
    k1, k2 = ta.reduce_axis((0, r), "k1"), ta.reduce_axis((0, d), "k2")
    m = ta.compute((d,), lambda j: ta.max(X[k1, j], k1), name="m")
    se = ta.compute((r,), lambda i: ta.sum(ta.exp(X[i, k2] - m[k2]), k2), name="se")
    Y = ta.compute(X.shape, lambda i, j: ta.exp(X[i, j] - m[j]) / se[i], name="Y")
    assert m not in cancelling_shifts(tensor_graph([Y]), [Y])
    assert ta.gradcheck(Y, [X])
