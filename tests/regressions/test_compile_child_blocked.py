"""A compile child forked while another thread of the process held a lock (a data-parallel
training process: gloo's threads, PyTorch's) can wait for that lock for ever -- the fork copied
the lock, not the thread that would release it.  Such a child uses no CPU, so its CPU limit
never ends it, and the build waited for it without end.

Now a child that uses no CPU for ``isolate.STALL_SECONDS`` is killed and counts as an aborted
one (the ladder's next rung compiles the module), and a child that has exited is taken even
while its pipe is held open by a process forked meanwhile.  The wait polls the pipe, so a
process with more than a thousand open files (past ``select``'s limit) waits as well."""

from __future__ import annotations

import os
import threading
import time

import pytest
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.jit import isolate


def _blocked_on(lock: threading.Lock) -> bytes:
    lock.acquire()  # (held at the fork: never released in the child)
    return b"unreachable"


def test_a_child_blocked_on_a_lock_held_at_the_fork_is_given_up(monkeypatch):
    monkeypatch.setattr(isolate, "STALL_SECONDS", 1)
    monkeypatch.setattr(isolate, "_LOOK_SECONDS", 0.1)
    held = threading.Lock()
    with held:
        assert isolate.in_child(lambda: _blocked_on(held)) is None
        done = isolate.in_children([lambda: b"a", lambda: _blocked_on(held), lambda: b"c"], jobs=2)
    assert [obj for obj, _ in done] == [b"a", None, b"c"]


def test_the_ladder_goes_past_a_blocked_rung(monkeypatch):
    monkeypatch.setattr(isolate, "STALL_SECONDS", 1)
    monkeypatch.setattr(isolate, "_LOOK_SECONDS", 0.1)
    held = threading.Lock()

    def step(pipeline: jit.Pipeline) -> bytes:
        if pipeline.slp:
            _blocked_on(held)
        return repr(pipeline).encode()

    with held:
        assert jit._contained(jit.ladder(3), step) == repr(jit.Pipeline(3, slp=False)).encode()


def test_an_exited_child_is_taken_while_its_pipe_is_held_open(monkeypatch):
    monkeypatch.setattr(isolate, "_LOOK_SECONDS", 0.1)
    release_read, release_write = os.pipe()  # (the holders exit when this test closes it)

    def step() -> bytes:
        if os.fork() == 0:  # (a process that keeps every descriptor of the child, the pipe too)
            os.close(release_write)
            os.read(release_read, 1)
            os._exit(0)
        return b"object code"

    begin = time.monotonic()
    try:
        assert isolate.in_child(step) == b"object code"
        assert [obj for obj, _ in isolate.in_children([step, step], jobs=2)] == [b"object code"] * 2
        assert time.monotonic() - begin < 20  # (taken, not waited for until the holders exit)
    finally:
        os.close(release_write)
        os.close(release_read)


def test_a_child_is_waited_for_whatever_its_descriptor_number():
    # a process with over a thousand open files: the pipe's descriptor is past select's limit
    resource = pytest.importorskip("resource", reason="file limits are POSIX (not on Windows)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open at most {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        assert isolate.in_child(lambda: b"object code") == b"object code"
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
