"""A first build compiles the library pieces its kernel links beside the kernel, side by side in
compile workers (codegen/jit/isolate.Workers, jit.compile_objects, gemmlib.LinkPlan).

What is checked here is the mechanism's contract -- every result in order, a dead worker's module
compiled again down its ladder, a Python error raised where it belongs, workers reaped at exit and
never shared with a forked process, the pieces stored and read back by a new process, the product
right (NumPy) -- never its speed: the wall time is measured by ``python -m benchmarks.compile_time``
and ``docs/performance_history.md``.  Pool checks use stand-in workers
(``tests/stand_in_compile_worker.py``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.jit import isolate
from tensorad.codegen.jit.compile_job import Job, Machine
from tensorad.codegen.target import captured_stderr


def _job(text: str) -> Job:
    return Job(text, jit.Pipeline(3), Machine("stand-in", "", ""))


@pytest.mark.parametrize("cpus", [1, 2, 5])
def test_every_result_in_order_a_dead_worker_none(monkeypatch, stand_in_workers, cpus):
    monkeypatch.setattr(isolate, "usable_cpus", lambda: cpus)
    texts = ["pid", "say", "big", "abort", "say", "pid", "big"]
    done = stand_in_workers.run([_job(t) for t in texts])
    assert done[3] == (None, 0.0)
    assert [done[i][0] for i in (1, 2, 4)] == [b"said", bytes([7]) * (3 << 20), b"said"]
    assert len(stand_in_workers.live) <= cpus and all(cpu >= 0.0 for _, cpu in done)


def test_small_jobs_wait_for_the_live_worker_large_ones_start_another(monkeypatch, stand_in_workers):
    """Every compile started a worker per CPU, each paying Python's and llvmlite's start (~0.1 s of
    CPU), though a layer's few small modules compile in less: a cold layer spent a third of its
    compile starting a second worker.  Another worker starts only for START_BYTES of IR waiting."""
    monkeypatch.setattr(isolate, "usable_cpus", lambda: 2)
    monkeypatch.setattr(isolate, "START_BYTES", 10)
    assert len({obj for obj, _ in stand_in_workers.run([_job("pid")] * 4)}) == 1  # (4 x 3 bytes)
    assert len(stand_in_workers.live) == 1
    assert len({obj for obj, _ in stand_in_workers.run([_job("pid")] * 8)}) == 2  # (8 x 3 bytes)
    assert len(stand_in_workers.live) == 2


def test_a_prestarted_worker_takes_the_first_job(stand_in_workers):
    """A build starts a worker before lowering (its start beside lowering, not before the first
    job): the next job runs on it, and a second prestart starts none."""
    stand_in_workers.prestart()
    stand_in_workers.prestart()
    assert len(stand_in_workers.live) == 1
    pid = stand_in_workers.live[0].proc.pid
    assert stand_in_workers.run([_job("pid")])[0][0] == str(pid).encode()


def test_a_python_error_of_a_module_is_raised_here(loop_ir):
    with pytest.raises(RuntimeError, match="parsing error"):
        jit.compile_objects([(lambda: loop_ir, 3, False), (lambda: "not LLVM IR", 3, False)])


def test_what_a_worker_writes_on_stderr_comes_back(stand_in_workers):
    with captured_stderr() as err:
        assert stand_in_workers.run([_job("say")])[0][0] == b"said"
    assert err() == "remark: a word from the worker\n"


_WORKER_PIDS = r"""
import numpy as np
import tensorad as ta
from tensorad.codegen.jit import isolate
X = ta.placeholder((8, 11), "float32", name="X")
kernel = ta.build(ta.compute((8, 11), lambda a, b: X[a, b] * 2.0, name="Y"), [X])
assert (kernel(np.ones((8, 11), np.float32)) == 2).all()
print(" ".join(str(w.proc.pid) for w in isolate.WORKERS.live), flush=True)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the process table in /proc")
def test_workers_are_reaped_at_exit(running):
    env = {**os.environ, "TENSORAD_NO_DISK_CACHE": "1"}
    out = subprocess.run([sys.executable, "-c", _WORKER_PIDS], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stderr == "", out.stderr[-3000:]
    pids = [int(p) for p in out.stdout.split()]
    assert pids and not any(running(p) for p in pids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_process_starts_its_own_workers(loop_ir):
    jit.compile_object(loop_ir, 3)
    mine = {w.proc.pid for w in isolate.WORKERS.live}
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # (the child: reports what it found and compiled, then leaves at once)
        status = 1
        try:
            inherited = [w.proc.pid for w in isolate.WORKERS.live]
            obj = jit.compile_object(loop_ir, 3)
            os.write(write_end, json.dumps([inherited, [w.proc.pid for w in isolate.WORKERS.live],
                                            obj[:4] == b"\x7fELF"]).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as said:
        inherited, started, elf = json.loads(said.read())
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert inherited == [] and elf and started and not set(started) & mine
    assert {w.proc.pid for w in isolate.WORKERS.live} == mine and jit.compile_object(loop_ir, 3)
    assert {w.proc.pid for w in isolate.WORKERS.live} == mine  # (the parent's still serve it)



def test_a_worker_that_never_reads_its_job_is_a_hang(monkeypatch):
    """A worker hung before reading its job (stuck starting, stopped) left the job larger than the pipe
    unsent: the parent waited in the write for ever, where the hang limit ends a worker that does not
    answer.  Sending counts against the limit: the worker is ended and its job given back as dead."""
    monkeypatch.setattr(isolate, "HANG_SECONDS", 1)
    monkeypatch.setattr(isolate, "START_SECONDS", 1)  # (it never starts: the start's limit applies)
    workers = isolate.Workers([sys.executable, "-c", "import time; time.sleep(120)"])
    done = []
    runner = threading.Thread(target=lambda: done.append(workers.run([_job("x" * (4 << 20))])), daemon=True)
    runner.start()
    runner.join(timeout=100)
    workers.close()
    assert done == [[(None, 0.0)]] and not workers.live



def test_a_worker_killed_before_it_is_ready_is_replaced_after_a_back_off(monkeypatch, stand_in_workers):
    """A compile worker killed before it was ready (by a user, by the kernel's OOM killer) made every
    later compile of the process run in the process, for the life of a server or a notebook.  Jobs now
    run here for a back-off, then the next run starts a new worker; a warning says so once."""
    monkeypatch.setattr(isolate, "RETRY_SECONDS", 0.3, raising=False)
    monkeypatch.setenv("STAND_IN_START_SECONDS", "60")  # (it is killed long before it is ready)
    stand_in_workers.prestart()
    stand_in_workers.live[0].proc.kill()
    stand_in_workers.live[0].proc.wait()
    monkeypatch.delenv("STAND_IN_START_SECONDS")
    with pytest.warns(RuntimeWarning, match="ended before it was ready") as said:
        assert stand_in_workers.run([_job("pid")]) == [(isolate.HERE, 0.0)]
        assert stand_in_workers.run([_job("pid")]) == [(isolate.HERE, 0.0)]  # (within the back-off)
        assert not stand_in_workers.live
        time.sleep(0.6)
        [(pid, _)] = stand_in_workers.run([_job("pid")])
    assert len(said) == 1
    assert int(pid) == stand_in_workers.live[0].proc.pid and stand_in_workers.failures == 0


def test_workers_that_never_start_are_tried_a_bounded_number_of_times(monkeypatch, tmp_path):
    """Restarts after failed starts are bounded: after MAX_FAILURES in a row, jobs run here for good."""
    monkeypatch.setattr(isolate, "RETRY_SECONDS", 0.0)
    monkeypatch.setattr(isolate, "MAX_FAILURES", 3)
    starts = tmp_path / "starts"
    workers = isolate.Workers([sys.executable, "-c", f"open({str(starts)!r}, 'a').write('x')"])
    try:
        with pytest.warns(RuntimeWarning, match="compile worker") as said:
            for _ in range(6):
                assert workers.run([_job("pid")]) == [(isolate.HERE, 0.0)]
    finally:
        workers.close()
    assert starts.read_text() == "xxx" and workers.broken and len(said) == 1


class _Interrupt(BaseException):
    """What a signal handler raises here, as Ctrl-C raises ``KeyboardInterrupt``."""


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no interval timer on this platform")
def test_an_interrupt_while_a_job_is_sent_leaves_no_worker_with_half_a_job(monkeypatch, stand_in_workers):
    """Ctrl-C while a job larger than a pipe was being sent to a worker left that worker live, holding half
    a message: the next job sent to it completed the old message's bytes, and that compile waited for an
    answer until the hang limit (300 s), then went down its ladder to a weaker pipeline.  A worker
    whose job is not wholly sent and answered when the run is interrupted is now ended with it."""
    monkeypatch.setattr(isolate, "HANG_SECONDS", 10)
    monkeypatch.setenv("STAND_IN_START_SECONDS", "2")  # (it reads nothing for 2 s: the send waits)

    def interrupt(*_):
        raise _Interrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(_Interrupt):
            stand_in_workers.run([_job("big" + " " * (8 << 20))])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    monkeypatch.delenv("STAND_IN_START_SECONDS")
    [(pid, _)] = stand_in_workers.run([_job("pid")])
    assert pid is not None and int(pid) == stand_in_workers.live[0].proc.pid


def test_an_idle_worker_leaves_and_the_next_run_starts_another(monkeypatch, stand_in_workers):
    """Idle compile workers (about 100 MB each, one per CPU) stayed for the life of the process: a server
    or a notebook that built once kept them all.  A worker now leaves after IDLE_SECONDS without a job."""
    monkeypatch.setattr(isolate, "IDLE_SECONDS", 0.5, raising=False)
    [(first, _)] = stand_in_workers.run([_job("pid")])
    stand_in_workers.live[0].proc.wait(timeout=20)
    stand_in_workers.prestart()  # (it finds the worker gone and starts another)
    [(second, _)] = stand_in_workers.run([_job("pid")])
    assert first != second and int(second) == stand_in_workers.live[0].proc.pid
    assert stand_in_workers.failures == 0


def test_a_job_sent_as_its_worker_leaves_is_sent_to_another(monkeypatch, stand_in_workers):
    """A job sent while its worker leaves idle is answered ``retired``, not lost: it goes to a new worker
    (here the worker leaves right after its first answer and lingers, so the next job is sent to it)."""
    monkeypatch.setattr(isolate, "IDLE_SECONDS", 0.0)
    monkeypatch.setenv("STAND_IN_LINGER_SECONDS", "30")
    [(first, _)] = stand_in_workers.run([_job("pid")])
    time.sleep(0.5)  # (it has said it retires: the answer waits in its pipe)
    monkeypatch.delenv("STAND_IN_LINGER_SECONDS")
    [(second, _)] = stand_in_workers.run([_job("pid")])
    assert second not in (None, isolate.HERE) and int(second) != int(first)
    assert stand_in_workers.failures == 0

def test_a_module_whose_worker_dies_goes_down_its_ladder(monkeypatch, stand_in_workers):
    monkeypatch.setattr(isolate, "WORKERS", stand_in_workers)
    done = jit.compile_objects([(lambda: "abort when O3", 3, False), (lambda: "abort when O3", 0, False)])
    assert [obj for obj, _ in done] == [repr(jit.Pipeline(1)).encode(), repr(jit.Pipeline(0)).encode()]


_FIRST_BUILD = r"""
import json, sys
import numpy as np
import tensorad as ta
A = ta.placeholder((70, 90), "float32", "A")
Bm = ta.placeholder((90, 50), "float32", "B")
k = ta.reduce_axis((0, 90), "k")
C = ta.compute((70, 50), lambda i, j: ta.sum(A[i, k] * Bm[k, j], k), name="C")
f = ta.build([C], [A, Bm], microkernel=True)
rng = np.random.default_rng(1)
a, b = rng.standard_normal((70, 90)).astype("float32"), rng.standard_normal((90, 50)).astype("float32")
err = float(np.abs(f(a, b) - a.astype("float64") @ b.astype("float64")).max())
print(json.dumps({"library": f.compiled.library, "err": err}))
"""


def test_a_first_build_compiles_the_pieces_a_new_process_reads_them(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TENSORAD_NO_DISK_CACHE"}
    env["TENSORAD_CACHE_DIR"] = str(tmp_path)
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _FIRST_BUILD], env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0 and out.stderr == "", out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["library"] and set(first["library"].values()) == {"compiled"}
    assert any(name.endswith("_core") for name in first["library"])  # (a core and its packers)
    assert second["library"] == {name: "disk" for name in first["library"]}
    assert first["err"] < 1e-3 and second["err"] < 1e-3


_FORK_MID_BUILD = r"""
import importlib, os, signal, threading, time
import numpy as np
import tensorad as ta

building = importlib.import_module("tensorad.codegen.build")

compiling, compile_ = threading.Event(), building._compile
def held(*args, **kwargs):  # (a slow compile: the fork comes while it holds the build's locks)
    compiling.set()
    time.sleep(1.0)
    return compile_(*args, **kwargs)
building._compile = held

def scaled(c):
    X = ta.placeholder((37,), "float64", "X")
    return ta.build(ta.compute((37,), lambda i: X[i] * c, name="Y"), [X])

thread = threading.Thread(target=scaled, args=(2.0,))
thread.start()
compiling.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(120)  # (a child waiting for a lock no thread of it holds is ended here)
    ok = bool(np.all(scaled(3.0)(np.ones(37)) == 3.0))
    os._exit(0 if ok else 1)
thread.join()
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_process_forked_while_another_thread_builds_can_build():
    """A process forked while another of its threads was building copied the build's locks held, by a
    thread the child does not have: the child's first build waited for ever.  A fork now waits for the
    locks, and the child builds."""
    env = {**os.environ, "TENSORAD_NO_DISK_CACHE": "1"}
    out = subprocess.run([sys.executable, "-c", _FORK_MID_BUILD], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "0", out.stdout  # (-14: the child's alarm ended its wait)
