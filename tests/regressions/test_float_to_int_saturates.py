"""Float-to-int casts mean one thing everywhere: toward zero, saturated at the integer type's
ends (inf included), NaN to 0 -- compiled code's ``fptosi.sat``.  ``ta.evaluate`` used NumPy's
``astype`` (INT_MIN for 1e10, inf and NaN) and constant folding ``math.trunc`` (OverflowError
at inf, no saturation), so ``int32(1.3e10) // 3`` was -715827883 in evaluate and 715827882 in a
kernel."""

import numpy as np
import pytest

import tensorad as ta

VALUES = np.array([np.inf, -np.inf, np.nan, 1e10, -1e10, 9.5e18, -9.5e18, 2.7, -2.7, 0.0, -0.0, 2**31 - 0.5])


def _want(x: np.ndarray, dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    out = [0 if np.isnan(v) else int(min(max(np.trunc(v), info.min), info.max)) for v in x.tolist()]
    return np.array(out, dtype=dtype)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("src", ["float32", "float64"])
def test_data_casts_saturate_in_evaluate_and_kernels(dtype, src):
    X = ta.placeholder(VALUES.shape, src, name="X")
    Y = ta.compute(VALUES.shape, lambda i: ta.cast(dtype, X[i]), name="Y")
    Q = ta.compute(VALUES.shape, lambda i: ta.cast(dtype, X[i] * 1.0) // 3, name="Q")
    x = VALUES.astype(src)
    want = _want(x.astype(np.float64), dtype)
    q = want // 3
    for got_y, got_q in (ta.evaluate([Y, Q], {X: x}), ta.build([Y, Q], [X])(x)):
        np.testing.assert_array_equal(got_y, want)
        np.testing.assert_array_equal(got_q, q)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 1e10, -3.7])
def test_constant_casts_fold_the_same(value):
    """A cast of a constant folded by the optimizer gives what evaluate and a kernel give."""
    X = ta.placeholder((3,), "float64", name="X")
    Y = ta.compute((3,), lambda i: X[i] + ta.cast("float64", ta.cast("int32", ta.const(value, "float64"))),
                   name="Y")
    x = np.arange(3.0)
    want = x + float(_want(np.array([value]), "int32")[0])
    np.testing.assert_array_equal(ta.evaluate([Y], {X: x})[0], want)
    np.testing.assert_array_equal(ta.build([Y], [X])(x), want)
    opt = ta.OptimizeAndLiftNonzeronessConditions(Y)
    np.testing.assert_array_equal(ta.evaluate([opt], {X: x})[0], want)
