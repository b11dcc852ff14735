"""The cyclic garbage collector is paused while the compiler works (issue 8: a long chain's
full collections scanned every object of the process again and again, freeing almost nothing),
and left exactly as the caller had it afterwards.  Counted with ``gc.callbacks``, never timed."""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pytest
from blocks import tanh_chain

import tensorad as ta
from tensorad.ir.collector import paused


@pytest.fixture
def collections():
    """The number of collections started inside tensorad's code (a one-element list; the one
    a caller's first allocation after a call may start is the caller's)."""
    count = [0]
    root = os.path.dirname(ta.__file__)

    def seen(phase, info):
        frame = sys._getframe(1)
        while phase == "start" and frame is not None:
            if frame.f_code.co_filename.startswith(root):
                count[0] += 1
                return
            frame = frame.f_back

    gc.callbacks.append(seen)
    yield count
    gc.callbacks.remove(seen)


def test_no_collection_while_a_chain_is_differentiated_lowered_and_built(collections):
    X, Y = tanh_chain(60)
    L = ta.compute((), lambda: Y[0] + Y[9], name="L")
    assert gc.isenabled()
    collections[0] = 0  # (defining is not paused)
    (g,) = ta.gradient(L, [X])
    ta.lower([g], [X])
    kernel = ta.build([g], [X], cache=False)
    assert collections[0] == 0  # (before: dozens, with the collector's default thresholds)
    assert gc.isenabled()
    x = np.linspace(-1, 1, 16)
    eps = 1e-6  # oracle: central differences of the chain written in NumPy
    def f(v):
        for k in range(60):
            v = np.tanh(v) * 0.9 if k % 2 else 1 / (1 + np.exp(-v)) + v * 0.5
        return v[0] + v[9]
    fd = np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(16)])
    np.testing.assert_allclose(kernel(x), fd, rtol=1e-6, atol=1e-9)


def test_the_collector_is_left_as_the_caller_had_it():
    calls = []

    @paused
    def work(fail: bool):
        calls.append(gc.isenabled())
        if fail:
            raise ValueError("boom")
        return 7

    assert work(False) == 7 and gc.isenabled()
    with pytest.raises(ValueError):
        work(True)
    assert gc.isenabled()  # (restored after an error too)
    gc.disable()
    try:
        assert work(False) == 7 and not gc.isenabled()  # (a caller's choice is kept)
    finally:
        gc.enable()
    assert calls == [False, False, False]
