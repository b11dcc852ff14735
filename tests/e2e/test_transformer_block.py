"""A small pre-norm Transformer block written only with ``ta.topi`` -- layer norm, two-head
causal attention, a GELU MLP, residuals, an output projection and cross-entropy over integer
labels -- differentiated with ``ta.JacobianRecursive`` and compared with ``torch.autograd`` in
float64.  (The token embedding is an input here: gathers are not in the language yet.)"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

topi, nn = ta.topi, ta.topi.nn
B, L, D, HEADS, V = 2, 4, 8, 2, 5
DH = D // HEADS
SHAPES = {"X": (B, L, D), "g1": (D,), "b1": (D,), "Wq": (D, D), "Wk": (D, D), "Wv": (D, D),
          "Wo": (D, D), "g2": (D,), "b2": (D,), "W1": (D, 2 * D), "c1": (2 * D,),
          "W2": (2 * D, D), "Wout": (D, V)}


def _heads(t):  # [B, L, D] -> [B, HEADS, L, DH]
    return topi.transpose(topi.reshape(t, (B, L, HEADS, DH)), (0, 2, 1, 3))


def block(p, labels):
    x = p["X"]
    h = nn.layer_norm(x, p["g1"], p["b1"])
    q, k, v = (_heads(topi.matmul(h, p[w])) for w in ("Wq", "Wk", "Wv"))
    a = nn.scaled_dot_product_attention(q, k, v, causal=True)
    a = topi.reshape(topi.transpose(a, (0, 2, 1, 3)), (B, L, D))
    x = x + topi.matmul(a, p["Wo"])
    h = nn.layer_norm(x, p["g2"], p["b2"])
    h = nn.gelu(topi.matmul(h, p["W1"]) + p["c1"])
    x = x + topi.matmul(h, p["W2"])
    return nn.cross_entropy(topi.matmul(x, p["Wout"]), labels)


def torch_block(torch, p, labels):
    f = torch.nn.functional
    x = p["X"]
    h = f.layer_norm(x, (D,), p["g1"], p["b1"])

    def heads(t):
        return t.reshape(B, L, HEADS, DH).transpose(1, 2)

    q, k, v = (heads(h @ p[w]) for w in ("Wq", "Wk", "Wv"))
    a = f.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + a.transpose(1, 2).reshape(B, L, D) @ p["Wo"]
    h = f.gelu(f.layer_norm(x, (D,), p["g2"], p["b2"]) @ p["W1"] + p["c1"])
    x = x + h @ p["W2"]
    return f.cross_entropy((x @ p["Wout"]).reshape(B * L, V), labels.reshape(B * L))


def test_transformer_block_matches_torch_autograd():
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    rng = np.random.default_rng(0)
    data = {n: rng.normal(scale=0.5, size=s) for n, s in SHAPES.items()}
    data["g1"] += 1.0
    data["g2"] += 1.0
    labels = rng.integers(0, V, (B, L)).astype(np.int32)
    params = {n: ta.placeholder(s, "float64", n) for n, s in SHAPES.items()}
    lab = ta.placeholder((B, L), "int32", "labels")
    loss = block(params, lab)
    names = list(SHAPES)
    grads = ta.JacobianRecursive(loss, [params[n] for n in names])
    out = ta.build([loss, *grads], [params[n] for n in names] + [lab])(*[data[n] for n in names], labels)

    tp = {n: torch.tensor(a, requires_grad=True) for n, a in data.items()}
    tloss = torch_block(torch, tp, torch.tensor(labels, dtype=torch.long))
    tloss.backward()
    np.testing.assert_allclose(out[0], tloss.item(), rtol=1e-12)
    for n, g in zip(names, out[1:]):
        np.testing.assert_allclose(g, tp[n].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=n)
