"""A sequence reversed inside its data-given length, ``Y[p, i] = X[p, len[p] - 1 - i]`` where ``i < len[p]``
(the rest kept, or 0): each point of the valid prefix is read once, so the gradient is ``H`` reversed
the same way, one gather per element of ``X``.  The checked index ``len[p] - 1 - i`` was clipped in the
adjoint, which hid that it runs over ``i`` once per ``j``: the adjoint was a scatter-add over ``i`` beside
a second pass for the kept part, twice the work.  Under its guard the index is exact, and where ``i`` has
no fewer points than the axis it lands on, the equation ``len[p] - 1 - i == j`` stays as written and the
optimizer solves it for ``i`` (a gather); a window at a data offset, on an axis longer than the window,
stays a scatter over the window.

Oracles: float64 central differences of the NumPy formula; ``ta.evaluate``."""

import numpy as np
import pytest

import tensorad as ta

B, T, D = 3, 6, 4
TARGET = "llvm -mcpu=haswell"


def _reverse(x, n, keep):
    y = x.copy() if keep else np.zeros_like(x)
    for p in range(B):
        y[p, :n[p]] = x[p, :n[p]][::-1]
    return y


@pytest.mark.parametrize("keep", [True, False])
def test_reversed_prefix_gradient_is_one_gather_per_element(keep):
    X, L = ta.placeholder((B, T, D), "float64", "X"), ta.placeholder((B,), "int32", "len")
    rest = (lambda p, i, e: X[p, i, e]) if keep else (lambda p, i, e: 0.0)
    Y = ta.compute((B, T, D), lambda p, i, e: ta.if_then_else(i < L[p], X[p, L[p] - 1 - i, e], rest(p, i, e)),
                   name="Y")
    H = ta.placeholder(Y.shape, "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([dX], [X, L, H], target=TARGET).work == B * T * D
    rng = np.random.default_rng(0)
    x, h = rng.standard_normal((B, T, D)), rng.standard_normal((B, T, D))
    n = np.array([T, 1, 4], np.int32)
    eps = 1e-6
    want = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = eps
        want[idx] = ((_reverse(x + e, n, keep) - _reverse(x - e, n, keep)) * h).sum() / (2 * eps)
    np.testing.assert_allclose(ta.build([dX], [X, L, H])(x, n, h), want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ta.evaluate(dX, {X: x, L: n, H: h}), want, rtol=1e-7, atol=1e-9)


def test_window_at_a_data_offset_stays_a_scatter_over_the_window():
    """``Y[p, i] = X[S[p] + i]`` for ``i < K`` where ``X`` has ``N > K`` points: a gather over ``X``'s axis
    would visit ``P * N`` pairs; the scatter visits ``P * K``."""
    P, K, N = 4, 3, 20
    X, S = ta.placeholder((N,), "float64", "X"), ta.placeholder((P,), "int32", "S")
    Y = ta.compute((P, K), lambda p, i: ta.if_then_else(S[p] >= 0, X[S[p] + i], 0.0), name="Y")
    H = ta.placeholder(Y.shape, "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([dX], [X, S, H], target=TARGET).work == P * K
    rng = np.random.default_rng(1)
    x, h, s = rng.standard_normal(N), rng.standard_normal((P, K)), np.array([0, 5, 17, 5], np.int32)
    want = np.zeros(N)
    for p in range(P):
        want[s[p]:s[p] + K] += h[p]
    np.testing.assert_allclose(ta.build([dX], [X, S, H])(x, s, h), want, rtol=1e-12)


def test_offsets_read_through_another_sum_variable_stay_a_scatter():
    """``Y[k, i] = X[S[k] + i]`` over ``i`` as long as ``X``: the index holds ``k`` inside data too, which no
    solution for ``i`` is free of, so the equation stays a scatter over ``(k, i)`` (the raw equation would
    have left a pass over every ``(j, k, i)``)."""
    K, N = 3, 5
    X, S = ta.placeholder((N,), "float64", "X"), ta.placeholder((K,), "int32", "S")
    Y = ta.compute((K, N + 1), lambda k, i: ta.if_then_else(S[k] + i < N, X[S[k] + i], 0.0), name="Y")
    H = ta.placeholder(Y.shape, "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([dX], [X, S, H], target=TARGET).work == K * (N + 1)
    rng = np.random.default_rng(2)
    x, h, s = rng.standard_normal(N), rng.standard_normal((K, N + 1)), np.array([0, 2, 4], np.int32)
    want = np.zeros(N)
    for k in range(K):
        for i in range(N + 1):
            if s[k] + i < N:
                want[s[k] + i] += h[k, i]
    np.testing.assert_allclose(ta.build([dX], [X, S, H])(x, s, h), want, rtol=1e-12)
