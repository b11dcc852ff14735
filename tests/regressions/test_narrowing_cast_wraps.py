"""A cast from ``int64`` to ``int32`` wraps a value past int32, as NumPy's ``astype`` does and as
``ta.evaluate`` always did; index arithmetic is otherwise exact in 64 bits.

The linear forms, the isl conversion and the code generator's index arithmetic all saw through
such a cast as if it kept its value: ``if_then_else(int32(int64(i) * 100000) < 0, x, 0)`` is
``x`` on 8,525 of 30,000 rows (evaluate), 0 everywhere built or optimized.  A narrowing cast
now keeps its value only where its operand is proved within int32
(``tensorad.ir.intrange.cast_keeps_value``); elsewhere isl reads it as the quasi-affine wrap
``((a + 2**31) mod 2**32) - 2**31`` and the kernel truncates.  Oracle: NumPy's own wrap."""

import numpy as np
import pytest

import tensorad as ta

N = 30000


def _wrapped(i: np.ndarray) -> np.ndarray:
    return (i.astype(np.int64) * 100000).astype(np.int32).astype(np.int64)  # NumPy wraps


def _all_ways(Y, X, x):
    opt = ta.OptimizeAndLiftNonzeronessConditions(Y)
    return {"evaluate": ta.evaluate([Y], {X: x})[0], "build": ta.build([Y], [X])(x),
            "checked": ta.build([Y], [X], checked=True)(x), "optimized": ta.evaluate([opt], {X: x})[0],
            "optimized built": ta.build([opt], [X])(x)}


def test_a_wrapping_cast_in_a_condition():
    X = ta.placeholder((N,), "float64", name="X")
    Y = ta.compute((N,), lambda i: ta.if_then_else(ta.cast("int32", ta.cast("int64", i) * 100000) < 0,
                                                    X[i], 0.0), name="Y")
    x = np.arange(N, dtype=np.float64) + 1.0
    want = np.where(_wrapped(np.arange(N)) < 0, x, 0.0)
    assert (want != 0).sum() == 8525
    for how, got in _all_ways(Y, X, x).items():
        np.testing.assert_array_equal(got, want, err_msg=how)


@pytest.mark.parametrize("m", [7, N])
def test_a_wrapping_cast_in_an_index(m):
    X = ta.placeholder((N,), "float64", name="X")
    Y = ta.compute((N,), lambda i: X[ta.cast("int32", ta.cast("int64", i) * 100000) % m], name="Y")
    x = np.arange(N, dtype=np.float64) * 0.5
    want = x[np.mod(_wrapped(np.arange(N)), m)]
    for how, got in _all_ways(Y, X, x).items():
        np.testing.assert_array_equal(got, want, err_msg=how)


def test_a_wrapping_index_that_leaves_the_tensor_is_refused():
    X = ta.placeholder((N,), "float64", name="X")
    with pytest.raises(ta.OutOfBoundsError,
                       match="out of bounds"):
        ta.compute((N,), lambda i: X[(ta.cast("int32", ta.cast("int64", i) * 100000) + 2**31 - 1) // 100000])


def test_a_narrowing_cast_within_int32_stays_affine():
    """``int32(int64(i) * 3 % n)`` is proved within int32: linear forms and isl see through it
    (a gather with that index needs no run-time check and is proved in bounds)."""
    from tensorad.poly.linear import var_coefficients

    X = ta.placeholder((N,), "float64", name="X")
    i = ta.compute((N,), lambda i: i, name="I").op.axes[0]
    e = ta.cast("int32", ta.cast("int64", i) * 3)
    assert var_coefficients(e) == {i: 3}
    assert var_coefficients(ta.cast("int32", ta.cast("int64", i) * 100000)) is None  # may wrap
    Y = ta.compute((N,), lambda i: X[ta.cast("int32", ta.cast("int64", i) * 3 % N)], name="Y")
    x = np.arange(N, dtype=np.float64)
    np.testing.assert_array_equal(ta.build([Y], [X])(x), x[np.arange(N) * 3 % N])


@pytest.mark.parametrize("xv", [-1.0, -1.2, 1.0, 0.3])
def test_a_comparison_of_wrapping_int32_data_is_not_rewritten(xv):
    """``int32(-7.5 x) < int32(1e10 x)`` at ``x = -1`` compares 7 with a
    saturated INT_MIN; the simplifier's ``a < b -> a <= b - 1`` computed ``INT_MIN - 1``,
    which wraps to INT_MAX: the select took the other branch (7 for -2147483648).  A
    comparison of integer data is rewritten only when every side is proved within its type."""
    X = ta.placeholder((), "float64", name="X")
    a, b = ta.cast("int32", X[()] * -7.5), ta.cast("int32", X[()] * 1e10)
    K = ta.compute((2,), lambda i: ta.select(a < b, a, b * -1), name="K")
    T = ta.compute((), lambda: ta.cast("float64", K[0]), name="T")
    x = np.array(xv)
    sa = np.int64(np.trunc(xv * -7.5))
    sb = np.int64(np.clip(np.trunc(xv * 1e10), -(2**31), 2**31 - 1))
    want = float(sa if sa < sb else np.array([sb * -1]).astype(np.int32)[0])  # int32 wraps
    opt = ta.OptimizeAndLiftNonzeronessConditions(T)
    for got in (ta.evaluate([T], {X: x})[0], ta.evaluate([opt], {X: x})[0], ta.build([opt], [X])(x)):
        assert float(got) == want
