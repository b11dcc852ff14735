"""Default fast-math may reassociate reductions and fuse multiply-adds, but it
must not rewrite divisions into reciprocals nor assume finite math.

* The seed's homebrew softmax ``E = exp(dense(X, W)); Y = E / sum(E)`` gave a wrong gradient
  (half its norm) when a row's logits pass ~44.4: the gradient's reduction
  ``sum_j H * (-(E / S) / S)`` was rewritten into ``E / (S * S)`` and ``S * S`` overflows float32.
* ``1 / sqrt(x)`` became an ``rsqrt`` estimate: NaN at 0 and at inf.
The oracles are float64 NumPy formulas and ``ta.evaluate``.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _homebrew_softmax(n: int, k: int, m: int):
    X = ta.placeholder((n, k), name="X")
    W = ta.placeholder((m, k), name="W")
    exps = ta.topi.exp(ta.topi.nn.dense(X, W))
    Y = exps / ta.topi.sum(exps, axis=-1, keepdims=True)
    H = ta.placeholder(Y.shape, name="H")
    gX, gW = ta.JacobianRecursive(Y, [X, W], H)
    return X, W, H, gX, gW


def _reference(x, w, h):
    x, w, h = (a.astype(np.float64) for a in (x, w, h))
    e = np.exp(x @ w.T)
    y = e / e.sum(1, keepdims=True)
    gd = y * (h - (h * y).sum(1, keepdims=True))
    return gd @ w, gd.T @ x


def _data(n, k, m, rng):
    """X, W uniform in [-1, 1] (the seed's natural range); row 0 of X follows the signs of W's
    row 0, so that its largest logit (about 0.45 * k / 2) passes 44.4, where the sum of the
    row's exps squared overflows float32 (its exps themselves stay finite)."""
    x = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    w = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    x[0] = 0.45 * np.sign(w[0])
    h = rng.uniform(-1, 1, (n, m)).astype(np.float32)
    logits = x.astype(np.float64) @ w.T.astype(np.float64)
    assert 45 < logits.max() < 80, logits.max()
    return x, w, h


@pytest.mark.parametrize("threads", [1, 2])
def test_homebrew_softmax_gradient_with_large_logits(threads, rng):
    n, k, m = 8, 256, 64
    X, W, H, gX, gW = _homebrew_softmax(n, k, m)
    x, w, h = _data(n, k, m, rng)
    rx, rw = _reference(x, w, h)
    kern = ta.build([gX, gW], [X, W, H], num_threads=threads, parallel_min_work=0)
    got_x, got_w = kern(x, w, h)
    np.testing.assert_allclose(got_x, rx, rtol=1e-4, atol=1e-4 * np.abs(rx).max())
    np.testing.assert_allclose(got_w, rw, rtol=1e-4, atol=1e-4 * np.abs(rw).max())
    ev_x, ev_w = ta.evaluate([gX, gW], {X: x, W: w, H: h})
    np.testing.assert_allclose(got_x, ev_x, rtol=1e-4, atol=1e-4 * np.abs(rx).max())
    np.testing.assert_allclose(got_w, ev_w, rtol=1e-4, atol=1e-4 * np.abs(rw).max())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_reciprocal_square_root_at_special_values(dtype):
    x = ta.placeholder((6,), dtype, name="x")
    y = ta.compute((6,), lambda i: 1.0 / ta.sqrt(x[i]), name="y")
    a = np.array([0.0, np.inf, 4.0, 1e-30, -0.0, 2.0], dtype)
    with np.errstate(divide="ignore"):
        want = 1.0 / np.sqrt(a)
    got = ta.build([y], [x])(a)
    np.testing.assert_array_equal(got, want)  # IEEE sqrt and division are correctly rounded


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_division_by_a_row_value_is_not_a_reciprocal(dtype):
    """``X[i, j] / S[i]`` with ``S`` near the top of the range: ``1 / S`` is subnormal, so a
    multiplication by the hoisted reciprocal loses digits (or gives 0); a division is exact."""
    big = float(np.finfo(dtype).max)
    X = ta.placeholder((4, 64), dtype, name="X")
    S = ta.placeholder((4,), dtype, name="S")
    Y = ta.compute((4, 64), lambda i, j: X[i, j] / S[i], name="Y")
    s = np.array([big, big / 3, 1.0, 7.0], dtype)
    x = np.outer(s, np.linspace(0.25, 1.0, 64)).astype(dtype)
    got = ta.build([Y], [X, S])(x, s)
    np.testing.assert_array_equal(got, x / s[:, None])


def test_sum_reduction_still_vectorized():
    """The reduction keeps its ``reassoc`` flag: the loop vectorizer still makes vector adds."""
    A = ta.placeholder((64, 1024), name="A")
    k = ta.reduce_axis((0, 1024), name="k")
    Y = ta.compute((64,), lambda i: ta.sum(A[i, k] * A[i, k], axis=k), name="Y")
    kern = ta.build([Y], [A], parallel=False)
    assert "reassoc" in kern.llvm_ir and "arcp" not in kern.llvm_ir
    assert any(f"<{w} x float>" in kern.llvm_ir for w in (4, 8, 16))
