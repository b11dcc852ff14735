"""A product copied along an output axis is differentiated once per distinct value even when its body
holds a nested reduction.

``Y[i, j] = prod_r (x[i] * sum_k x[k])``: the language lifts ``sum_k x[k]`` into ``R[i, j]``, so ``Y``'s
body read ``j`` through ``R`` and the gradient did not see that ``Y`` is copied along ``j`` (nor that its
terms repeat along ``r``): a zero count, a nonzero product and a power over ``r`` per copy.  ``R`` is a
copy along the axes its own body never reads, so ``R[i, j]`` reads as ``R[i, 0]``.  Oracles: a hand
count of the work and PyTorch's gradient."""

from __future__ import annotations

import numpy as np
import torch

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"


def _program():
    x = ta.placeholder((8,), "float64", "x")
    k, r = ta.reduce_axis((0, 8), "k"), ta.reduce_axis((0, 4), "r")
    Y = ta.compute((8, 3), lambda i, j: ta.prod(x[i] * ta.sum(x[k], axis=k), axis=r), name="Y")
    return x, Y, ta.placeholder((8, 3), "float64", "H")


def test_gradient_sums_the_head_over_the_copies():
    x, Y, H = _program()
    (g,) = ta.JacobianRecursive(Y, [x], H)
    # the sum (8, copied along i and j), Y' at one r per i (8), the head summed over j (8 x 3),
    # the sum's adjoint (8) and dx (8)
    assert ta.lower([g], [x, H], target=TARGET).work == 8 + 8 + 8 * 3 + 8 + 8


def test_gradient_matches_pytorch():
    x, Y, H = _program()
    (g,) = ta.JacobianRecursive(Y, [x], H)
    xv = np.array([0.5, -1.0, 0.0, 1.5, 0.25, -0.75, 1.0, 0.1])
    h = np.random.default_rng(2).standard_normal((8, 3))
    xt = torch.tensor(xv, requires_grad=True)
    yt = (xt * xt.sum())[:, None].expand(8, 3) ** 4
    (want,) = torch.autograd.grad((yt * torch.tensor(h)).sum(), xt)
    np.testing.assert_allclose(ta.build([g], [x, H])(xv, h), want.numpy(), rtol=1e-12)
