"""LLVM 22.1's SLP vectorizer never finished on one kernel -- a checked-mode
build (every access bounds-tested, ``checked=True``) of a gather through a ``take(mode="clip")``
of a ``take`` index, for an AVX2 target (``-mcpu=haswell`` or ``-mattr=-avx512f``; the AVX-512
host compiled it in 30 ms).  The build hung forever, and the fuzz runner did not see it: the
loop ran in a compile process, whose CPU a worker's limit did not count.

Now a compile job runs under a CPU-time limit (``isolate.CPU_LIMIT_SECONDS``) and one past it
is treated like an aborted one: the next rung of ``jit.ladder`` (-O3 without SLP) compiles the
module.  The build runs in a subprocess (a regression hangs it, not the test run) with the limit
lowered to 2 CPU-s; the oracle is ``ta.evaluate``, which compiles nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.jit import isolate
from tensorad.codegen.jit.compile_job import Job, Machine

_CHILD = textwrap.dedent("""
    import numpy as np
    import tensorad as ta
    from tensorad.codegen.jit import isolate

    isolate.CPU_LIMIT_SECONDS = 2
    g = ta.placeholder((1, 17), "int32", name="g")
    r0 = ta.reduce_axis((1, 3), name="r0")
    t0 = ta.compute((5, 2), lambda i0, i1: ta.sum(ta.cast("float32", g[0, (i0 * 2 + r0) % 17]),
                                                  axis=r0, where=r0 != 2), name="t0")
    t2 = ta.compute((2, 5, 16), lambda i0, i1, i2: t0.take(4 - i2 % 5, g[0, i1] * 2 + 1, mode="clip"),
                    name="t2")
    f = ta.build(t2, [g], checked=True, target="llvm -mcpu=haswell")
    x = np.random.default_rng(811880).integers(-3, 4, (1, 17)).astype(np.int32)
    np.testing.assert_array_equal(f(x), ta.evaluate(t2, {g: x}))
    print("ok")
""")


@pytest.mark.slow
def test_a_looping_llvm_pass_falls_to_the_next_rung():
    env = dict(os.environ, TENSORAD_NO_DISK_CACHE="1")
    run = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300,
                         env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "ok"


def _job(text: str) -> Job:
    return Job(text, jit.Pipeline(3), Machine("stand-in", "", ""))


@pytest.mark.slow
def test_a_job_past_its_cpu_limit_is_stopped(monkeypatch, stand_in_workers):
    monkeypatch.setattr(isolate, "WORKERS", stand_in_workers)
    begin = isolate.cpu_seconds()
    assert stand_in_workers.run([_job("spin")], cpu_limit=1) == [(None, 0.0)]
    assert isolate.cpu_seconds() - begin >= 0.9  # (it computed until the limit, then stopped)
    assert int(stand_in_workers.run([_job("pid")], cpu_limit=1)[0][0]) > 0


@pytest.mark.slow
def test_the_ladder_goes_past_a_rung_that_loops(monkeypatch, stand_in_workers):
    monkeypatch.setattr(isolate, "CPU_LIMIT_SECONDS", 1)
    monkeypatch.setattr(isolate, "WORKERS", stand_in_workers)
    [(obj, _)] = jit._compile([("spin when slp", jit.ladder(3))], jit.host())
    assert obj == repr(jit.Pipeline(3, slp=False)).encode()


def test_a_worker_dies_with_its_parent(tmp_path, running):
    # the compile worker of a killed process does not go on computing as an orphan
    pid_file = tmp_path / "worker.pid"
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "stand_in_compile_worker.py")
    code = textwrap.dedent(f"""
        import sys, threading, time
        from tensorad.codegen.jit import isolate
        from tensorad.codegen.jit.compile_job import Job, Machine, Pipeline

        workers = isolate.Workers([sys.executable, {script!r}, {os.path.dirname(isolate.__file__)!r}])
        job = Job("spin", Pipeline(3), Machine("stand-in", "", ""))
        threading.Thread(target=workers.run, args=([job], 60), daemon=True).start()
        while not workers.live:
            time.sleep(0.01)
        open({str(pid_file)!r}, "w").write(str(workers.live[0].proc.pid))
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker = int(pid_file.read_text())
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30
    while running(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(worker)
