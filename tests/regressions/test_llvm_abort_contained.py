"""LLVM 22.1 aborted the process (an assertion in VectorCombine's
``foldShuffleOfShuffles``, on the SLP vector code of a fully unrolled reduction) while compiling
a grouped convolution's ReLU-masked bias gradient: a sum over a 3x6x2 box in float64, on an AVX2
target, 2 threads.  Python cannot catch an abort; optimizing now runs in a forked child
(codegen/jit/isolate.py), and a child that dies is retried on the next rung of ``jit.ladder`` (here:
the same -O3 without SLP).  The build runs in a subprocess, so that a regression fails instead of
killing the test run; the oracle is NumPy written in the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.jit import isolate

_CHILD = textwrap.dedent("""
    import json
    import numpy as np
    import tensorad as ta

    X = ta.placeholder((3, 8, 6, 2), "float64", name="X")
    H = ta.placeholder((3, 8, 6, 2), "float64", name="H")
    B = ta.placeholder((8,), "float64", name="B")
    n, h, w = ta.reduce_axis((0, 3), "n"), ta.reduce_axis((0, 6), "h"), ta.reduce_axis((0, 2), "w")
    G = ta.compute((8,), lambda c: ta.sum(ta.select(X[n, c, h, w] + B[c] <= 0.0, 0.0, H[n, c, h, w]),
                                          axis=[n, h, w]), name="G")
    f = ta.build([G], [X, H, B], fastmath=False, target="llvm -mcpu=haswell", num_threads=2,
                 parallel_min_work=0)
    rng = np.random.default_rng(4022)
    x, hh, b = rng.standard_normal((3, 8, 6, 2)), rng.standard_normal((3, 8, 6, 2)), rng.standard_normal(8)
    print(json.dumps([x.tolist(), hh.tolist(), b.tolist(), f(x, hh, b).tolist()]))
""")


def test_an_llvm_abort_is_retried_not_fatal():
    env = dict(os.environ, TENSORAD_NO_DISK_CACHE="1")
    run = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=600,
                         env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr == ""  # the aborted child's assertion text is not the user's business
    x, hh, b, got = (np.array(v) for v in json.loads(run.stdout))
    want = np.where(x + b[None, :, None, None] <= 0.0, 0.0, hh).sum(axis=(0, 2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_in_child_returns_bytes_none_on_a_signal_and_raises_python_errors():
    assert isolate.in_child(lambda: b"object code") == b"object code"
    assert isolate.in_child(os.abort) is None

    def bad() -> bytes:
        raise ValueError("bad IR")

    with pytest.raises(ValueError, match="bad IR"):
        isolate.in_child(bad)


def test_a_failed_fork_compiles_in_process(monkeypatch):
    def no_fork() -> int:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(os, "fork", no_fork)
    assert isolate.in_child(lambda: b"object code") == b"object code"


def test_the_ladder_goes_down_until_a_rung_survives():
    tried = []

    def step(pipeline: jit.Pipeline) -> bytes:
        tried.append(pipeline)
        if pipeline.slp and pipeline.level == 3:
            os.abort()  # (in the child)
        return repr(pipeline).encode()

    rungs = jit.ladder(3)
    assert rungs == [jit.Pipeline(3), jit.Pipeline(3, slp=False), jit.Pipeline(1), jit.Pipeline(0)]
    assert jit._contained(rungs, step) == repr(jit.Pipeline(3, slp=False)).encode()
    assert tried == []  # every rung but the last ran in a child
    assert jit.ladder(1) == [jit.Pipeline(1), jit.Pipeline(0)]  # (-O1 in a child: its memory)
    assert jit.ladder(0) == [jit.Pipeline(0)] and jit.ladder(2, light=True) == [jit.Pipeline(2, light=True)]
