"""``pow`` at a zero base: the derivative formula ``b a^(b-1) da + a^b log(a) db`` is ``0 * inf``
there.  PyTorch's values (and the limits from the side where the function is defined): the
``da`` term is 0 where ``b == 0`` (``a^0 = 1`` does not depend on ``a``), the ``db`` term is 0
where ``a == 0`` and ``b >= 0`` (``0^b`` is constant for ``b > 0``).  Before, both gave NaN: a
random program with an exponent of 0 at a zero base failed gradcheck (analytic NaN, numeric 0).
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

A = np.array([0.0, 0.0, 0.0, 2.0, 0.0, 3.0])
B = np.array([0.0, 1.0, 2.5, 0.0, -1.0, 2.0])


def _grads(a, b, out_of=lambda x, y: x ** y):
    X = ta.placeholder((6,), "float64", "X")
    Y = ta.placeholder((6,), "float64", "Y")
    Z = ta.compute((6,), lambda i: out_of(X[i], Y[i]), name="Z")
    H = ta.placeholder((6,), "float64", "H")
    gx, gy = ta.JacobianRecursive(Z, [X, Y], H)
    h = np.ones(6)
    ev = ta.evaluate([gx, gy], {X: a, Y: b, H: h})
    built = ta.build([gx, gy], [X, Y, H])(a, b, h)
    return ev, built


def test_pow_gradients_at_zero_base_follow_pytorch():
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    ta_ = torch.tensor(A, requires_grad=True)
    tb = torch.tensor(B, requires_grad=True)
    (ta_ ** tb).sum().backward()
    want_x, want_y = ta_.grad.numpy(), tb.grad.numpy()
    for got in _grads(A, B):
        gx, gy = (np.asarray(g) for g in got)
        np.testing.assert_array_equal(np.isnan(gx), np.isnan(want_x))
        np.testing.assert_allclose(gx, want_x, rtol=1e-12)
        np.testing.assert_allclose(gy, want_y, rtol=1e-12)


def test_constant_exponent_zero_has_zero_derivative_at_zero():
    X = ta.placeholder((3,), "float64", "X")
    Z = ta.compute((3,), lambda i: X[i] ** 0.0 + X[i] ** 2.0, name="Z")
    H = ta.placeholder((3,), "float64", "H")
    (gx,) = ta.JacobianRecursive(Z, [X], H)
    x = np.array([0.0, 1.5, -2.0])
    for got in (ta.evaluate(gx, {X: x, H: np.ones(3)}), ta.build([gx], [X, H])(x, np.ones(3))):
        np.testing.assert_allclose(np.asarray(got).ravel(), 2 * x, rtol=1e-12)
