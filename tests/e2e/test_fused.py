"""Whole gradients through the fused paths of code generation, against ta.evaluate.

Forward and backward kernels of the seed workloads (and pooling variants with overlapping and
uneven windows) at odd sizes, 1 and 2 threads: the built kernels match the reference
evaluator, the fused programs keep the work of the unfused ones (nest fusion only regroups
loops), and the programs that should fuse into one nest do.
"""

import numpy as np
import pytest
from tensorad.codegen.program import Nest

import tensorad as ta

F = "float32"
THREADS = [{"num_threads": 1}, {"num_threads": 2, "parallel_min_work": 0}]
nn = ta.topi.nn


def _pool(kind, k, s):
    def make():
        X = ta.placeholder((2, 3, 9, 11), F, "X")
        return nn.pool(X, [k, k], [s, s], [0, 0, 0, 0], kind), [X]
    return make


def _softmax():
    X = ta.placeholder((5, 13), F, "X")
    return nn.softmax(X), [X]


def _log_softmax():
    X = ta.placeholder((3, 17), F, "X")
    return nn.log_softmax(X), [X]


def _homebrew():
    X, W = ta.placeholder((5, 9), F, "X"), ta.placeholder((7, 9), F, "W")
    e = ta.topi.exp(nn.dense(X, W))
    return e / ta.topi.sum(e, axis=-1, keepdims=True), [X, W]


def _dense_bias():
    X, W, B = ta.placeholder((5, 9), F, "X"), ta.placeholder((7, 9), F, "W"), ta.placeholder((7,), F, "B")
    return nn.dense(X, W, B), [X, W, B]


def _flatten():
    X = ta.placeholder((3, 2, 5, 7), F, "X")
    return nn.flatten(X), [X]


WORKLOADS = {
    "max_pool(2,2)": _pool("max", 2, 2),
    "max_pool(3,2)": _pool("max", 3, 2),  # overlapping windows
    "max_pool(2,3)": _pool("max", 2, 3),  # gaps between windows
    "avg_pool(2,2)": _pool("avg", 2, 2),
    "softmax": _softmax,
    "log_softmax": _log_softmax,
    "softmax_homebrew": _homebrew,
    "dense_bias": _dense_bias,
    "flatten": _flatten,
}


def _arrays(tensors, seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in tensors]


def _as_tuple(x):
    return x if isinstance(x, (tuple, list)) else (x,)


@pytest.mark.parametrize("opts", THREADS)
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_forward_and_backward_match_the_evaluator(name, opts):
    Y, inputs = WORKLOADS[name]()
    H = ta.placeholder(Y.shape, F, "H")
    grads = list(ta.gradient(Y, inputs, H))
    arrays = _arrays(inputs + [H], len(name))
    for outs, ins, args in (([Y], inputs, arrays[:-1]), (grads, inputs + [H], arrays)):
        got = _as_tuple(ta.build(outs, ins, **opts)(*args))
        want = _as_tuple(ta.evaluate(outs, dict(zip(ins, args))))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["max_pool(3,2)", "max_pool(2,3)", "softmax", "log_softmax", "flatten"])
def test_fusion_keeps_the_work(name):
    Y, inputs = WORKLOADS[name]()
    H = ta.placeholder(Y.shape, F, "H")
    grads = list(ta.gradient(Y, inputs, H))
    for outs, ins in (([Y], inputs), (grads, inputs + [H])):
        fused, apart = ta.lower(outs, ins), ta.lower(outs, ins, fuse=False)
        # (a max's destinations are the epilogue of its sum when fused: an epilogue's store is
        # not counted, one per window -- codegen/loops/schedule.buffer_form)
        epilogue = Y.size if "epilogue max_pool.dest fused" in fused.text else 0
        assert fused.work == apart.work - epilogue


# (a max pool's gradient is its winner's nest and scatter-adds from the winner, one add per
# window: tests/codegen/test_perf_paths.py, tests/e2e/test_pool_gradients.py)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_the_gradient_is_one_nest(name):
    Y, inputs = WORKLOADS[name]()
    H = ta.placeholder(Y.shape, F, "H")
    lowered = ta.lower(list(ta.gradient(Y, inputs, H)), inputs + [H])
    nests = [s for s in lowered.program.steps if isinstance(s, Nest)]
    assert len(nests) == 1, str(lowered)
