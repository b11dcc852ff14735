"""A call of a ``ta.function`` cost time quadratic in the number of saved tensors: every
``forward`` and ``backward`` found where each residual comes from again, by looking each saved
tensor up in the tuples of outputs and saved extras -- and tensors compare structurally, their
whole definitions.  A chain of 80 layers spent 26 ms per forward around a 0.1 ms kernel.

Now the residuals' sources are found once per function.  The test counts the structural
comparisons of tensors that a call makes (none, at any depth), not its time."""

from __future__ import annotations

import numpy as np

import tensorad as ta
from tensorad.ir.tensor import Tensor


def _chain(depth: int) -> tuple[ta.Function, np.ndarray, np.ndarray]:
    X = ta.placeholder((4, 8), name="X")
    W = ta.placeholder((8, 8), name="W")
    h = X
    for _ in range(depth):
        h = ta.topi.tanh(ta.topi.nn.dense(h, W))
    f = ta.function(ta.topi.sum(h), [X, W], wrt=[W])
    rng = np.random.default_rng(0)
    return f, rng.random((4, 8), np.float32), (rng.random((8, 8), np.float32) - 0.5) * 0.2


def test_a_call_compares_no_tensors(monkeypatch):
    compared = []
    structural = Tensor.__eq__
    for depth in (3, 24):
        f, x, w = _chain(depth)
        _, residuals = f.forward(x, w)
        f.backward(residuals, 1.0)  # (the kernels built, the plan's lookups made)
        assert len(residuals) >= depth  # (a tanh's output saved per layer)
        compared.clear()
        monkeypatch.setattr(Tensor, "__eq__", lambda a, b: compared.append(1) or structural(a, b))
        _, residuals = f.forward(x, w)
        f.backward(residuals, 1.0)
        monkeypatch.undo()
        assert not compared, f"depth {depth}: {len(compared)} tensor comparisons in one call"
