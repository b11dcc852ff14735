"""A max or min whose ``where`` has a conjunct of the outputs alone, ``Y[i, j] = min_k (2 X[j, k] + 1)
where 0 < i < 7``: the value is the same at every ``i`` the mask keeps and the identity elsewhere, yet
the gradient computed the winner, its tie count and the routing once per ``i`` (a breach of the
cheap-gradient bound).  Such conjuncts now mask the head, summed over ``i`` first, and the winner is
computed once per ``j``.

Oracles: PyTorch float64 (``torch.min`` of each row: ties share the head evenly, NaNs take it,
``docs/conventions.md``), and its second derivatives; ``ta.evaluate``."""

import numpy as np
import pytest
import torch
from blocks import assert_gradient_is_torchs, assert_hvp_is_torchs

import tensorad as ta

AVX512 = "llvm -mcpu=skylake-avx512"
N, M, K = 9, 3, 6
LO, HI = 1, 7  # the rows ``i`` the mask keeps


def _program(kind="min", square=False):
    X, H = ta.placeholder((M, K), "float64", "X"), ta.placeholder((N, M), "float64", "H")
    k = ta.reduce_axis((0, K), "k")
    pick = ta.min if kind == "min" else ta.max

    def body(i, j):
        a = X[j, k] * X[j, k] if square else X[j, k]
        return pick(a * 2.0 + 1.0, k, where=(i != 0) & (i < HI))

    return X, H, ta.compute((N, M), body, "Y")


def _torch_loss(kind, xt, h, square=False):
    pick = torch.min if kind == "min" else torch.max
    a = xt ** 2 if square else xt
    total = torch.zeros((), dtype=torch.float64)
    for i in range(LO, HI):
        for j in range(M):
            total = total + h[i, j] * pick(a[j] * 2.0 + 1.0)
    return total


def test_winner_runs_once_per_distinct_value():
    """Work by hand: the compared values (saved), the winner with its tie count ``2 M K`` and the
    destination ``M``; the head summed over the kept rows ``M (HI - LO)``; the winner's scatter ``M``
    and the tie routing ``M K``."""
    X, H, Y = _program()
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    low = ta.lower([dX], [X, H], target=AVX512)
    assert low.work == 3 * M * K + 2 * M + M * (HI - LO), str(low)


@pytest.mark.parametrize("kind", ["min", "max"])
def test_gradient_with_ties_nan_and_inf_equals_pytorch(kind):
    X, H, Y = _program(kind)
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    rng = np.random.default_rng(9)
    draws = []
    for case in ["ties", "distinct", "nan", "inf"]:
        x = rng.integers(-2, 2, (M, K)).astype(np.float64)  # many ties
        if case == "distinct":
            x = rng.permutation(np.arange(M * K)).reshape(M, K) / 4.0
        elif case == "nan":
            x[0, 3] = x[2, 0] = np.nan
        elif case == "inf":
            x[0, 1], x[1, 4], x[2, 0], x[2, 5] = np.inf, -np.inf, -np.inf, np.inf
        draws.append((case, x, rng.standard_normal((N, M))))
    assert_gradient_is_torchs(dX, X, H, lambda xt, h: _torch_loss(kind, xt, h), draws)


def test_hessian_vector_product_with_ties_equals_pytorch():
    X, H, Y = _program("max", square=True)
    rng = np.random.default_rng(6)
    x, v = rng.integers(-2, 3, (M, K)).astype(np.float64), rng.standard_normal((M, K))
    h = rng.random((N, M))

    def loss(xt):
        return sum(float(h[i, j]) * torch.max(xt[j] ** 2 * 2.0 + 1.0) ** 2
                   for i in range(LO, HI) for j in range(M))

    assert_hvp_is_torchs(Y, X, H, loss, x, v, h)
