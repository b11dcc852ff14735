"""Sums that share a side are stacked group by group, and a later group's members may read the sums an
earlier group stacked: the symbolic gradient of ``mean(dense(X, W) * dense(X, W))`` (the layer written
twice, two equal sums) over a batch of rows stacked the two ``dense`` sums, then built the stacked rows of
the data gradient's two sums from their bodies as found before that stack, still reading the two sums it
had removed -- ``KeyError: Tensor(dense, ...)`` out of ``ta.build`` in float64.  Each group is now found
from the sums as they are when it is stacked."""

import numpy as np

import tensorad as ta
from tensorad import topi


def test_a_group_reads_the_sums_an_earlier_group_stacked():
    n = ta.size_var("n")
    X = ta.placeholder((n, 9), "float64", "X")
    W = ta.placeholder((5, 9), "float64", "W")
    Y = topi.mean(topi.multiply(topi.nn.dense(X, W), topi.nn.dense(X, W)))
    H = ta.placeholder((), "float64", "H")
    dX, dW = ta.gradient(Y, [X, W], H)
    k = ta.build([dX, dW], [X, W, H], num_threads=1)
    rng = np.random.default_rng(0)
    w, h = rng.standard_normal((5, 9)), np.array(0.7)
    for rows in (1, 3, 9):
        x = rng.standard_normal((rows, 9))
        dx, dw = k(x, w, h)
        d = x @ w.T  # d mean(D * D) / dD = 2 D / D.size
        np.testing.assert_allclose(dx, h * 2 * d @ w / d.size, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dw, h * 2 * d.T @ x / d.size, rtol=1e-12, atol=1e-12)
