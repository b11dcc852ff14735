"""``tensorad.lang.batching.batch_program``: a program with a leading batch axis.

Oracle: ``ta.evaluate`` of the *original* program on each batch element in turn (stacked),
against ``ta.evaluate`` and ``ta.build`` of the batched program on the whole batch.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.lang.batching import batch_program

topi, nn = ta.topi, ta.topi.nn


def _program():
    """A convolution, a max pool (a winner-free selecting reduction), a softmax (a shift) and
    a tensor of W alone, which stays unbatched when only X is batched."""
    X, W = ta.placeholder((1, 2, 5, 5), "float64", "X"), ta.placeholder((3, 2, 3, 3), "float64", "W")
    Y = nn.pool(nn.relu(nn.conv2d(X, W, 1, 1)), 2, 2, 0, "max")
    S = nn.softmax(nn.flatten(Y))
    N = topi.sum(W * W, axis=(1, 2, 3))
    return [S, N, Y], [X, W]


def _sequential(outputs, inputs, data, batched, size):
    per = [ta.evaluate(outputs, {x: d[k] if b else d for x, d, b in zip(inputs, data, batched)})
           for k in range(size)]
    return [np.stack([p[j] for p in per]) for j in range(len(outputs))]


@pytest.mark.parametrize("batched", [(True, False), (False, True), (True, True)])
def test_batched_program_equals_the_stacked_elements(batched, rng):
    outputs, inputs = _program()
    size = 3
    data = [rng.standard_normal(((size,) if b else ()) + x.shape) for x, b in zip(inputs, batched)]
    bouts, bins = batch_program(outputs, inputs, batched, size)
    for x, bx, b in zip(inputs, bins, batched):
        assert bx.shape == ((size,) + x.shape if b else x.shape)
        assert (bx is x) == (not b)
    want = _sequential(outputs, inputs, data, batched, size)
    got = ta.evaluate(bouts, dict(zip(bins, data)))
    built = ta.build(bouts, bins)(*data)
    for o, bo, w, g, k in zip(outputs, bouts, want, got, built):
        if bo is o:  # depends on no batched input: shared, unbatched
            np.testing.assert_allclose(g, w[0], rtol=1e-12)
            assert not batched[1]
        else:
            assert bo.shape == (size,) + o.shape
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(k, w, rtol=1e-9, atol=1e-12)


def test_gradients_of_the_batched_program(rng):
    """Autodiff treats the batched program as the original: per-element gradients stack."""
    X, W = ta.placeholder((2, 3), "float64", "X"), ta.placeholder((4, 3), "float64", "W")
    L = topi.sum(nn.log_softmax(nn.dense(X, W)))
    (bl,), (bx, bw) = batch_program([L], [X, W], [True, False], 2)
    H = ta.placeholder((2,), "float64", "H")
    gx, gw = ta.JacobianRecursive(bl, [bx, bw], H)
    x, w, h = rng.standard_normal((2, 2, 3)), rng.standard_normal((4, 3)), rng.standard_normal(2)
    got = ta.evaluate([gx, gw], {bx: x, bw: w, H: h})
    h1 = ta.placeholder((), "float64", "h1")
    ex, ew = ta.JacobianRecursive(L, [X, W], h1)
    per = [ta.evaluate([ex, ew], {X: x[k], W: w, h1: np.float64(h[k])}) for k in range(2)]
    np.testing.assert_allclose(got[0], np.stack([p[0] for p in per]), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1], per[0][1] + per[1][1], rtol=1e-10, atol=1e-12)


def test_bad_arguments():
    X = ta.placeholder((2,), "float64", "X")
    Y = topi.exp(X)
    with pytest.raises(ValueError, match="1 inputs but 2 batch flags"):
        batch_program([Y], [X], [True, False], 2)
    with pytest.raises(ValueError, match="positive integer"):
        batch_program([Y], [X], [True], 0)
    with pytest.raises(TypeError, match="not a placeholder"):
        batch_program([Y], [Y], [True], 2)
    with pytest.raises(ValueError, match="not an input"):
        batch_program([Y], [], [], 2)
