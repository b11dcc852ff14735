"""``ta.function`` runs the optimizer's last step (``Optimizer.finish``) over its gradients, as
``ta.JacobianRecursive`` does: a sum optimized before a bracket it contains was made reads the
bracket (``nested_share``), and brackets no other sum shares are folded back.  Without it, a group
norm's ``beta.grad`` summed the head over (batch, y, x) in a pass of its own, though the pass
``X.grad`` needs already sums it over (y, x) per (sample, channel).  Oracles: PyTorch float64
autograd, and the work of the same backward without ``beta``'s gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tensorad as ta
from tensorad import topi

F = torch.nn.functional

SHAPES = [(2, 8, 5, 6, 2), (3, 6, 4, 4, 3), (2, 4, 3, 3, 4)]  # (N, C, H, W, groups)


def _function(shape, dtype: str, with_beta: bool = True) -> tuple[ta.Function, list]:
    n, c, h, w, groups = shape
    X = ta.placeholder((n, c, h, w), dtype, name="X")
    g = ta.placeholder((c,), dtype, name="gamma")
    b = ta.placeholder((c,), dtype, name="beta")
    Y = topi.nn.group_norm(X, groups, g, b)
    ins = [X, g, b]
    return ta.function(Y, ins, wrt=ins if with_beta else [X, g], num_threads=1), ins


@pytest.mark.parametrize("shape", SHAPES)
def test_beta_gradient_sums_the_per_sample_channel_sums_and_reads_the_head_no_more(shape):
    n, c = shape[:2]
    with_beta = _function(shape, "float32")[0].lower_backward().work
    without = _function(shape, "float32", with_beta=False)[0].lower_backward().work
    # beta.grad[c] = sum_n [sum_yx H[n, c, y, x]]: a sum over N x C (and its partials), no pass over H
    assert with_beta - without <= 2 * n * c


@pytest.mark.parametrize("shape", SHAPES)
def test_group_norm_function_matches_torch(shape):
    n, c, h, w, groups = shape
    f, ins = _function(shape, "float64")
    rng = np.random.default_rng(sum(shape))
    x = rng.uniform(-1, 1, (n, c, h, w))
    gamma, beta = rng.uniform(0.5, 1.5, c), rng.uniform(-1, 1, c)
    head = rng.uniform(-1, 1, (n, c, h, w))
    y, res = f.forward(x, gamma, beta)
    got = f.backward(res, head)
    tx, tg, tb = (torch.tensor(a, requires_grad=True) for a in (x, gamma, beta))
    ty = F.group_norm(tx, groups, tg, tb, eps=1e-5)
    want = torch.autograd.grad(ty, (tx, tg, tb), torch.tensor(head))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-9, atol=1e-11)
