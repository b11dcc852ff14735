"""LLVM 22.1 aborted the process (an assertion in VectorCombine's
``foldShuffleOfShuffles``, on the SLP vector code of a fully unrolled reduction) while compiling
a grouped convolution's ReLU-masked bias gradient: a sum over a 3x6x2 box in float64, on an AVX2
target, 2 threads.  Python cannot catch an abort; optimizing runs in a compile worker process
(codegen/jit/isolate.py), and a job whose worker dies is retried on the next rung of ``jit.ladder``
(here: the same -O3 without SLP).  The build runs in a subprocess, so that a regression fails instead
of killing the test run; the oracle is NumPy written in the test.  The pool's own checks use a
stand-in worker (``tests/stand_in_compile_worker.py``) that aborts when a job says so."""

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
from tensorad.codegen.jit.compile_job import Job, Machine
from tensorad.codegen.target import parse_target, usable_cpus

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


@pytest.mark.slow
def test_an_llvm_abort_is_retried_not_fatal():
    env = dict(os.environ, TENSORAD_NO_DISK_CACHE="1")
    run = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=600,
                         env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr == ""  # the aborted child's assertion text is not the user's business
    x, hh, b, got = (np.array(v) for v in json.loads(run.stdout))
    want = np.where(x + b[None, :, None, None] <= 0.0, 0.0, hh).sum(axis=(0, 2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _job(text: str) -> Job:
    return Job(text, jit.Pipeline(3), Machine("stand-in", "", ""))


def test_a_worker_that_aborts_gives_none_and_is_replaced(monkeypatch, stand_in_workers):
    monkeypatch.setattr(isolate, "START_BYTES", 0)  # (every job worth a worker of its own)
    done = stand_in_workers.run([_job("abort"), _job("pid")])
    assert done[0][0] is None and int(done[1][0]) > 0
    pids = {int(obj) for obj, _ in stand_in_workers.run([_job("pid")] * 4)}
    assert pids == {w.proc.pid for w in stand_in_workers.live}  # (its answers come from live workers)
    assert len(pids) == min(4, max(1, usable_cpus()))
    assert all(w.proc.poll() is None for w in stand_in_workers.live)


def test_a_python_error_of_a_job_is_raised_here():
    with pytest.raises(RuntimeError, match="parsing error"):
        jit.compile_object("this is not LLVM IR")


def test_without_workers_compiles_run_in_the_process(monkeypatch, loop_ir):
    monkeypatch.setenv("TENSORAD_COMPILE_WORKERS", "0")
    workers = isolate.Workers()
    monkeypatch.setattr(isolate, "WORKERS", workers)
    assert workers.run([_job("abort")]) == [(isolate.HERE, 0.0)]
    assert jit.compile_object(loop_ir, 3)[:4] == b"\x7fELF" and not workers.live


@pytest.mark.parametrize("command", [["/nonexistent/python"], [sys.executable, "-c", "raise SystemExit(1)"]])
def test_where_no_worker_can_start_jobs_run_here(command):
    workers = isolate.Workers(command)
    try:
        with pytest.warns(RuntimeWarning, match="compile worker"):
            assert workers.run([_job("pid"), _job("pid")]) == [(isolate.HERE, 0.0)] * 2
        assert workers.broken and not workers.live
    finally:
        workers.close()


def test_workers_and_the_process_compile_the_same_bytes(monkeypatch, loop_ir):
    tgt = parse_target("llvm -mcpu=skylake-avx512")
    here = isolate.Workers()
    monkeypatch.setenv("TENSORAD_COMPILE_WORKERS", "0")
    want = [jit.compile_object(loop_ir, level, tgt) for level in (0, 1, 3)]
    pic = jit.compile_shared_objects([(loop_ir, 3)], tgt)
    monkeypatch.delenv("TENSORAD_COMPILE_WORKERS")
    monkeypatch.setattr(isolate, "WORKERS", here)
    try:
        assert [jit.compile_object(loop_ir, level, tgt) for level in (0, 1, 3)] == want
        assert jit.compile_shared_objects([(loop_ir, 3)], tgt) == pic != want[2:]
        assert here.live  # (compiled there)
    finally:
        here.close()


def test_the_ladder_goes_down_until_a_rung_survives(monkeypatch, stand_in_workers):
    monkeypatch.setattr(isolate, "WORKERS", stand_in_workers)
    rungs = jit.ladder(3)
    assert rungs == [jit.Pipeline(3), jit.Pipeline(3, slp=False), jit.Pipeline(1), jit.Pipeline(0)]
    [(obj, _)] = jit._compile([("abort when slp", rungs)], jit.host())
    assert obj == repr(jit.Pipeline(3, slp=False)).encode()
    assert jit.ladder(1) == [jit.Pipeline(1), jit.Pipeline(0)]
    assert jit.ladder(0) == [jit.Pipeline(0)] and jit.ladder(2, light=True) == [jit.Pipeline(2, light=True)]
