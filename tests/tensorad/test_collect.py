"""Fewer garbage collections during a differentiation (tensorad/ir/collect.py): counted, not
timed, and the process's threshold put back after nested, overlapping and failing calls."""

from __future__ import annotations

import gc
import threading

import pytest

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
