"""Fewer garbage collections during a differentiation (tensorad/ir/collect.py): counted, not
timed, and the process's threshold put back after nested, overlapping and failing calls."""

from __future__ import annotations

import gc
import os
import sys
import threading

import numpy as np
import pytest
from blocks import tanh_chain

import tensorad as ta
from tensorad.ir import collect


def _layer_norm_softmax():
    x = ta.placeholder((16, 64), "float32", "X")
    g = ta.placeholder((64,), "float32", "g")
    b = ta.placeholder((64,), "float32", "b")
    y = ta.topi.nn.softmax(ta.topi.nn.layer_norm(x, g, b))
    return y, [x, g, b]


def _collections(fn) -> int:
    """How many collections (any generation) ``fn()`` runs."""
    count = [0]

    def cb(phase, info):
        if phase == "start":
            count[0] += 1

    gc.collect()
    gc.callbacks.append(cb)
    try:
        fn()
    finally:
        gc.callbacks.remove(cb)
    return count[0]


@pytest.fixture
def default_threshold():
    old = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # (CPython's default: the test counts against it)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def test_a_gradient_runs_few_collections(default_threshold):
    y, inputs = _layer_norm_softmax()
    runs = _collections(lambda: ta.JacobianRecursive(y, inputs))
    # the same call with the young threshold kept at 700 runs 9
    assert runs <= 3
    assert gc.get_threshold() == (700, 10, 10)


def test_threshold_raised_inside_and_put_back(default_threshold):
    seen = []
    with collect.fewer_collections():
        seen.append(gc.get_threshold()[0])
        with collect.fewer_collections():  # nested: one raised threshold
            seen.append(gc.get_threshold()[0])
        seen.append(gc.get_threshold()[0])
    assert seen == [collect.YOUNG] * 3
    assert gc.get_threshold() == (700, 10, 10)
    with pytest.raises(ValueError), collect.fewer_collections():
        raise ValueError
    assert gc.get_threshold() == (700, 10, 10)


def test_user_settings_are_kept(default_threshold):
    with collect.fewer_collections():
        gc.set_threshold(5000, 10, 10)  # the user's own, set during a call: kept
    assert gc.get_threshold() == (5000, 10, 10)
    gc.set_threshold(0)  # collection off: left alone
    with collect.fewer_collections():
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold()[0] == 0


def test_overlapping_threads_put_it_back(default_threshold):
    inside, leave = threading.Barrier(2), threading.Event()

    def first():
        with collect.fewer_collections():
            inside.wait()
            leave.wait()

    t = threading.Thread(target=first)
    t.start()
    with collect.fewer_collections():
        inside.wait()
        leave.set()
        t.join()  # the first call left while this one is still inside: still raised
        assert gc.get_threshold()[0] == collect.YOUNG
    assert gc.get_threshold() == (700, 10, 10)


@pytest.fixture
def seen():
    """The collections of each generation started inside tensorad's code (the one a caller's
    first allocation after a call may start is the caller's)."""
    count = [0, 0, 0]
    root = os.path.dirname(ta.__file__)

    def seen(phase, info):
        frame = sys._getframe(1)
        while phase == "start" and frame is not None:
            if frame.f_code.co_filename.startswith(root):
                count[info["generation"]] += 1
                return
            frame = frame.f_back

    gc.callbacks.append(seen)
    yield count
    gc.callbacks.remove(seen)


def test_no_full_collection_while_a_chain_is_differentiated_lowered_and_built(seen):
    X, Y = tanh_chain(60)
    L = ta.compute((), lambda: Y[0] + Y[9], name="L")
    assert gc.isenabled()
    gc.collect()
    seen[:] = [0, 0, 0]  # (defining runs with the default thresholds)
    (g,) = ta.gradient(L, [X])
    ta.lower([g], [X])
    kernel = ta.build([g], [X], cache=False)
    assert seen[2] == 0 and sum(seen) <= 10, seen  # (default thresholds: 30)
    assert gc.isenabled() and gc.get_threshold()[0] < 20_000
    x = np.linspace(-1, 1, 16)
    eps = 1e-6  # oracle: central differences of the chain written in NumPy
    def f(v):
        for k in range(60):
            v = np.tanh(v) * 0.9 if k % 2 else 1 / (1 + np.exp(-v)) + v * 0.5
        return v[0] + v[9]
    fd = np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(16)])
    np.testing.assert_allclose(kernel(x), fd, rtol=1e-6, atol=1e-9)
