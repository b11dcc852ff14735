"""ta.evaluate: each bad feed has its own test, asserting the error type and message."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


@pytest.fixture
def prog():
    X = ta.placeholder((2, 3), name="X")
    N = ta.placeholder((3,), "int32", name="N")
    Y = ta.compute((2, 3), lambda i, j: X[i, j] * ta.cast("float32", N[j]), name="Y")
    return X, N, Y


def _ok(X, N):
    return {X: np.ones((2, 3), np.float32), N: np.arange(3, dtype=np.int32)}


def test_missing_placeholder(prog):
    X, N, Y = prog
    with pytest.raises(ValueError, match=r"placeholder 'N' \(shape \(3,\), dtype int32\) is missing"):
        ta.evaluate(Y, {X: np.ones((2, 3), np.float32)})


def test_key_that_is_not_a_tensor(prog):
    X, N, Y = prog
    with pytest.raises(TypeError, match=r"feed key 'X' is not a tensor"):
        ta.evaluate(Y, {**_ok(X, N), "X": np.ones((2, 3))})


def test_key_that_is_a_computed_tensor(prog):
    X, N, Y = prog
    with pytest.raises(TypeError, match=r"feed key 'Y' is a computed tensor, not a placeholder"):
        ta.evaluate(Y, {**_ok(X, N), Y: np.ones((2, 3))})


def test_wrong_shape(prog):
    X, N, Y = prog
    with pytest.raises(ValueError, match=r"'X' .* shape \(3, 2\); expected shape \(2, 3\)"):
        ta.evaluate(Y, {**_ok(X, N), X: np.ones((3, 2), np.float32)})


def test_wrong_rank_for_zero_dim_placeholder():
    s = ta.placeholder((), name="s")
    T = ta.compute((), lambda: s[()] + 1.0, name="T")
    with pytest.raises(ValueError, match=r"'s' .* shape \(1,\); expected shape \(\)"):
        ta.evaluate(T, {s: np.ones(1, np.float32)})


def test_float_values_for_an_int_placeholder(prog):
    X, N, Y = prog
    with pytest.raises(TypeError, match=r"'N' .* float values \(float64\); cast them explicitly"):
        ta.evaluate(Y, {**_ok(X, N), N: np.arange(3.0)})


def test_integers_out_of_range_for_the_placeholder_dtype(prog):
    X, N, Y = prog
    with pytest.raises(ValueError, match=r"'N' .* outside the int32 range"):
        ta.evaluate(Y, {**_ok(X, N), N: np.array([0, 1, 2**40])})


def test_non_numeric_array(prog):
    X, N, Y = prog
    with pytest.raises(TypeError, match=r"'X' .* dtype <U1; expected numeric values of dtype float32"):
        ta.evaluate(Y, {**_ok(X, N), X: np.full((2, 3), "a")})


def test_non_bool_values_for_a_bool_placeholder():
    B = ta.placeholder((2,), "bool", name="B")
    T = ta.compute((2,), lambda i: ta.select(B[i], 1.0, 0.0), name="T")
    with pytest.raises(TypeError, match=r"'B' .* int64 values; expected bool"):
        ta.evaluate(T, {B: np.array([0, 1])})
    np.testing.assert_array_equal(ta.evaluate(T, {B: np.array([False, True])}), [0.0, 1.0])


def test_feed_that_is_not_a_dict(prog):
    X, N, Y = prog
    with pytest.raises(TypeError, match="feed must be a dict"):
        ta.evaluate(Y, [np.ones((2, 3)), np.arange(3)])


def test_outputs_that_are_not_tensors(prog):
    X, N, Y = prog
    with pytest.raises(TypeError, match="outputs must be tensors, got Expr"):
        ta.evaluate([Y, X[0, 0]], _ok(X, N))


def test_accepted_feeds(prog):
    """Unused placeholders, int arrays for float placeholders, lists, Python scalars for 0-d."""
    X, N, Y = prog
    unused = ta.placeholder((5,), name="unused")
    out = ta.evaluate(Y, {X: [[1, 2, 3], [4, 5, 6]], N: np.array([1, 1, 2], np.int64),
                          unused: np.zeros(5)})
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [[1, 2, 6], [4, 5, 12]])
    s = ta.placeholder((), "float64", name="s")
    assert ta.evaluate(ta.compute((), lambda: s[()] * 2.0), {s: 1.5}) == 3.0


def test_unused_placeholder_is_still_checked(prog):
    X, N, Y = prog
    unused = ta.placeholder((5,), name="unused")
    with pytest.raises(ValueError, match="'unused'"):
        ta.evaluate(Y, {**_ok(X, N), unused: np.zeros(4)})
