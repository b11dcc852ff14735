"""The bar: a small Transformer block in bfloat16 trains like PyTorch's bfloat16.

Token embedding, pre-norm causal two-head attention, a GELU MLP, residuals, an output
projection and cross-entropy over integer labels, written only with ``ta.topi``
(tests/blocks.py, which tests/e2e/test_transformer_block.py checks against ``torch.autograd``
in float64) and differentiated with ``ta.JacobianRecursive``.  Every parameter is stored in
bfloat16; both sides run a few SGD steps on one fixed synthetic batch, each update computed in
float32 and rounded to bfloat16 (as PyTorch's ``p -= lr * g`` on bfloat16 tensors does).

bfloat16 keeps 8 significant bits, so the two runs drift apart by rounding differences (the
order of float32 sums, where a fused PyTorch kernel rounds once and a chain of ``topi``
operators rounds per operator).  The tolerance is set against that scale: each loss within
2% of PyTorch's, while the curve itself falls by far more than that, and the float32 curve is
also within it (the check is not looser than the effect of bfloat16 itself).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from blocks import torch_transformer_block, transformer_block

import tensorad as ta

nn = ta.topi.nn
B, L, D, HEADS, V = 2, 8, 16, 2, 13
DH = D // HEADS
SHAPES = {"E": (V, D), "g1": (D,), "b1": (D,), "Wq": (D, D), "Wk": (D, D), "Wv": (D, D),
          "Wo": (D, D), "g2": (D,), "b2": (D,), "W1": (D, 2 * D), "c1": (2 * D,),
          "W2": (2 * D, D), "Wout": (D, V)}
STEPS, LR = 6, 0.2
BF16 = np.dtype(ml_dtypes.bfloat16)


def block(p, tokens, labels):
    return transformer_block(p, nn.embedding(p["E"], tokens), labels, HEADS)


def _initial():
    rng = np.random.default_rng(0)
    data = {n: rng.normal(scale=0.2, size=s).astype(np.float32) for n, s in SHAPES.items()}
    data["g1"] += 1.0
    data["g2"] += 1.0
    tokens = rng.integers(0, V, (B, L)).astype(np.int32)
    labels = np.roll(tokens, -1, axis=1)  # predict the next token
    return data, tokens, labels


def tensorad_curve(dtype: str) -> list[float]:
    data, tokens, labels = _initial()
    names = list(SHAPES)
    params = {n: ta.placeholder(s, dtype, n) for n, s in SHAPES.items()}
    tok, lab = ta.placeholder((B, L), "int32", "tokens"), ta.placeholder((B, L), "int32", "labels")
    loss = block(params, tok, lab)
    assert loss.dtype == dtype
    grads = ta.JacobianRecursive(loss, [params[n] for n in names])
    assert all(g.dtype == dtype for g in grads)
    step = ta.build([loss, *grads], [params[n] for n in names] + [tok, lab])
    store = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    p = {n: a.astype(store) for n, a in data.items()}
    curve = []
    for _ in range(STEPS):
        out = step(*[p[n] for n in names], tokens, labels)
        curve.append(float(out[0]))
        for n, g in zip(names, out[1:]):
            p[n] = (p[n].astype(np.float32) - np.float32(LR) * g.astype(np.float32)).astype(store)
    return curve


def torch_curve(torch, dtype) -> list[float]:
    data, tokens, labels = _initial()
    p = {n: torch.tensor(a).to(dtype).requires_grad_() for n, a in data.items()}
    tok, lab = torch.tensor(tokens, dtype=torch.long), torch.tensor(labels, dtype=torch.long)
    curve = []
    for _ in range(STEPS):
        x = torch.nn.functional.embedding(tok, p["E"])
        loss = torch_transformer_block(torch, p, x, lab, HEADS)
        curve.append(loss.item())
        loss.backward()
        with torch.no_grad():
            for t in p.values():
                t -= LR * t.grad
                t.grad = None
    return curve


def test_bfloat16_transformer_trains_like_pytorch_bfloat16():
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    ours = np.array(tensorad_curve("bfloat16"))
    theirs = np.array(torch_curve(torch, torch.bfloat16))
    f32 = np.array(torch_curve(torch, torch.float32))
    assert theirs[-1] < 0.5 * theirs[0]  # it trains: the curve falls by far more than the tolerance
    np.testing.assert_allclose(ours, theirs, rtol=0.02)
    np.testing.assert_allclose(f32, theirs, rtol=0.02)


def hand_gradient_work() -> tuple[int, dict[str, int]]:
    """The work of the hand-written gradient of ``block``, counted as ``ta.lower(...).work``
    counts it (innermost loop-body executions): every forward value the backward reads, once,
    then PyTorch's per-operator backward formulas.  N tokens, F = 2D hidden units, P causal
    (query, key) pairs over all batches and heads, DH the head width."""
    n, f = B * L, 2 * D
    pairs = B * HEADS * L * (L + 1) // 2
    terms = {
        "embedding gather x = E[tokens]": n * D,
        "layer norms: mean, var, output (x2)": 2 * 3 * n * D,
        "q, k, v = h Wq, h Wk, h Wv": 3 * n * D * D,
        "attention forward on the triangle: S = q k^T, max, sum, P": pairs * DH + 3 * pairs,
        "attention output A = P v": pairs * DH,
        "A Wo, LN2 h W1, gelu, h W2": n * D * D + n * D * f + n * f + n * f * D,
        "logits x Wout, their max, sum of exp, the loss": n * D * V + 2 * n * V + n,
        "dlogits = softmax - onehot": n * V,
        "dWout, dx = dlogits Wout^T": 2 * n * D * V,
        "dW2, dh, dc1 (gelu' fused)": 2 * n * f * D + n * f,
        "dW1, dh2": 2 * n * D * f,
        "layer norm backward: dbeta, dgamma, two row sums, dX (x2)": 2 * 5 * n * D,
        "dWo, dA": 2 * n * D * D,
        "attention backward: dv, dP, r, dS, dq, dk": 4 * pairs * DH + 2 * pairs,
        "dWq, dWk, dWv and dh1 = sum of the three products": 6 * n * D * D,
        "embedding scatter-add dE": n * D,
    }
    return sum(terms.values()), terms


def test_gradient_work_of_the_block_is_within_10_percent_of_hand_written():
    """The bar: the block's gradient does the work of the hand-written one (<= 1.1x)."""
    from tensorad.ir import placeholders

    params = {n: ta.placeholder(s, "float32", n) for n, s in SHAPES.items()}
    tok, lab = ta.placeholder((B, L), "int32", "tokens"), ta.placeholder((B, L), "int32", "labels")
    loss = block(params, tok, lab)
    grads = ta.JacobianRecursive(loss, list(params.values()), ta.placeholder(loss.shape, name="H"))
    work = ta.lower(grads, placeholders(grads)).work
    hand, terms = hand_gradient_work()
    assert work <= 1.1 * hand, f"block gradient work {work} > 1.1 x hand {hand}: {terms}"
