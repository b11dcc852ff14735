"""A select whose chosen branch does not depend on the input has derivative exactly 0 there,
even where the other factors of the chain rule are inf or NaN.

The derivative of ``select(c, a, x)`` by ``x`` is ``select(c, 0, 1)``; the chain rule then
multiplies it by the outer partial, evaluated at the value the select chose.  In
``sqrt(select(x < 0, 0, x))`` (the "safe square root") that partial is ``1 / (2 sqrt(0)) = inf``
and ``0 * inf`` made the gradient NaN where the forward is 0; in the seed's
``erf(select(c, -inf, x))`` the Hessian-vector product had ``erf''(-inf) = -2 (-inf) e^(-inf)``
times a zero tangent.  PyTorch and JAX both give 0 (their ``where`` masks the cotangent rather
than multiplying by it), and so does the math: the function is locally constant there.  A zero
branch of a derivative's select is a strong zero: products and quotients go inside the select.
The oracles are NumPy formulas written here and float64 central differences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorad as ta

X = np.array([-0.5, 0.25, 1.0, -2.0, 0.0, 3.0])


def _safe_sqrt():
    x = ta.placeholder((6,), "float64", name="x")
    y = ta.compute((6,), lambda i: ta.sqrt(ta.select(x[i] < 0.0, ta.const(0.0, "float64"), x[i])), name="y")
    return x, y


@pytest.mark.parametrize("optimize", [True, False])
def test_gradient_of_the_safe_square_root_is_zero_where_clamped(optimize):
    x, y = _safe_sqrt()
    H = ta.placeholder((6,), "float64", name="H")
    (g,) = ta.JacobianRecursive(y, [x], H, optimize=optimize)
    h = np.linspace(-1.0, 1.0, 6)
    xv = np.where(X == 0.0, 0.5, X)  # away from the kink at 0
    with np.errstate(divide="ignore"):
        want = np.where(xv < 0, 0.0, h / (2 * np.sqrt(np.maximum(xv, 0))))
    np.testing.assert_allclose(np.asarray(ta.evaluate(g, {x: xv, H: h})), want, rtol=1e-12)
    np.testing.assert_allclose(ta.build([g], [x, H])(xv, h), want, rtol=1e-12)


def _erf_of_a_clamp():
    """``erf(select(A < x, A, x))`` with ``A`` data (holding -inf) and an empty max's -inf."""
    x = ta.placeholder((4,), "float64", name="x")
    A = ta.placeholder((4,), "float64", name="A")
    r = ta.reduce_axis((0, 2), name="r")
    m = ta.compute((4,), lambda i: ta.max(ta.const(0.5, "float64"), axis=[r], where=(i + r) % 4 == 3),
                   name="m")  # -inf at i = 0 and i = 1: an empty max
    y = ta.compute((4,), lambda i: ta.erf(ta.select(A[i] < x[i], A[i], x[i]))
                   + ta.erf(ta.select(m[i] < x[i], m[i], x[i])), name="y")
    k = ta.reduce_axis((0, 4), name="k")
    W = ta.placeholder((4,), "float64", name="W")
    L = ta.compute((), lambda: ta.sum(y[k] * W[k], axis=[k]), name="L")
    return x, A, W, L


@pytest.mark.parametrize("optimize", [True, False])
def test_hvp_through_a_clamp_at_minus_infinity_is_finite_and_right(optimize):
    x, A, W, L = _erf_of_a_clamp()
    V = ta.placeholder((4,), "float64", name="V")
    (hv,) = ta.hessian_vector_product(L, [x], [V], optimize=optimize)
    xv = np.array([0.1, -0.7, 0.2, 0.6])
    av = np.array([-np.inf, 0.3, -np.inf, 0.9])
    wv = np.array([0.5, -1.5, 2.0, 0.75])
    vv = np.array([1.0, -2.0, 0.5, 3.0])
    feed = {x: xv, A: av, W: wv, V: vv}
    assert np.isfinite(ta.evaluate(L, {x: xv, A: av, W: wv})).all()

    def erf2(z):  # erf''
        return -2 * z * 2 / math.sqrt(math.pi) * np.exp(-z * z)

    mv = np.array([-np.inf, -np.inf, 0.5, 0.5])
    want = wv * vv * (np.where(av < xv, 0.0, erf2(xv)) + np.where(mv < xv, 0.0, erf2(xv)))
    np.testing.assert_allclose(np.asarray(ta.evaluate(hv, feed)), want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ta.build([hv], [x, A, W, V])(xv, av, wv, vv), want, rtol=1e-12, atol=1e-15)
    # and float64 central differences of the built gradient along v
    (g,) = ta.gradient(L, [x], optimize=optimize)
    gk = ta.build([g], [x, A, W])
    eps = 1e-6
    fd = (gk(xv + eps * vv, av, wv) - gk(xv - eps * vv, av, wv)) / (2 * eps)
    np.testing.assert_allclose(want, fd, rtol=1e-6, atol=1e-8)


def test_the_safe_square_root_matches_torch_where():
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    x, y = _safe_sqrt()
    H = ta.placeholder((6,), "float64", name="H")
    (g,) = ta.JacobianRecursive(y, [x], H)
    xv, h = np.where(X == 0.0, 0.5, X), np.linspace(-1.0, 1.0, 6)
    xt = torch.tensor(xv, requires_grad=True)
    torch.sqrt(torch.where(xt < 0, torch.zeros_like(xt), xt)).backward(torch.tensor(h))
    np.testing.assert_allclose(ta.build([g], [x, H])(xv, h), xt.grad.numpy(), rtol=1e-12)
