"""``checked=True`` over a symbolic batch builds one generic kernel (it compiled once per size): each
block tests every access against its buffer's extent, an argument's rows against the count of rows the
call gives (read when the block runs), and matches the unchecked kernel and NumPy float64 at every size;
a staged program (a mean) too; a bad index of a raising gather names the call's row; bad sizes are clear
errors."""

import numpy as np
import pytest

import tensorad as ta

RNG = np.random.default_rng(5)
SIZES = (1, 7, 64, 300, 1000)



def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.slow
def test_a_checked_dense_softmax_and_its_gradient_compile_once(builds):
    n = ta.size_var("n")
    X, W = ta.placeholder((n, 24), name="X"), ta.placeholder((10, 24), name="W")
    Y = ta.topi.nn.softmax(ta.topi.nn.dense(X, W))
    H = ta.placeholder(Y.shape, name="H")
    dX, dW = ta.JacobianRecursive(ta.topi.sum(Y * H), [X, W])
    forward, backward = ta.build(Y, [X, W], checked=True), ta.build([dX, dW], [X, W, H], checked=True)
    assert forward.generic and backward.generic and all(forward.bounded) and all(backward.bounded)
    compiled = len(builds)
    w = RNG.standard_normal((10, 24)).astype(np.float32)
    for size in SIZES:
        x, h = (RNG.standard_normal((size, k)).astype(np.float32) for k in (24, 10))
        y = _softmax(x.astype(np.float64) @ w.T)
        np.testing.assert_allclose(forward(x, w), y, rtol=1e-5, atol=1e-6)
        g = y * (h - (y * h).sum(-1, keepdims=True))
        got_x, got_w = backward(x, w, h)
        np.testing.assert_allclose(got_x, g @ w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got_w, g.T @ x, rtol=1e-4, atol=1e-4)
    assert len(builds) == compiled
    with pytest.raises(ValueError, match="disagree on size n: X gives 7, H gives 8"):
        backward(np.zeros((7, 24), np.float32), w, np.zeros((8, 10), np.float32))


def test_a_checked_mean_runs_in_stages_once_for_every_size(builds):
    n = ta.size_var("n")
    X = ta.placeholder((n, 6), name="X")
    M = ta.topi.mean(ta.topi.exp(X))
    kernel = ta.build(M, [X], checked=True)
    assert kernel.generic, kernel.why
    compiled = len(builds)
    for size in SIZES:
        x = RNG.standard_normal((size, 6)).astype(np.float32)
        np.testing.assert_allclose(kernel(x), np.exp(x.astype(np.float64)).mean(), rtol=1e-5)
    assert len(builds) == compiled


def test_a_checked_raising_gather_names_the_calls_row():
    n = ta.size_var("n")
    E, Idx = ta.placeholder((5, 3), name="E"), ta.placeholder((n,), "int32", name="I")
    kernel = ta.build(ta.compute((n, 3), lambda i, j: E.take(Idx[i], j, mode="raise"), name="Y"), [E, Idx],
                      checked=True)
    assert kernel.generic
    e = np.arange(15, dtype=np.float32).reshape(5, 3)
    idx = np.zeros(300, np.int32)
    idx[270] = 5
    with pytest.raises(IndexError, match=r"gather index out of range.*at I\[270\]"):
        kernel(e, idx)
    np.testing.assert_array_equal(kernel(e, idx[:270]), e[idx[:270]])
