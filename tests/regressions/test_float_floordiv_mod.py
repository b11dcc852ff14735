"""Float ``//`` and ``%`` in kernels and constant folding are NumPy's.

The generator drew ``//`` and ``%`` on index values and integers only.  On float data a kernel
computed ``floor(a / b)`` and ``a - floor(a / b) * b``: the quotient rounds before the floor
(``0.9 // 0.1`` gave 9.0, NumPy 8.0, since 0.9 / 0.1 is 8.99999... exactly), the remainder of
``0.5 % 0.1`` was 0 (NumPy 0.09999999999999998), ``5 % inf`` was NaN (NumPy 5.0) and a large
``a`` lost its remainder; the simplifier folded constants the same way.  Now the remainder
comes from ``fmod`` (exact) as in NumPy's ``npy_divmod``, and constants fold with NumPy.  The
oracle is NumPy's ``floor_divide`` and ``mod``, bit for bit (signed zeros, infinities and NaN
included).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tensorad as ta

VALUES = [0.0, -0.0, 0.1, -0.1, 0.5, 0.7, -0.7, 0.9, 1.0, -1.0, 2.2, -1.6, 3.0, 1e30, -1e30, 1e-300,
          5e-324, np.inf, -np.inf, np.nan, 7.5, -7.5, 1e16, 123456.789]


def _same(got, want) -> np.ndarray:
    return (got == want) & (np.signbit(got) == np.signbit(want)) | np.isnan(got) & np.isnan(want)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("options", [{}, {"fastmath": False, "target": "llvm -mcpu=x86-64"}])
def test_floordiv_and_mod_of_data_are_numpys(dtype, options):
    pairs = np.array(list(itertools.product(VALUES, VALUES)))
    with np.errstate(all="ignore"):
        a, b = pairs[:, 0].astype(dtype), pairs[:, 1].astype(dtype)
        want_q, want_m = np.floor_divide(a, b), np.mod(a, b)
    n = len(a)
    A, B = ta.placeholder((n,), dtype, name="A"), ta.placeholder((n,), dtype, name="B")
    q = ta.compute((n,), lambda i: A[i] // B[i], name="q")
    m = ta.compute((n,), lambda i: A[i] % B[i], name="m")
    got_q, got_m = ta.build([q, m], [A, B], **options)(a, b)
    for got, want in ((got_q, want_q), (got_m, want_m)):
        bad = np.flatnonzero(~_same(got, want))
        assert not bad.size, [(a[k], b[k], got[k], want[k]) for k in bad[:5]]


def test_a_constant_divisor_and_its_gradient():
    """``x % 0.1`` has derivative 1 and ``x // 0.3`` derivative 0 between their steps."""
    x = np.array([0.95, -0.33, 2.05, 0.42, -1.27])
    X = ta.placeholder((5,), "float64", name="X")
    y = ta.compute((5,), lambda i: X[i] % 0.1 + (X[i] // 0.3) * X[i], name="y")
    want = np.mod(x, 0.1) + np.floor_divide(x, 0.3) * x  # (a fused multiply-add may round once)
    np.testing.assert_allclose(ta.build([y], [X])(x), want, rtol=1e-15)
    h = ta.placeholder((5,), "float64", name="h")
    (g,) = ta.JacobianRecursive(y, [X], h)
    hv = np.array([1.0, -2.0, 0.5, 3.0, 1.5])
    np.testing.assert_allclose(ta.build([g], [X, h])(x, hv), hv * (1.0 + np.floor_divide(x, 0.3)), rtol=1e-15)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_constants_fold_as_numpy_computes(dtype):
    """The simplifier folded ``0.9 // 0.1`` to ``floor(0.9 / 0.1) = 9`` (and ``0.5 % 0.1`` to 0):
    the optimized tensor was 9.0 where ``ta.evaluate`` of the tensor itself gave 8.1."""
    c = np.dtype(dtype).type
    X = ta.placeholder((3,), "float64", name="X")
    y = ta.compute((3,), lambda i: X[i] * ta.cast("float64", ta.const(0.9, dtype) // ta.const(0.1, dtype)
                                                   + ta.const(0.5, dtype) % ta.const(0.1, dtype)), name="y")
    x = np.array([1.0, -2.0, 0.5])
    want = x * float(np.floor_divide(c(0.9), c(0.1)) + np.mod(c(0.5), c(0.1)))
    opt = ta.OptimizeAndLiftNonzeronessConditions(y)
    np.testing.assert_array_equal(np.asarray(ta.evaluate([opt], {X: x})[0]), want)
    np.testing.assert_array_equal(np.asarray(ta.build([opt], [X])(x)), want)
