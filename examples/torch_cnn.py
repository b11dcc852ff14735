"""Train a small CNN whose layers are tensorad programs, in PyTorch, on synthetic data.

    python examples/torch_cnn.py                 # 30 SGD steps of the tensorad model
    python examples/torch_cnn.py --compare       # and the same model in pure PyTorch, side by side

The model: conv2d 3x3 (padding 1) + bias -> relu -> 2x2 max pool -> flatten -> dense.  Each
layer is a function written with ``ta.topi`` and decorated with ``@ta.torch.op``: called with
torch tensors, it is compiled for their shapes on first use (forward, and a backward that reads
the forward's saved reductions, max pooling's winner among them) and acts as an autograd-aware
PyTorch operator.  Everything else -- parameters, loss, optimizer, data -- is ordinary PyTorch.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import tensorad as ta

CLASSES, SIDE, CHANNELS, BATCH = 10, 12, 8, 32


@ta.torch.op
def conv_relu_pool(X, W, B):
    conv = ta.topi.nn.conv2d(X, W, 1, 1)
    return ta.topi.nn.pool(ta.topi.nn.relu(conv + ta.topi.reshape(B, (B.shape[0], 1, 1))),
                           2, 2, 0, "max")


@ta.torch.op
def flatten_dense(X, W, B):
    return ta.topi.nn.dense(ta.topi.nn.flatten(X), W, B)


def initial_parameters(seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    hidden = CHANNELS * (SIDE // 2) ** 2
    return [torch.randn(CHANNELS, 1, 3, 3, generator=gen) * 0.3, torch.zeros(CHANNELS),
            torch.randn(CLASSES, hidden, generator=gen) * hidden ** -0.5, torch.zeros(CLASSES)]


class TensorADCNN(torch.nn.Module):
    """The model with the tensorad layers above."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        super().__init__()
        self.w1, self.b1, self.w2, self.b2 = (torch.nn.Parameter(p.clone()) for p in params)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return flatten_dense(conv_relu_pool(x, self.w1, self.b1), self.w2, self.b2)


class TorchCNN(torch.nn.Module):
    """The same model in pure PyTorch (the comparison)."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        super().__init__()
        self.w1, self.b1, self.w2, self.b2 = (torch.nn.Parameter(p.clone()) for p in params)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.max_pool2d(F.relu(F.conv2d(x, self.w1, self.b1, padding=1)), 2, 2)
        return F.linear(torch.flatten(y, 1), self.w2, self.b2)


def synthetic_data(n: int = 8 * BATCH, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Images of 10 random templates plus noise; the label is the template."""
    gen = torch.Generator().manual_seed(seed)
    templates = torch.randn(CLASSES, 1, SIDE, SIDE, generator=gen)
    labels = torch.arange(n) % CLASSES
    images = templates[labels] + 0.8 * torch.randn(n, 1, SIDE, SIDE, generator=gen)
    return images, labels


def train(model: torch.nn.Module, steps: int, batch: int = BATCH, lr: float = 0.05) -> list[float]:
    images, labels = synthetic_data()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        lo = (step * batch) % len(images)
        x, y = images[lo:lo + batch], labels[lo:lo + batch]
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--compare", action="store_true", help="also train the pure PyTorch model")
    args = parser.parse_args(argv)
    params = initial_parameters()
    runs = {"tensorad": train(TensorADCNN(params), args.steps)}
    if args.compare:
        runs["torch"] = train(TorchCNN(params), args.steps)
    for step in range(args.steps):
        print(f"step {step:3d}  " + "  ".join(f"{k} loss {v[step]:.6f}" for k, v in runs.items()))
    return runs


if __name__ == "__main__":
    main()
