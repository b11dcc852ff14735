"""A strided convolution's input gradient whose residue classes are partly empty (a 1x1
stride-2 convolution reaches only the even points): the empty classes are zeros in the gather,
neither products nor loops (codegen/strategies/parity.py).  Oracles: PyTorch float64 autograd; the plan
read from the lowering's offers and notes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tensorad as ta
from tensorad import topi

RNG = np.random.default_rng(2801)


@pytest.mark.parametrize("stride, size, target",
                         [(2, 14, "llvm"), (3, 13, "llvm -mcpu=haswell"), (2, 9, "llvm")])
def test_sampling_convolution_input_gradient_is_one_product_and_a_gather(stride, size, target):
    X = ta.placeholder((2, 24, size, size), "float64", name="X")
    W = ta.placeholder((40, 24, 1, 1), "float64", name="W")
    Y = topi.nn.conv2d(X, W, stride, 0)
    H = ta.placeholder(Y.shape, "float64", name="H")
    (gX,) = ta.JacobianRecursive(Y, [X], H)
    opts = dict(target=target, microkernel=True)
    lowered = ta.lower([gX], [X, W, H], **opts)
    text = str(lowered)
    assert dict((p, c) for p, _, c in lowered.offered)["X.grad#0"] == "parity", lowered.offered
    assert text.count("matrix product") == 1, text  # the sampled class alone; the others are zeros
    x, w = RNG.uniform(-1, 1, X.shape), RNG.uniform(-1, 1, W.shape)
    h = RNG.uniform(-1, 1, Y.shape)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, torch.tensor(w), stride=stride)
    (want,) = torch.autograd.grad(ty, [tx], torch.tensor(h))
    got = ta.build([gX], [X, W, H], **opts)(x, w, h)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)
