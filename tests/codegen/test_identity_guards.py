"""A reduction's source ``if_then_else(c, e, identity)`` with an affine ``c`` (a padded window:
max pooling's ``-inf``, a sum's zero) runs only where ``c`` holds: the loops' bounds skip the
padding and the guard leaves the vectorized body.

Oracles: NumPy formulas written here (float64) and ``ta.evaluate``; the count of in-bounds
window points for ``work`` (structure, never time).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorad as ta


def _in_bounds(n: int, out: int, k: int, s: int, p: int) -> int:
    """Pairs (y, r) with 0 <= y*s + r - p < n."""
    return sum(1 for y in range(out) for r in range(k) if 0 <= y * s + r - p < n)


def _pool(x, k, s, p, how):
    fill = -np.inf if how == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
    oh, ow = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
    wins = np.stack([xp[:, :, ry:ry + s * (oh - 1) + 1:s, rx:rx + s * (ow - 1) + 1:s]
                     for ry in range(k) for rx in range(k)])
    return wins.max(0) if how == "max" else wins.mean(0)


def test_max_pool_loops_skip_the_padding():
    # 3x3 stride 2 pad 1 (a ResNet's): the update runs on the in-bounds window points only
    # (8 x 64 x 56 x 56: 3.53e6 updates against 3.61e6; a guarded body keeps LLVM from vectorizing
    # a third of the passes: 1.3 ms against 4.2 on an AMD EPYC, 1 thread)
    X = ta.placeholder((2, 3, 56, 56), "float32", "X")
    Y = ta.topi.nn.pool(X, [3, 3], [2, 2], [1, 1, 1, 1], "max")
    low = ta.lower([Y], [X])
    assert "if_then_else" not in str(low) and "-inf)" not in str(low).split("max(")[-1]
    assert low.work == 2 * 3 * _in_bounds(56, 28, 3, 2, 1) ** 2
    x = np.random.default_rng(0).standard_normal(X.shape).astype(np.float32)
    x[0, 1, 0, 0] = np.nan  # a corner: read by one window only
    got = ta.build([Y], [X])(x)
    want = _pool(x.astype(np.float64), 3, 2, 1, "max")
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(3, 13), w=st.integers(3, 30), k=st.integers(1, 4), s=st.integers(1, 3),
       p=st.integers(0, 3), how=st.sampled_from(["max", "avg"]), threads=st.sampled_from([1, 2]),
       seed=st.integers(0, 99))
def test_random_padded_pools_match_numpy(h, w, k, s, p, how, threads, seed):
    if p >= k or h + 2 * p < k or w + 2 * p < k:
        return
    X = ta.placeholder((2, 3, h, w), "float32", "X")
    Y = ta.topi.nn.pool(X, [k, k], [s, s], [p, p, p, p], how)
    x = np.random.default_rng(seed).standard_normal(X.shape).astype(np.float32)
    want = _pool(x.astype(np.float64), k, s, p, how)
    got = ta.build([Y], [X], num_threads=threads)(x)
    np.testing.assert_allclose(got, ta.evaluate([Y], {X: x})[0], rtol=1e-5, atol=1e-6)
    if how == "max":
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("kind", ["max", "min", "sum"])
def test_guarded_reductions_run_on_the_guard(kind):
    # Y[i] = reduce_{r < 7} if_then_else(i + r - 3 in [0, n), X[i + r - 3], identity): the guard
    # becomes the update's domain (work = in-bounds pairs; a sum once added its zeros over the whole
    # box); the value is the same -- also with NaN, inf and -0 among the inputs
    n = 40
    X = ta.placeholder((n,), "float32", "X")
    r = ta.reduce_axis((0, 7), "r")
    ident = {"sum": 0.0, "max": -np.inf, "min": np.inf, "prod": 1.0}[kind]
    red = {"sum": ta.sum, "max": ta.max, "min": ta.min, "prod": ta.prod}[kind]
    Y = ta.compute((n,), lambda i: red(ta.if_then_else((i + r >= 3) & (i + r < n + 3), X[i + r - 3],
                                                       ident), axis=r), name="Y")
    low = ta.lower([Y], [X])
    assert low.work == _in_bounds(n, n, 7, 1, 3)
    x = np.random.default_rng(1).uniform(0.5, 1.5, n).astype(np.float32)
    x[[5, 20, 33]] = [np.nan, np.inf, -0.0]
    got = ta.build([Y], [X])(x)
    want = ta.evaluate([Y], {X: x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
