"""``evaluate_in_order``'s two oracle knobs for a backward on saved values:
``given`` takes computed tensors' values as they are, ``jitter`` moves every float read by its
own random ulps.  The oracles are NumPy formulas written here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given as hgiven
from hypothesis import settings
from hypothesis import strategies as st

import tensorad as ta
from tensorad.reference import evaluate_in_order


def _program():
    X = ta.placeholder((3, 4), "float64", name="X")
    k = ta.reduce_axis((0, 4), name="k")
    S = ta.compute((3,), lambda i: ta.sum(X[i, k], axis=k), name="S")
    C = ta.compute((3, 4), lambda i, j: X[i, j] - S[i] * 0.25, name="C")
    return X, S, C


def test_a_given_tensor_is_used_as_it_is_and_what_it_reads_is_not_needed():
    X, S, C = _program()
    x = np.arange(12.0).reshape(3, 4)
    s = np.array([1.0, -2.0, 40.0])
    got = evaluate_in_order(C, {X: x}, "numpy", given={S: s})
    np.testing.assert_array_equal(got, x - s[:, None] * 0.25)
    # without the given value, the sum is computed: the centred rows
    np.testing.assert_array_equal(evaluate_in_order(C, {X: x}, "numpy"), x - x.sum(1, keepdims=True) / 4)
    # S given, so only X is fed (S's own reads are not visited)
    T = ta.compute((3,), lambda i: S[i] * 2.0, name="T")
    np.testing.assert_array_equal(evaluate_in_order(T, {}, "numpy", given={S: s}), 2 * s)


def test_a_given_output_of_a_multi_output_op_stays_given():
    X = ta.placeholder((5,), "float64", name="X")
    k = ta.reduce_axis((0, 5), name="k")
    argmax = ta.comm_reducer(
        lambda x, y: (ta.select(x[1] >= y[1], x[0], y[0]), ta.select(x[1] >= y[1], x[1], y[1])),
        lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")
    idx, val = ta.compute((), lambda: argmax((k, X[k]), axis=k), name="am")
    both = ta.compute((), lambda: ta.cast("float64", idx[()]) + val[()], name="both")
    x = np.array([0.5, 3.0, -1.0, 2.0, 0.0])
    got = evaluate_in_order(both, {X: x}, "numpy", given={val: np.float64(100.0)})
    assert float(got) == 1 + 100.0  # the index computed, the value given


def test_bad_given_keys_are_clear_errors():
    X, S, C = _program()
    with pytest.raises(TypeError, match="not a tensor"):
        evaluate_in_order(C, {X: np.zeros((3, 4))}, "numpy", given={"S": np.zeros(3)})
    with pytest.raises(TypeError, match="float values"):
        K = ta.compute((3,), lambda i: ta.cast("int32", S[i]), name="K")
        J = ta.compute((3,), lambda i: K[i] + 1, name="J")
        evaluate_in_order(J, {}, "numpy", given={K: np.zeros(3)})


@settings(max_examples=30, deadline=None)
@hgiven(seed=st.integers(0, 2**31), ulps=st.integers(1, 64), dtype=st.sampled_from(["float32", "float64"]))
def test_jitter_moves_each_read_by_at_most_its_ulps_and_mirrors(seed, ulps, dtype):
    X = ta.placeholder((4, 6), dtype, name="X")
    Y = ta.compute((4, 6), lambda i, j: X[i, j] + 0.0, name="Y")
    x = np.random.default_rng(seed).uniform(-1e3, 1e3, (4, 6)).astype(dtype)
    up = evaluate_in_order(Y, {X: x}, "numpy", jitter=(seed, ulps))
    down = evaluate_in_order(Y, {X: x}, "numpy", jitter=(seed, -ulps))
    eps = np.finfo(dtype).eps
    bound = ulps * eps * np.abs(x.astype(np.float64)) + np.spacing(np.abs(x))  # + the final rounding
    assert np.all(np.abs(up.astype(np.float64) - x) <= bound)
    assert np.all(np.abs(down.astype(np.float64) - x) <= bound)
    # the same draws, mirrored: what went up went down
    moved_up, moved_down = up.astype(np.float64) - x, down.astype(np.float64) - x
    assert np.all(moved_up * moved_down <= 0)
    np.testing.assert_array_equal(evaluate_in_order(Y, {X: x}, "numpy", jitter=(seed, ulps)), up)


def test_reads_in_two_computes_jitter_apart_and_integers_never():
    X = ta.placeholder((64,), "float64", name="X")
    N = ta.placeholder((64,), "int32", name="N")
    A = ta.compute((64,), lambda i: X[i] * 1.0, name="A")
    D = ta.compute((64,), lambda i: A[i] - X[i] + ta.cast("float64", N[i]), name="D")
    x = np.random.default_rng(0).uniform(1.0, 2.0, 64)  # A - X is exactly 0 ...
    n = np.arange(64, dtype=np.int32)
    np.testing.assert_array_equal(evaluate_in_order(D, {X: x, N: n}, "numpy"), n)
    jittered = evaluate_in_order(D, {X: x, N: n}, "numpy", jitter=(7, 4))
    residue = jittered - n  # ... but each read rounds on its own: three reads of 4 ulps at most
    assert np.any(residue != 0)
    assert np.all(np.abs(residue) <= 3 * 4 * np.finfo(np.float64).eps * 2 * 1.01)
    # the same read node within one body is one draw (a kernel loads it once)
    same = ta.compute((64,), lambda i: X[i] - X[i] + ta.cast("float64", N[i]), name="same")
    np.testing.assert_array_equal(evaluate_in_order(same, {X: x, N: n}, "numpy", jitter=(7, 4)), n)
