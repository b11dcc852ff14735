"""Model blocks written twice -- with ``ta.topi`` and with ``torch.nn.functional`` -- shared by
the end-to-end tests that compare them (registered as the module ``blocks`` by conftest.py).

``transformer_block``: pre-norm causal multi-head attention, a GELU MLP, residuals, an output
projection and cross-entropy over integer labels, on activations ``x`` of shape ``[B, L, D]``
(tests/e2e/test_transformer_block.py feeds an input, test_transformer_bf16.py an embedding).
Parameters ``p``: ``g1, b1, Wq, Wk, Wv, Wo, g2, b2, W1, c1, W2, Wout``.

``tanh_chain``: a long elementwise chain (tests of long programs and of nest fusion);
``tanh_chain_gradient``: the gradient of its ``Y[0] + Y[9]``, in NumPy.
``dense_tanh_chain_gradient``: the loss and weight gradient of ``depth`` layers ``h <- tanh(h W^T)`` summed,
in float64 NumPy (the chain of the call-cost tests).

``assert_gradient_is_torchs``: a built and an evaluated gradient against PyTorch's at several draws;
``assert_hvp_is_torchs``: a Hessian-vector product against PyTorch's second derivatives.
"""

from __future__ import annotations

import tensorad as ta

topi, nn = ta.topi, ta.topi.nn


def transformer_block(p: dict, x, labels, heads: int):
    b, seq, d = x.shape
    dh = d // heads

    def split(t):  # [B, L, D] -> [B, HEADS, L, DH]
        return topi.transpose(topi.reshape(t, (b, seq, heads, dh)), (0, 2, 1, 3))

    h = nn.layer_norm(x, p["g1"], p["b1"])
    q, k, v = (split(topi.matmul(h, p[w])) for w in ("Wq", "Wk", "Wv"))
    a = nn.scaled_dot_product_attention(q, k, v, causal=True)
    a = topi.reshape(topi.transpose(a, (0, 2, 1, 3)), (b, seq, d))
    x = x + topi.matmul(a, p["Wo"])
    h = nn.layer_norm(x, p["g2"], p["b2"])
    h = nn.gelu(topi.matmul(h, p["W1"]) + p["c1"])
    x = x + topi.matmul(h, p["W2"])
    return nn.cross_entropy(topi.matmul(x, p["Wout"]), labels)


def torch_transformer_block(torch, p: dict, x, labels, heads: int):
    """The same block in PyTorch (``labels``: a long tensor of shape ``[B, L]``)."""
    f = torch.nn.functional
    b, seq, d = x.shape

    def split(t):
        return t.reshape(b, seq, heads, d // heads).transpose(1, 2)

    h = f.layer_norm(x, (d,), p["g1"], p["b1"])
    q, k, v = (split(h @ p[w]) for w in ("Wq", "Wk", "Wv"))
    a = f.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + a.transpose(1, 2).reshape(b, seq, d) @ p["Wo"]
    h = f.gelu(f.layer_norm(x, (d,), p["g2"], p["b2"]) @ p["W1"] + p["c1"])
    x = x + h @ p["W2"]
    logits = x @ p["Wout"]
    return f.cross_entropy(logits.reshape(b * seq, logits.shape[-1]), labels.reshape(b * seq))


def tanh_chain(n: int, size: int = 16, dtype: str = "float64"):
    """``(X, Y)``: ``n`` links from the input ``X`` alternating ``sigmoid(P) + P / 2`` and
    ``tanh(P) * 0.9``.  Each link is expensive and read twice by the gradient, so each is
    stored: the lowered gradient has about one nest (or fused member) per link."""
    X = ta.placeholder((size,), dtype, name="X")
    Y = X
    for k in range(n):
        if k % 2:
            Y = (lambda P: ta.compute((size,), lambda i: ta.tanh(P[i]) * 0.9, name=f"t{k}"))(Y)
        else:
            Y = (lambda P: ta.compute((size,), lambda i: ta.sigmoid(P[i]) + P[i] * 0.5, name=f"s{k}"))(Y)
    return X, Y


def tanh_chain_gradient(x, n: int):
    """d(Y[0] + Y[9]) / dX of :func:`tanh_chain` at ``x`` (float64 NumPy), by forward-mode dual numbers."""
    import numpy as np

    y, d = np.array(x, np.float64), np.ones(np.shape(x))
    for k in range(n):
        if k % 2:
            t = np.tanh(y)
            y, d = 0.9 * t, 0.9 * (1 - t * t) * d
        else:
            s = 1 / (1 + np.exp(-y))
            y, d = s + 0.5 * y, (s * (1 - s) + 0.5) * d
    out = np.zeros_like(y)
    out[[0, 9]] = d[[0, 9]]
    return out


def dense_tanh_chain_gradient(depth: int, x, w):
    """``(sum(h), d sum(h) / dW)`` in float64 NumPy, where ``h <- tanh(h W^T)`` ``depth`` times from ``x``."""
    import numpy as np

    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    hs = [x]
    for _ in range(depth):
        hs.append(np.tanh(hs[-1] @ w.T))
    g, gw = np.ones_like(hs[-1]), np.zeros_like(w)
    for k in range(depth, 0, -1):
        gz = g * (1 - hs[k] ** 2)
        gw += gz.T @ hs[k - 1]
        g = gz @ w
    return hs[-1].sum(), gw


def chain_step(P, k: int, centre_every: int | None = None):
    """Step ``k`` of a long elementwise chain over a 16-vector ``P``: sigmoid and tanh steps in
    turn and, every ``centre_every`` steps, a centring (``P - mean(P)``: a reduction in the
    chain)."""
    if centre_every and k % centre_every == centre_every - 1:
        r = ta.reduce_axis((0, 16), name="r")
        m = ta.compute((), lambda: ta.sum(P[r], axis=r) * (1 / 16), name=f"m{k}")
        return ta.compute((16,), lambda i: P[i] - m(), name=f"c{k}")
    if k % 2:
        return ta.compute((16,), lambda i: ta.tanh(P[i]) * 0.9, name=f"t{k}")
    return ta.compute((16,), lambda i: ta.sigmoid(P[i]) + P[i] * 0.5, name=f"s{k}")


def assert_gradient_is_torchs(dX, X, H, torch_loss, draws) -> None:
    """``dX`` (the gradient of ``X`` for the head ``H``), built and evaluated, equals PyTorch's gradient of
    ``torch_loss(x, h)`` at each ``(case, x, h)`` of ``draws``, to 1e-12 in float64."""
    import numpy as np
    import torch

    build = ta.build([dX], [X, H])
    for case, x, h in draws:
        xt = torch.tensor(x, requires_grad=True)
        torch_loss(xt, torch.tensor(h)).backward()
        want = xt.grad.numpy()
        np.testing.assert_allclose(build(x, h), want, rtol=1e-12, atol=1e-12, err_msg=case)
        np.testing.assert_allclose(ta.evaluate(dX, {X: x, H: h}), want, rtol=1e-12, atol=1e-12, err_msg=case)


def assert_hvp_is_torchs(Y, X, H, torch_loss, x, v, h) -> None:
    """The Hessian-vector product along ``v`` of ``L = sum Y^2 H`` (the head ``H`` a weight) with respect
    to ``X``, built, equals PyTorch's of ``torch_loss(x)`` (the same ``L``, written in torch) at ``x``."""
    import numpy as np
    import torch

    V = ta.placeholder(X.shape, X.dtype, "V")
    axes = [ta.reduce_axis((0, n), f"r{d}") for d, n in enumerate(Y.shape)]
    L = ta.compute((), lambda: ta.sum(Y[tuple(axes)] * Y[tuple(axes)] * H[tuple(axes)], axes), name="L")
    (hv,) = ta.hessian_vector_product(L, [X], [V])
    xt = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(torch_loss(xt), xt, create_graph=True)
    (want,) = torch.autograd.grad((g * torch.tensor(v)).sum(), xt)
    np.testing.assert_allclose(ta.build([hv], [X, V, H])(x, v, h), want.numpy(), rtol=1e-12, atol=1e-12)
