"""Train a Transformer block whose two sublayers are tensorad programs, in PyTorch.

    python examples/torch_transformer.py             # 20 Adam steps of the tensorad block
    python examples/torch_transformer.py --compare   # and the same block in pure PyTorch

The block (pre-norm): ``x + attention(layer_norm(x))``, then ``x + mlp(layer_norm(x))`` with a
GELU MLP; multi-head self-attention with a causal mask.  Each sublayer is a function written
with ``ta.topi`` and decorated with ``@ta.torch.op``; the number of heads is a static keyword
argument.  The task: predict the next token's embedding-space target, a mean-squared error on
synthetic sequences of two lengths (each length is compiled once, on first use).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import tensorad as ta

DIM, HEADS, HIDDEN, BATCH = 16, 2, 32, 4
topi, nn = ta.topi, ta.topi.nn


def _linear(X, W, B):
    """``X [..., in] -> [..., out]`` through a 2-D dense."""
    lead = X.shape[:-1]
    flat = topi.reshape(X, (-1, X.shape[-1]))
    return topi.reshape(nn.dense(flat, W, B), (*lead, W.shape[0]))


@ta.torch.op
def attention(X, G, Bn, Wqkv, Bqkv, Wo, Bo, *, heads=1):
    """``X + Wo . attention(heads of Wqkv . layer_norm(X))`` for ``X [batch, length, dim]``."""
    batch, length, dim = X.shape
    qkv = _linear(nn.layer_norm(X, G, Bn), Wqkv, Bqkv)           # [batch, length, 3 dim]
    q, k, v = (topi.transpose(topi.reshape(t, (batch, length, heads, dim // heads)), (0, 2, 1, 3))
               for t in topi.split(qkv, 3, axis=2))              # [batch, heads, length, dim/heads]
    a = nn.scaled_dot_product_attention(q, k, v, causal=True)
    merged = topi.reshape(topi.transpose(a, (0, 2, 1, 3)), (batch, length, dim))
    return X + _linear(merged, Wo, Bo)


@ta.torch.op
def mlp(X, G, Bn, W1, B1, W2, B2):
    """``X + W2 . gelu(W1 . layer_norm(X))``."""
    return X + _linear(nn.gelu(_linear(nn.layer_norm(X, G, Bn), W1, B1)), W2, B2)


def initial_parameters(seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)

    def w(*shape):
        return torch.randn(*shape, generator=gen) * shape[-1] ** -0.5

    ones, zeros = torch.ones(DIM), torch.zeros(DIM)
    return [ones, zeros, w(3 * DIM, DIM), torch.zeros(3 * DIM), w(DIM, DIM), zeros,
            ones, zeros, w(HIDDEN, DIM), torch.zeros(HIDDEN), w(DIM, HIDDEN), zeros]


class TensorADBlock(torch.nn.Module):
    def __init__(self, params: list[torch.Tensor]) -> None:
        super().__init__()
        self.params = torch.nn.ParameterList([torch.nn.Parameter(p.clone()) for p in params])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = list(self.params)
        return mlp(attention(x, *p[:6], heads=HEADS), *p[6:])


class TorchBlock(TensorADBlock):
    """The same block in pure PyTorch (the comparison)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g1, b1, wqkv, bqkv, wo, bo, g2, b2, w1, bias1, w2, bias2 = self.params
        batch, length, _ = x.shape
        qkv = F.linear(F.layer_norm(x, (DIM,), g1, b1), wqkv, bqkv)
        q, k, v = (t.reshape(batch, length, HEADS, DIM // HEADS).transpose(1, 2) for t in qkv.chunk(3, -1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + F.linear(a.transpose(1, 2).reshape(batch, length, DIM), wo, bo)
        return x + F.linear(F.gelu(F.linear(F.layer_norm(x, (DIM,), g2, b2), w1, bias1)), w2, bias2)


def train(model: torch.nn.Module, steps: int) -> list[float]:
    gen = torch.Generator().manual_seed(1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        length = (6, 9)[step % 2]
        x = torch.randn(BATCH, length + 1, DIM, generator=gen).cumsum(1) * 0.3  # smooth sequences
        loss = F.mse_loss(model(x[:, :-1]), x[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compare", action="store_true", help="also train the pure PyTorch block")
    args = parser.parse_args(argv)
    params = initial_parameters()
    runs = {"tensorad": train(TensorADBlock(params), args.steps)}
    if args.compare:
        runs["torch"] = train(TorchBlock(params), args.steps)
    for step in range(args.steps):
        print(f"step {step:3d}  " + "  ".join(f"{k} loss {v[step]:.6f}" for k, v in runs.items()))
    return runs


if __name__ == "__main__":
    main()
