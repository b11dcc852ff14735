"""A max or min whose ``where`` bounds its window by an output axis,
``Y[i, j] = max_{k < j} X[i, k] (j + 1)`` (the source reads ``j``, so this is no running scan): the
gradient's tie routing visited the whole box of ``k`` for every output, ``R N^2`` points, where the
window has ``N (N - 1) / 2`` per row (513 work for 3 x 9, a breach of the cheap-gradient bound; 378
now).  The routing keeps the ``where``'s linear bounds of the window by the outputs as bounds of its
loop over the window point.

Oracles: PyTorch float64 (``torch.max``/``torch.min`` of each window: ties share the head evenly,
NaNs take it, ``docs/conventions.md``), and its second derivatives; ``ta.evaluate``."""

import numpy as np
import pytest
import torch
from blocks import assert_gradient_is_torchs, assert_hvp_is_torchs

import tensorad as ta

AVX512 = "llvm -mcpu=skylake-avx512"
R, N = 3, 9


def _triangle(kind, n=N, square=False):
    X, H = ta.placeholder((R, n), "float64", "X"), ta.placeholder((R, n), "float64", "H")
    k = ta.reduce_axis((0, n), "k")
    pick = ta.max if kind == "max" else ta.min

    def body(i, j):
        a = X[i, k] * X[i, k] if square else X[i, k]
        return pick(a * (j + 1.0), k, where=k < j)

    Y = ta.compute((R, n), body, "Y")
    return X, H, Y


def _torch_loss(kind, xt, h, square=False):
    pick = torch.max if kind == "max" else torch.min
    total = torch.zeros((), dtype=torch.float64)
    for j in range(1, xt.shape[1]):
        for i in range(R):
            a = xt[i, :j] ** 2 if square else xt[i, :j]
            total = total + h[i, j] * pick(a * (j + 1.0))
    return total


def _inputs(case, rng):
    x = rng.integers(-2, 3, (R, N)).astype(np.float64)  # many ties
    h = rng.standard_normal((R, N))
    if case == "distinct":
        x = rng.permutation(np.arange(R * N)).reshape(R, N) / 4.0
    elif case == "nan":
        x[0, 3] = x[1, 5] = x[2, 0] = np.nan
    elif case == "inf":
        x[0, 2], x[1, 4], x[2, 0], x[2, 7] = np.inf, -np.inf, -np.inf, np.inf
    return x, h


@pytest.mark.parametrize("kind", ["max", "min"])
def test_tie_routing_runs_over_the_window_only(kind):
    """Work by hand: the compared values (saved: the source rounds), the winner with its tie count and
    the tie routing each visit the ``R N (N - 1) / 2`` points of the triangle; the destination and the
    winner's scatter one per output."""
    X, H, Y = _triangle(kind)
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    low = ta.lower([dX], [X, H], target=AVX512)
    assert low.work == 3 * R * N * (N - 1) // 2 + 2 * R * N, str(low)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_gradient_with_ties_nan_and_inf_equals_pytorch(kind):
    X, H, Y = _triangle(kind)
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    rng = np.random.default_rng(5)
    draws = [(case, *_inputs(case, rng)) for case in ["ties", "distinct", "nan", "inf"]]
    assert_gradient_is_torchs(dX, X, H, lambda xt, h: _torch_loss(kind, xt, h), draws)


def test_hessian_vector_product_with_ties_equals_pytorch():
    X, H, Y = _triangle("max", square=True)
    rng = np.random.default_rng(2)
    x, v, h = rng.integers(-2, 3, (R, N)).astype(np.float64), rng.standard_normal((R, N)), rng.random((R, N))

    def loss(xt):
        return sum(float(h[i, j]) * torch.max(xt[i, :j] ** 2 * (j + 1.0)) ** 2
                   for j in range(1, N) for i in range(R))

    assert_hvp_is_torchs(Y, X, H, loss, x, v, h)
