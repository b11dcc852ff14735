"""A product whose terms repeat along a reduction axis they never read scales its head by ``n Y'^(n-1)``
with an elementwise power.

``Y[i] = prod_{k, u} X[i, k]`` (``u`` of ``n = 7`` points unread) is ``Y'^n`` with ``Y' = prod_k X[i, k]``;
the gradient built ``Y'^(n-1)`` as a product over ``n - 1`` copies of ``Y'``, a reduction of its own,
beside the zero count and the nonzero product as two more.  Oracles: a hand count of the work and
PyTorch's first and second derivatives of ``X.prod(1) ** 7`` (zeros, several zeros, negative factors)."""

from __future__ import annotations

import numpy as np
import torch

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"
N = 7
ROWS = [[2, 0, 0.5, 3, 1.25], [0, 0, 0.5, 3, -1], [1.5, -2, 0.5, 1.1, -0.75], [0, 0, 0, 3, 2],
        [-0.0, 1.2, 0.5, 0, 1], [1, 1.25, 0.75, -0.5, 0.9]]


def _program():
    X = ta.placeholder((6, 5), "float64", "X")
    k, u = ta.reduce_axis((0, 5), "k"), ta.reduce_axis((0, N), "u")
    Y = ta.compute((6,), lambda i: ta.prod(X[i, k], axis=[k, u]), name="Y")
    return X, Y, ta.placeholder((6,), "float64", "H")


def test_the_power_is_elementwise():
    X, Y, H = _program()
    (g,) = ta.JacobianRecursive(Y, [X], H)
    # Y' over k at one u, (Z, P) over k, then dX: three passes of 6 x 5, none over u
    assert ta.lower([g], [X, H], target=TARGET).work == 3 * 6 * 5


def test_first_and_second_order_match_pytorch():
    X, Y, H = _program()
    V = ta.placeholder((6, 5), "float64", "V")
    r = ta.reduce_axis((0, 6), "r")
    S = ta.compute((), lambda: ta.sum(Y[r] * H[r], axis=r), name="S")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    (hv,) = ta.hessian_vector_product(S, [X], [V])
    x = np.array(ROWS)
    rng = np.random.default_rng(7)
    h, v = rng.standard_normal(6), rng.standard_normal((6, 5))
    xt = torch.tensor(x, requires_grad=True)
    (gt,) = torch.autograd.grad(((xt.prod(1) ** N) * torch.tensor(h)).sum(), xt, create_graph=True)
    (hvt,) = torch.autograd.grad((gt * torch.tensor(v)).sum(), xt)
    np.testing.assert_allclose(ta.build([g], [X, H])(x, h), gt.detach().numpy(), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(ta.build([hv], [X, H, V])(x, h, v), hvt.numpy(), rtol=1e-11, atol=1e-300)
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), gt.detach().numpy(), rtol=1e-12, atol=1e-300)
