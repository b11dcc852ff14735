"""A norm of a residual, ``layer_norm(X + R)``: its mean's gradient sums ``a X[k] + a R[k]``
-- terms of one coefficient -- whose bracket ``sum_k (X[k] + R[k])`` is the forward's own sum
of the residual spelled through its ``add`` (simplify/sums/factor.py ``_shared_coefficients``,
simplify/program.py ``register_reads``).  The backward then makes the passes a plain layer
norm's does (one over X and R fewer).  Oracles: PyTorch float64 autograd and the work of the
plain layer norm's backward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorad as ta
from tensorad import topi

F = torch.nn.functional


def _backward_work(residual: bool, rows: int = 16, cols: int = 24) -> int:
    X = ta.placeholder((rows, cols), "float32", name="X")
    R = ta.placeholder((rows, cols), "float32", name="R")
    g = ta.placeholder((cols,), "float32", name="gamma")
    b = ta.placeholder((cols,), "float32", name="beta")
    Y = topi.nn.layer_norm(X + R if residual else X, g, b)
    ins = [X, R, g, b] if residual else [X, g, b]
    return ta.function(Y, ins, wrt=ins, num_threads=1).lower_backward().work


def test_a_residual_layer_norm_backward_does_the_work_of_a_plain_one_plus_its_copy():
    rows, cols = 16, 24
    # the residual's gradient is the input's, copied once more (R.grad = X.grad): rows * cols
    assert _backward_work(True, rows, cols) == _backward_work(False, rows, cols) + rows * cols


@settings(max_examples=10, deadline=None)
@given(form=st.sampled_from(["add", "sub", "scaled", "three"]), norm=st.sampled_from(["layer", "rms"]),
       rows=st.integers(1, 5), cols=st.integers(2, 9), seed=st.integers(0, 2**16))
def test_norms_of_residuals_match_torch(form, norm, rows, cols, seed):
    shape = (rows, cols)
    X, R, S = (ta.placeholder(shape, "float64", name=n) for n in "XRS")
    g = ta.placeholder((cols,), "float64", name="gamma")
    b = ta.placeholder((cols,), "float64", name="beta")
    make = {"add": lambda x, r, s: x + r, "sub": lambda x, r, s: x - r,
            "scaled": lambda x, r, s: x * 2.0 + r, "three": lambda x, r, s: x + r + s}[form]
    Z = make(X, R, S)
    Y = topi.nn.layer_norm(Z, g, b) if norm == "layer" else topi.nn.rms_norm(Z, g, eps=1e-5)
    ins = [X, R, S, g] + ([b] if norm == "layer" else [])
    fn = ta.function(Y, ins, wrt=ins, num_threads=1)
    rng = np.random.default_rng(seed)
    data = [rng.uniform(-1, 1, t.shape) for t in ins]
    h = rng.uniform(-1, 1, shape)
    got, res = fn.forward(*data)
    grads = fn.backward(res, h)
    tx = [torch.tensor(a, requires_grad=True) for a in data]
    z = make(*tx[:3])
    if norm == "layer":
        y = F.layer_norm(z, (cols,), tx[3], tx[4], eps=1e-5)
    else:
        y = z * torch.rsqrt((z * z).mean(-1, keepdim=True) + 1e-5) * tx[3]
    np.testing.assert_allclose(got, y.detach().numpy(), rtol=1e-10, atol=1e-10)
    want = torch.autograd.grad(y, tx, torch.tensor(h), allow_unused=True)
    for a, w in zip(grads, want):
        w = np.zeros_like(a) if w is None else w.numpy()
        np.testing.assert_allclose(a, w, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_residual_backward_built_matches_torch(threads):
    rows, cols = 33, 77
    X, R = (ta.placeholder((rows, cols), "float32", name=n) for n in "XR")
    g, b = (ta.placeholder((cols,), "float32", name=n) for n in ("gamma", "beta"))
    fn = ta.function(topi.nn.layer_norm(X + R, g, b), [X, R, g, b], wrt=[X, R, g, b], num_threads=threads)
    rng = np.random.default_rng(3)
    data = [rng.uniform(-1, 1, t.shape).astype(np.float32) for t in (X, R, g, b)]
    h = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)
    _, res = fn.forward(*data)
    grads = fn.backward(res, h)
    tx = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in data]
    y = F.layer_norm(tx[0] + tx[1], (cols,), tx[2], tx[3], eps=1e-5)
    for a, w in zip(grads, torch.autograd.grad(y, tx, torch.tensor(h.astype(np.float64)))):
        np.testing.assert_allclose(a, w.numpy(), rtol=2e-4, atol=2e-4)
