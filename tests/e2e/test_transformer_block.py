"""A small pre-norm Transformer block written only with ``ta.topi`` -- layer norm, two-head
causal attention, a GELU MLP, residuals, an output projection and cross-entropy over integer
labels -- differentiated with ``ta.JacobianRecursive`` and compared with ``torch.autograd`` in
float64.  The block is tests/blocks.py; its token embedding is an input here (test_transformer_bf16.py
gathers it)."""

from __future__ import annotations

import numpy as np
import pytest
from blocks import torch_transformer_block, transformer_block

import tensorad as ta

B, L, D, HEADS, V = 2, 4, 8, 2, 5
SHAPES = {"X": (B, L, D), "g1": (D,), "b1": (D,), "Wq": (D, D), "Wk": (D, D), "Wv": (D, D),
          "Wo": (D, D), "g2": (D,), "b2": (D,), "W1": (D, 2 * D), "c1": (2 * D,),
          "W2": (2 * D, D), "Wout": (D, V)}


def test_transformer_block_matches_torch_autograd():
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    rng = np.random.default_rng(0)
    data = {n: rng.normal(scale=0.5, size=s) for n, s in SHAPES.items()}
    data["g1"] += 1.0
    data["g2"] += 1.0
    labels = rng.integers(0, V, (B, L)).astype(np.int32)
    params = {n: ta.placeholder(s, "float64", n) for n, s in SHAPES.items()}
    lab = ta.placeholder((B, L), "int32", "labels")
    loss = transformer_block(params, params["X"], lab, HEADS)
    names = list(SHAPES)
    grads = ta.JacobianRecursive(loss, [params[n] for n in names])
    out = ta.build([loss, *grads], [params[n] for n in names] + [lab])(*[data[n] for n in names], labels)

    tp = {n: torch.tensor(a, requires_grad=True) for n, a in data.items()}
    tloss = torch_transformer_block(torch, tp, tp["X"], torch.tensor(labels, dtype=torch.long), HEADS)
    tloss.backward()
    np.testing.assert_allclose(out[0], tloss.item(), rtol=1e-12)
    for n, g in zip(names, out[1:]):
        np.testing.assert_allclose(g, tp[n].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=n)
