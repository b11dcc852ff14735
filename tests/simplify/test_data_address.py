"""A one-hot written as a comparison of integer data with an index, ``L[n] == c``: the optimizer reads it
as an address, so the forward is a gather and the gradient a scatter-add, with the one-hot's meaning for
labels outside the axis (no row, no error)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

N, C, J = 64, 500, 16
TARGET = "llvm -mcpu=skylake-avx512"


def _labels() -> np.ndarray:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, C, size=N)
    labels[:4] = [-1, C, 3, 3]  # outside the axis on both sides, and a repeated label
    return labels


def _one_hot_matmul(as_where: bool):
    L = ta.placeholder((N,), dtype="int64", name="L")
    W = ta.placeholder((C, J), name="W")
    c = ta.reduce_axis((0, C), name="c")
    if as_where:
        Y = ta.compute((N, J), lambda n, j: ta.sum(W[c, j], axis=c, where=c == L[n]), name="Y")
    else:
        Y = ta.compute((N, J), lambda n, j: ta.sum(ta.select(L[n] == c, W[c, j], 0.0), axis=c), name="Y")
    return L, W, Y


@pytest.mark.parametrize("as_where", [False, True])
def test_one_hot_gradient_is_a_scatter_add(as_where):
    L, W, Y = _one_hot_matmul(as_where)
    H = ta.placeholder(Y.shape, name="H")
    dW, = ta.JacobianRecursive(Y, [W], H)
    assert ta.lower([dW], [L, W, H], target=TARGET).work <= N * J  # one add per head element, not C * N * J
    labels = _labels()
    h = np.random.default_rng(1).standard_normal((N, J)).astype(np.float32)
    expected = np.zeros((C, J), np.float32)
    inside = (labels >= 0) & (labels < C)
    np.add.at(expected, labels[inside], h[inside])
    got = ta.build([dW], [L, W, H])(labels, np.zeros((C, J), np.float32), h)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_one_hot_forward_is_a_gather():
    L, W, Y = _one_hot_matmul(False)
    Yo = ta.OptimizeAndLiftNonzeronessConditions(Y)
    assert ta.lower([Yo], [L, W], target=TARGET).work == N * J
    labels = _labels()
    w = np.random.default_rng(2).standard_normal((C, J)).astype(np.float32)
    expected = np.where(((labels >= 0) & (labels < C))[:, None], w[np.clip(labels, 0, C - 1)], 0.0)
    np.testing.assert_allclose(ta.build([Yo], [L, W])(labels, w), expected, rtol=1e-6)
