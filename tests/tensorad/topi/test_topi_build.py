"""topi ops through the whole pipeline: ta.build agrees with ta.evaluate, forward and gradient,
and the gradients of the seed's troublesome ops (flatten, pooling, softmax) do not blow up work.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

topi, nn = ta.topi, ta.topi.nn


def _case(name):
    X4 = ta.placeholder((2, 3, 7, 6), name="X")
    W4 = ta.placeholder((4, 3, 3, 3), name="W")
    X2 = ta.placeholder((3, 5), name="X")
    W2 = ta.placeholder((4, 5), name="W")
    B = ta.placeholder((4,), name="B")
    return {
        "dense": lambda: (nn.dense(X2, W2, B), [X2, W2, B]),
        "conv2d": lambda: (nn.conv2d(X4, W4, 2, 1), [X4, W4]),
        "conv2d_dilated": lambda: (nn.conv2d(X4, W4, 1, [1, 0, 2, 1], 2), [X4, W4]),
        "avg_pool": lambda: (nn.pool(X4, 3, 2, [1, 1, 0, 1], "avg", count_include_pad=False), [X4]),
        "max_pool": lambda: (nn.pool(X4, 3, 2, [1, 1, 0, 1], "max"), [X4]),
        "softmax": lambda: (nn.softmax(X2), [X2]),
        "log_softmax": lambda: (nn.log_softmax(X2, 0), [X2]),
        "flatten": lambda: (nn.flatten(X4), [X4]),
        "concatenate": lambda: (topi.concatenate([X2, topi.exp(X2)], 1), [X2]),
        "reshape_transpose": lambda: (topi.transpose(topi.reshape(X4, (6, 42)), (1, 0)), [X4]),
        "broadcast_reduce": lambda: (X2 / topi.max(X2, 1, keepdims=True) - topi.sum(X2, 0), [X2]),
        "matmul": lambda: (topi.matmul(X2, topi.transpose(W2)), [X2, W2]),
    }[name]()


@pytest.mark.parametrize("name", ["dense", "conv2d", "conv2d_dilated", "avg_pool", "max_pool",
                                  "softmax", "log_softmax", "flatten", "concatenate",
                                  "reshape_transpose", "broadcast_reduce", "matmul"])
def test_build_matches_evaluate_forward_and_backward(name, rng):
    Y, inputs = _case(name)
    H = ta.placeholder(Y.shape, name="H")
    grads = ta.gradient(Y, inputs, H)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in inputs]
    h = rng.standard_normal(Y.shape).astype(np.float32)
    feed = dict(zip(inputs, arrays)) | {H: h}
    np.testing.assert_allclose(ta.build([Y], inputs)(*arrays), ta.evaluate(Y, feed), rtol=1e-4, atol=1e-5)
    got = ta.build(grads, inputs + [H])(*arrays, h)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, ta.evaluate(grads, feed)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name, ratio", [("flatten", 1), ("reshape_transpose", 2), ("max_pool", 4),
                                         ("avg_pool", 2), ("softmax", 3), ("conv2d", 3)])
def test_gradient_work_stays_near_forward_work(name, ratio):
    """The seed's gradients of flatten and max pool did 100x the forward work; ours may not.  A max
    pool's: the maximum, its tie count, the winner's scatter and the tie routing (when every point
    ties), each about a forward."""
    Y, inputs = _case(name)
    H = ta.placeholder(Y.shape, name="H")
    grads = ta.gradient(Y, inputs, H)
    forward = ta.lower([Y], inputs).work
    backward = ta.lower(grads, inputs + [H]).work
    assert backward <= ratio * forward, f"{name}: backward work {backward}, forward {forward}"
