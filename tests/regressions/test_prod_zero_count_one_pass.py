"""A box product's gradient counts its zero factors ``Z`` and multiplies its nonzero ones ``P`` in one
reduction of two outputs.

``Z`` and ``P`` were two reductions over the box, one pass each by the work count, so the gradient of
``Y[i] = prod_k X[i, k]`` did three passes over the box where two suffice (``(Z, P)``, then ``dX``).
Oracles: a hand count of the work, a NumPy float64 formula of the product of the other factors (zeros,
two zeros, three, a product of the others that overflows beside a zero) and PyTorch's double backward
for the second order."""

from __future__ import annotations

import numpy as np
import torch

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"
ROWS = [[2, 0, 0.5, 3, 1.25], [0, 0, 0.5, 3, -1], [1.5, -2, 0.5, 3, -0.75], [0, 0, 0, 3, 2],
        [1e200, 1e200, 0.5, 3, 0], [-0.0, 4, 0.5, 0, 1]]


def _program():
    X = ta.placeholder((6, 5), "float64", "X")
    k = ta.reduce_axis((0, 5), "k")
    Y = ta.compute((6,), lambda i: ta.prod(X[i, k], axis=k), name="Y")
    H = ta.placeholder((6,), "float64", "H")
    return X, Y, H


def test_zero_count_and_product_are_one_pass():
    X, Y, H = _program()
    (g,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([Y], [X], target=TARGET).work == 6 * 5
    # (Z, P) over the box, then dX over the box
    assert ta.lower([g], [X, H], target=TARGET).work == 6 * 5 + 6 * 5


def test_gradient_is_the_product_of_the_other_factors():
    X, Y, H = _program()
    (g,) = ta.JacobianRecursive(Y, [X], H)
    x, h = np.array(ROWS), np.linspace(0.5, 1.75, 6)
    def others(i: int, j: int) -> float:  # (exactly 0 beside a zero, whatever the others' product)
        rest = np.delete(x[i], j)
        with np.errstate(over="ignore"):
            return 0.0 if np.any(rest == 0) else h[i] * np.prod(rest)

    want = np.array([[others(i, j) for j in range(5)] for i in range(6)])
    got = ta.build([g], [X, H])(x, h)
    np.testing.assert_allclose(got, want, rtol=1e-14)
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), want, rtol=1e-14)


def test_second_order_matches_pytorch():
    X, Y, H = _program()
    V = ta.placeholder((6, 5), "float64", "V")
    r = ta.reduce_axis((0, 6), "r")
    S = ta.compute((), lambda: ta.sum(Y[r] * H[r], axis=r), name="S")
    (hv,) = ta.hessian_vector_product(S, [X], [V])
    x = np.array(ROWS[:4] + ROWS[5:] + [[1, 2, 3, 4, 5]])
    rng = np.random.default_rng(5)
    h, v = rng.standard_normal(6), rng.standard_normal((6, 5))
    xt = torch.tensor(x, requires_grad=True)
    (gt,) = torch.autograd.grad((xt.prod(1) * torch.tensor(h)).sum(), xt, create_graph=True)
    (want,) = torch.autograd.grad((gt * torch.tensor(v)).sum(), xt)
    got = ta.build([hv], [X, H, V])(x, h, v)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)
