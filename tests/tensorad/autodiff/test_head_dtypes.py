"""A head or tangent of another float dtype than its output or input is read as that dtype, by
reverse mode, forward mode and the Hessian-vector product alike (docs/autodiff.md), checked against
NumPy formulas: ``Y = X * X`` gives ``dX = float32(h) * 2x`` and ``dY = 2x * float32(v)``."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

# a float64 value whose float32 rounding is visible in a float32 result
H64 = np.array([1 + 2.0 ** -30, -3.0, 0.1], np.float64)
X32 = np.array([1.5, -0.25, 2.0], np.float32)


@pytest.fixture
def prog():
    X = ta.placeholder((3,), "float32", "X")
    return X, ta.compute((3,), lambda i: X[i] * X[i], name="Y")


@pytest.mark.parametrize("dtype", ["float64", "bfloat16"])
def test_a_head_of_another_float_dtype_is_read_as_the_outputs(prog, dtype):
    X, Y = prog
    H = ta.placeholder((3,), dtype, "H")
    (g,) = ta.gradient(Y, [X], H)
    h = H64.astype(ta.ir.dtype.numpy_dtype(dtype))
    want = h.astype(np.float32) * (2 * X32)
    assert g.dtype == "float32"
    got = ta.build(g, [X, H])(X32, h)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert np.array_equal(ta.evaluate(g, {X: X32, H: h}), want)


def test_a_tangent_of_another_float_dtype_is_read_as_the_inputs(prog):
    X, Y = prog
    V = ta.placeholder((3,), "float64", "V")
    d = ta.jvp(Y, [X], [V])
    want = 2 * X32 * H64.astype(np.float32)
    assert d.dtype == "float32"
    np.testing.assert_allclose(ta.build(d, [X, V])(X32, H64), want, rtol=1e-6)
    (hv,) = ta.hessian_vector_product(ta.topi.sum(Y), [X], [V])
    assert hv.dtype == "float32"
    np.testing.assert_allclose(ta.build(hv, [X, V])(X32, H64), 2 * H64.astype(np.float32), rtol=1e-6)


def test_function_backward_takes_a_number_of_any_kind_as_a_scalar_head():
    """A 0-d head given as a Python number, a NumPy number or a 0-d array is the same head."""
    X = ta.placeholder((3,), "float64", "X")
    f = ta.function(ta.topi.sum(ta.compute((3,), lambda i: X[i] * X[i], name="Y")), [X])
    x = np.array([1.0, 2.0, -3.0])
    _, res = f.forward(x)
    for head in (2, 2.0, np.float32(2), np.float16(2), np.array(2, np.float32)):
        (g,) = f.backward(res, head)
        np.testing.assert_array_equal(g, 4 * x)
