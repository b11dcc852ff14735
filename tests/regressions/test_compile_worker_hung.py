"""A compile process that waits for ever, using no CPU, is never ended by its CPU limit: a build
waited for it without end (a forked compile child blocked on a lock another thread held at the
fork, in a data-parallel training process).  Compile workers are started clean, but a worker whose
job has not answered in ``isolate.HANG_SECONDS`` is still killed, its job counts as died (the ladder's
next rung compiles the module) and a new worker takes the next job.  The pool waits on its workers'
pipes with a selector, so a process with more than a thousand open files (past ``select``'s limit)
waits as well.  The workers are stand-ins (``tests/stand_in_compile_worker.py``)."""

from __future__ import annotations

import os

import pytest
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.jit import isolate
from tensorad.codegen.jit.compile_job import Job, Machine


def _job(text: str) -> Job:
    return Job(text, jit.Pipeline(3), Machine("stand-in", "", ""))


def test_a_hung_worker_is_killed_and_replaced(monkeypatch, stand_in_workers):
    monkeypatch.setattr(isolate, "HANG_SECONDS", 1)
    done = stand_in_workers.run([_job("pid"), _job("sleep"), _job("pid")])
    assert done[1] == (None, 0.0) and int(done[0][0]) > 0 and int(done[2][0]) > 0
    live = {w.proc.pid for w in stand_in_workers.live}
    assert all(w.proc.poll() is None for w in stand_in_workers.live)
    assert {int(obj) for obj, _ in stand_in_workers.run([_job("pid")])} <= live


def test_a_worker_slow_to_start_is_not_taken_for_hung(monkeypatch, stand_in_workers):
    """A job's wait for its answer counted from when it was sent, so a worker slower to start than
    ``HANG_SECONDS`` (a loaded machine) was killed as hung before it had read the job."""
    monkeypatch.setattr(isolate, "HANG_SECONDS", 1)
    monkeypatch.setenv("STAND_IN_START_SECONDS", "1.5")
    [(obj, _)] = stand_in_workers.run([_job("pid")])
    assert obj is not None and int(obj) == stand_in_workers.live[0].proc.pid


def test_the_ladder_goes_past_a_hung_rung(monkeypatch, stand_in_workers):
    monkeypatch.setattr(isolate, "HANG_SECONDS", 1)
    monkeypatch.setattr(isolate, "WORKERS", stand_in_workers)
    [(obj, _)] = jit._compile([("sleep when slp", jit.ladder(3))], jit.host())
    assert obj == repr(jit.Pipeline(3, slp=False)).encode()


def test_a_worker_is_waited_for_whatever_its_descriptor_number(stand_in_workers):
    # a process with over a thousand open files: the pipes' descriptors are past select's limit
    resource = pytest.importorskip("resource", reason="file limits are POSIX (not on Windows)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open at most {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        assert stand_in_workers.run([_job("big")])[0][0] == bytes([7]) * (3 << 20)
        assert min(w.answers for w in stand_in_workers.live) > 1024
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
