"""The gradient of ``prod`` counts zero factors: ``P / g`` with none, ``P`` at a lone zero, 0 elsewhere.

Differentiated again (a Hessian-vector product), the branches that are 0 lost their tangents: with one
zero elsewhere the derivative of ``prod_{k != j} x_k`` is that zero's tangent times ``P / x_j``, and with
two zeros, one at ``j``, the other's tangent times ``P``.  The HVP at ``x = [2, 0, 0.5, 3]`` gave
``[0, 19.725, 0, 0]`` where PyTorch's double backward gives ``[-2.25, 19.725, -9, -1.5]``."""

from __future__ import annotations

import numpy as np
import torch

import tensorad as ta

CASES = [[2, 0, 0.5, 3, 1.25], [0, 0, 0.5, 3, -1], [0, 0, 0, 3, 2], [1.5, -2, 0.5, 3, -0.75],
         [-0.0, 4, 0.5, 0, 1], [0, 1, 1, 1, 0]]


def _torch_hvp(x: np.ndarray, h: np.ndarray, v: np.ndarray) -> np.ndarray:
    xt = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad((xt.prod(1) * torch.tensor(h)).sum(), xt, create_graph=True)
    (hv,) = torch.autograd.grad((g * torch.tensor(v)).sum(), xt)
    return hv.numpy()


def test_hessian_vector_product_of_a_product_with_zeros_matches_pytorch():
    X = ta.placeholder((len(CASES), 5), name="X", dtype="float64")
    H = ta.placeholder((len(CASES),), name="H", dtype="float64")
    V = ta.placeholder((len(CASES), 5), name="V", dtype="float64")
    k = ta.reduce_axis((0, 5), name="k")
    Y = ta.compute((len(CASES),), lambda i: ta.prod(X[i, k], axis=k), name="Y")
    r = ta.reduce_axis((0, len(CASES)), name="r")
    S = ta.compute((), lambda: ta.sum(Y[r] * H[r], axis=r), name="S")
    (hv,) = ta.hessian_vector_product(S, [X], [V])
    rng = np.random.default_rng(3)
    x = np.array(CASES, dtype=np.float64)
    h, v = rng.standard_normal(len(CASES)), rng.standard_normal(x.shape)
    want = _torch_hvp(x, h, v)
    got = ta.build([hv], [X, H, V])(x, h, v)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ta.evaluate(hv, {X: x, H: h, V: v}), got, rtol=1e-12, atol=1e-12)


def test_first_order_at_zeros_and_overflow_is_unchanged():
    """The first-order gradient stays the product of the other factors (a NumPy float64 formula): 0
    beside a zero even where the nonzero factors' product overflows (``inf * 0`` would be NaN)."""
    X = ta.placeholder((3, 4), name="X", dtype="float32")
    k = ta.reduce_axis((0, 4), name="k")
    Y = ta.compute((3,), lambda i: ta.prod(X[i, k], axis=k), name="Y")
    H = ta.placeholder((3,), name="H", dtype="float32")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    x = np.array([[1e30, 1e30, 0, 2], [0, 0, 3, 1e30], [1e30, 1e30, 0, 0]], dtype=np.float32)
    h = np.ones(3, dtype=np.float32)
    want = np.array([[np.prod(np.delete(row.astype(np.float64), j)) for j in range(4)] for row in x])
    got = ta.build([g], [X, H])(x, h)
    np.testing.assert_array_equal(got, want.astype(np.float32))
