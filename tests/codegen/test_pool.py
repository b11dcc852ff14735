"""tensorad's parallel runtime (codegen/runtime/pool.py): a region never waits for a worker that has not
started, every thread number runs exactly once, and callers from several Python threads or a
forked child get the same values.

A libgomp region waits at its end for every thread of the team; with one busy process on the
second core of a 2-core machine that wait is a scheduler tick, and a 2-thread kernel of 0.06 ms
took 16 ms per call.  What the tests can check without a clock is the property behind the fix:
with every worker stopped -- the extreme of a worker that never gets a core -- regions still
finish, on the caller alone, with the values of one thread.  Oracles: NumPy formulas."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
from tensorad.codegen.runtime import pool as pool_runtime
from tensorad.codegen.runtime import threads as runtime

import tensorad as ta


def _kernel(threads: int):
    A = ta.placeholder((300, 64), "float64", "A")
    k = ta.reduce_axis((0, 64), "k")
    S = ta.compute((300,), lambda i: ta.sum(A[i, k] * A[i, k], k), name="S")
    E = ta.compute((300, 64), lambda i, j: ta.exp(A[i, j]) + S[i], name="E")
    kern = ta.build([E], [A], num_threads=threads, parallel_min_work=0)
    assert "GOMP_parallel" in kern.llvm_ir
    return kern, lambda a: np.exp(a) + (a * a).sum(1)[:, None]


def _pool():
    assert runtime.parallel_runtime() == runtime.POOL
    return runtime._RUNTIME.pool


def test_regions_finish_on_the_caller_when_no_worker_runs(rng):
    kern, want = _kernel(4)
    pool = _pool()
    pool.stop_workers()
    try:
        assert pool.workers == 0
        assert not [t for t in threading.enumerate() if t.name.startswith("tensorad-worker")]
        a = rng.standard_normal((300, 64))
        for _ in range(20):
            np.testing.assert_allclose(kern(a), want(a), rtol=1e-12)
    finally:
        pool.ensure_workers(3)
    assert pool.workers >= 3
    np.testing.assert_allclose(kern(a), want(a), rtol=1e-12)


def test_many_short_regions_at_more_threads_than_cores(rng):
    kern, want = _kernel(2 * (os.cpu_count() or 1) + 1)
    a = rng.standard_normal((300, 64))
    ref = want(a)
    for _ in range(300):
        np.testing.assert_allclose(kern(a), ref, rtol=1e-12)


def test_callers_in_several_threads_share_the_pool(rng):
    # one caller holds the workers, the others run their regions alone: same values
    kern, want = _kernel(3)
    a = rng.standard_normal((300, 64))
    ref, errors = want(a), []

    def work():
        for _ in range(30):
            if not np.allclose(kern(a), ref, rtol=1e-12):
                errors.append(1)

    ts = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors
    assert _pool().word("lock").value == 0 and _pool().word("waiting").value == 0


def test_fills_by_thread_number_complete_without_workers():
    # a parallel fill divides the buffer by thread number: the caller runs every number
    script = ("import importlib.util\n"
              "from tensorad.codegen.runtime import threads as runtime\n"
              "assert runtime.parallel_runtime() == runtime.POOL\n"
              "runtime._RUNTIME.pool.stop_workers()\n"
              "runtime.ensure_workers = lambda n: None  # no worker ever starts\n"
              "import tensorad.codegen.runtime.kernel as K; K.ensure_workers = runtime.ensure_workers\n"
              f"spec = importlib.util.spec_from_file_location('cases', "
              f"{os.path.join(os.path.dirname(__file__), 'test_parallel_fills.py')!r})\n"
              "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
              "m.run_cases()\n"
              "assert runtime._RUNTIME.pool.workers == 0\n"
              "print('alone ok')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "alone ok" in out.stdout


def test_a_forked_child_runs_regions():
    script = ("import os, numpy as np, tensorad as ta\n"
              "A = ta.placeholder((300, 64), 'float64', 'A')\n"
              "E = ta.compute((300, 64), lambda i, j: ta.exp(A[i, j]) * 3.0, name='E')\n"
              "kern = ta.build([E], [A], num_threads=2, parallel_min_work=0)\n"
              "a = np.random.default_rng(1).standard_normal((300, 64))\n"
              "assert np.allclose(kern(a), np.exp(a) * 3)\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    ok = np.allclose(kern(a), np.exp(a) * 3)\n"
              "    kern.num_threads = 2  # starts the child's own workers\n"
              "    ok = ok and all(np.allclose(kern(a), np.exp(a) * 3) for _ in range(50))\n"
              "    os._exit(0 if ok else 1)\n"
              "_, status = os.waitpid(pid, 0)\n"
              "assert os.WEXITSTATUS(status) == 0, status\n"
              "print('fork ok')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fork ok" in out.stdout


def test_workers_sleep_between_regions_called_now_and_then():
    """An idle worker spun IDLE_SPIN_CYCLES (~0.15 ms) after every region before it slept, so a kernel
    called now and then (a server, a training loop with Python between its kernels) cost each worker that
    much CPU per call on top of its share: on a loaded 2-core machine, CPU taken from other work.  A
    worker's spin now follows the gaps between regions, so its CPU between such calls stays near zero.
    The region does almost no work: what a worker spends is its waiting."""
    A = ta.placeholder((4, 8), "float64", "A")
    kern = ta.build([ta.compute((4, 8), lambda i, j: A[i, j] * 3.0, name="E")], [A], num_threads=2,
                    parallel_min_work=0)
    assert "GOMP_parallel" in kern.llvm_ir
    _pool()
    workers = [t for t in threading.enumerate() if t.name.startswith("tensorad-worker")]
    clocks = [time.pthread_getcpuclockid(t.ident) for t in workers]
    a = np.random.default_rng(3).standard_normal((4, 8))

    def cpu() -> float:
        return sum(time.clock_gettime(c) for c in clocks)

    for _ in range(10):  # (the spins settle)
        kern(a)
        time.sleep(0.02)
    calls, begin = 20, cpu()
    for _ in range(calls):
        np.testing.assert_array_equal(kern(a), a * 3.0)
        time.sleep(0.02)
    spin = pool_runtime.IDLE_SPIN_CYCLES / 3e9  # (seconds at 3 GHz: what each worker spun per call)
    assert cpu() - begin < 0.5 * spin * calls * len(workers), (cpu() - begin, len(workers))


def test_a_forked_child_starts_the_workers_its_parent_had():
    """A child forked after its parent ran parallel kernels (a pre-forking server's workers, a process
    pool) started no pool worker until a kernel's ``num_threads`` was set again, so every region of the
    child ran on one thread, silently.  The child now starts as many workers as its parent had."""
    script = ("import os, threading, numpy as np, tensorad as ta\n"
              "from tensorad.codegen.runtime import threads as runtime\n"
              "A = ta.placeholder((300, 64), 'float64', 'A')\n"
              "E = ta.compute((300, 64), lambda i, j: ta.exp(A[i, j]) * 3.0, name='E')\n"
              "kern = ta.build([E], [A], num_threads=2, parallel_min_work=0)\n"
              "a = np.random.default_rng(1).standard_normal((300, 64))\n"
              "assert np.allclose(kern(a), np.exp(a) * 3)\n"
              "parent = runtime._RUNTIME.pool.workers\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    ok = all(np.allclose(kern(a), np.exp(a) * 3) for _ in range(20))\n"
              "    names = [t.name for t in threading.enumerate() if t.name.startswith('tensorad-worker')]\n"
              "    os._exit(0 if ok and runtime._RUNTIME.pool.workers == parent == len(names) else 1)\n"
              "_, status = os.waitpid(pid, 0)\n"
              "assert parent >= 1 and os.WEXITSTATUS(status) == 0, (parent, status)\n"
              "print('fork ok')\n")
    out = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", script],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fork ok" in out.stdout
