"""LLVM's internal failures, contained: a compile step that may abort the process runs in a fork.

:func:`in_child` runs a step in a forked child and takes its bytes back through a pipe.  A child killed by
a signal gives ``None``, and the caller retries with a safer pipeline (:func:`.jit.engine.compile_object`).
A Python exception in the child is raised by running the step again here.  Without ``os.fork``, or when a
fork fails, the step runs here.

A child runs under a CPU-time limit (:data:`CPU_LIMIT_SECONDS`) and dies with its parent.  A lock another
thread held at the fork stays held in the child, which then waits using no CPU: a child whose CPU time has
not moved for :data:`STALL_SECONDS`, looked at every :data:`_LOOK_SECONDS`, is killed as aborted.  The
child leaves by ``os._exit``; its stderr goes to a file the parent copies to its own when it succeeded.

While another Python thread runs (but a :class:`ForkSafeThread`), the step runs here, uncontained: a fork
runs the fork handlers of the libraries that thread may be inside, and OpenBLAS's stops its thread pool
under a matrix product that thread then waits on for ever."""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import math
import os
import select
import selectors
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence

try:
    import resource
except ImportError:  # (Windows: no fork either, every step runs in the process)
    resource = None

_RAISED = 3  # the child's exit status when the step raised a Python exception

# the CPU seconds one compile child may use: far past any module's optimization time
CPU_LIMIT_SECONDS = 20

#: the wall seconds a child may use no CPU at all before it is taken for blocked: a compile
#: computes from its first instant to its last, on a loaded machine too
STALL_SECONDS = 30

#: how long the parent waits for a child's bytes before it looks at the child
_LOOK_SECONDS = 1.0


class ForkSafeThread(threading.Thread):
    """A thread that holds no library's lock across a fork (it runs only tensorad's compiled code):
    :func:`start` forks beside it."""


def _others_running() -> bool:
    """Whether a Python thread runs besides this one and the :class:`ForkSafeThread` s."""
    me = threading.current_thread()
    return any(t is not me and not isinstance(t, ForkSafeThread) for t in threading.enumerate())


def in_child(step: Callable[[], bytes], cpu_limit: float | None = None) -> bytes | None:
    """``step()``'s bytes, computed in a forked child; ``None`` when the child died of a signal (an abort,
    or past ``cpu_limit``, default :data:`CPU_LIMIT_SECONDS`); ``step``'s Python error is raised here."""
    return start(step, cpu_limit).result()


def in_children(steps: Sequence[Callable[[], bytes]], jobs: int) -> list[tuple[bytes | None, float]]:
    """Every step's :func:`in_child` result and CPU seconds, the steps run in forked children at most
    ``jobs`` at a time, the next started as soon as one finishes."""
    results: list[tuple[bytes | None, float]] = [(None, 0.0)] * len(steps)
    queue = list(enumerate(steps))[::-1]
    running: dict[int, tuple[int, Child]] = {}
    with selectors.DefaultSelector() as sel, _reaped(running):
        while queue or running:
            while queue and len(running) < max(1, jobs):
                i, step = queue.pop()
                child = start(step)
                if child.pid is None:
                    results[i] = child.result(), child.cpu_seconds
                else:
                    running[child.read_end] = (i, child)
                    sel.register(child.read_end, selectors.EVENT_READ)
            ready = sel.select(_LOOK_SECONDS) if running else []
            over = [key.fd for key, _ in ready if running[key.fd][1].read_some()]
            if not ready:
                over = [fd for fd, (_, child) in running.items() if child.over()]
            for fd in over:
                i, child = running.pop(fd)
                sel.unregister(fd)
                results[i] = child.result(), child.cpu_seconds
    return results


@contextlib.contextmanager
def _reaped(running: dict):
    """On the way out by an exception (an interrupt, a step's own error), the children still
    running are killed and reaped: none is left blocked on a pipe nobody reads."""
    try:
        yield
    except BaseException:
        for _, child in running.values():
            child.kill()
        raise


class Child:
    """One step in a forked child (``pid``), its bytes read from ``read_end``; a step that ran
    here instead (no fork) has ``pid`` ``None`` and its bytes already."""

    def __init__(self, step: Callable[[], bytes], pid: int | None = None, read_end: int = -1,
                 errors=None, data: bytes = b"", cpu_seconds: float = 0.0):
        self.step, self.pid, self.read_end, self.errors = step, pid, read_end, errors
        self._chunks = [data]
        self.cpu_seconds = cpu_seconds  # (the child's, once reaped)
        self.status: int | None = None  # (its wait status, once reaped)
        self._ticks, self._since = -1, time.monotonic()

    def read_some(self) -> bool:
        """Read what the child has written so far (the pipe is readable); ``True`` at its end."""
        chunk = os.read(self.read_end, 1 << 20)
        self._chunks.append(chunk)
        return not chunk

    def over(self) -> bool:
        """Whether a child that has written nothing for a while is done: it has exited (what it
        wrote is read here), or it has used no CPU for :data:`STALL_SECONDS` and is killed."""
        if not self._reap(os.WNOHANG):
            ticks, now = _cpu_ticks(self.pid), time.monotonic()
            if ticks != self._ticks:
                self._ticks, self._since = ticks, now
            if ticks is None or now - self._since < STALL_SECONDS:
                return False
            os.kill(self.pid, signal.SIGKILL)
            self._reap(0)
        os.set_blocking(self.read_end, False)
        with contextlib.suppress(BlockingIOError):
            while not self.read_some():
                pass
        return True

    def _reap(self, flags: int) -> bool:
        """Wait for the child (``os.WNOHANG``: only look); ``True`` once it is reaped."""
        if self.status is None:
            pid, status, usage = os.wait4(self.pid, flags)
            if pid == 0:
                return False
            self.status, self.cpu_seconds = status, usage.ru_utime + usage.ru_stime
        return True

    def kill(self) -> None:
        """Stop the child and reap it (its result is not wanted)."""
        if self.status is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            self._reap(0)
        os.close(self.read_end)
        self.errors.close()

    def result(self) -> bytes | None:
        """The step's bytes: read to the end, the child reaped (``None`` when a signal killed
        it; a Python error of the step raised here by running it again)."""
        if self.pid is None:
            return self._chunks[0]
        try:
            while not (self.read_some() if _readable(self.read_end) else self.over()):
                pass
        finally:
            os.close(self.read_end)
        self._reap(0)
        wait_status = self.status
        errors, self.errors = self.errors, None
        try:
            if os.WIFSIGNALED(wait_status):
                return None
            code = os.waitstatus_to_exitcode(wait_status)
            if code == _RAISED:
                return self.step()
            if code != 0:
                raise RuntimeError(f"LLVM compile child exited with status {code}")
            errors.seek(0)
            said = memoryview(errors.read())
            while said:
                said = said[os.write(2, said):]
            return b"".join(self._chunks)
        finally:
            errors.close()


def _readable(fd: int) -> bool:
    """Whether ``fd`` has bytes (or its end) to read within :data:`_LOOK_SECONDS` (``poll``: any fd)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(_LOOK_SECONDS * 1000))


def _cpu_ticks(pid: int) -> int | None:
    """The CPU time process ``pid`` has used, in clock ticks (``None`` without Linux's ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # (utime and stime, the stat's 14th and 15th)
    except (OSError, ValueError, IndexError):
        return None


def start(step: Callable[[], bytes], cpu_limit: float | None = None) -> Child:
    """``step`` started in a forked child (run here at once without ``os.fork``, beside another running
    thread, or when a fork fails: no memory for a huge process's page tables, no process left)."""
    if not hasattr(os, "fork") or _others_running():
        return _here(step)
    errors = tempfile.TemporaryFile()
    read_end, write_end = os.pipe()
    for stream in (sys.stdout, sys.stderr):  # (nothing buffered is written twice)
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    parent = os.getpid()
    try:
        with warnings.catch_warnings():  # Python 3.12+ and JAX's fork hook warn about forking a
            warnings.filterwarnings("ignore", message=r".*fork")  # threaded process: the child
            pid = os.fork()                                       # runs only LLVM
    except OSError:  # (no memory or no process left for a child: compile here, unguarded)
        os.close(read_end)
        os.close(write_end)
        errors.close()
        return _here(step)
    if pid == 0:
        status = 0
        try:
            _bound(CPU_LIMIT_SECONDS if cpu_limit is None else cpu_limit, parent)
            os.close(read_end)
            os.dup2(errors.fileno(), 2)
            faulthandler.disable()  # (an abort here is expected: no Python traceback dump)
            view = memoryview(step())
            while view:
                view = view[os.write(write_end, view):]
        except BaseException:
            status = _RAISED
        os._exit(status)
    os.close(write_end)
    return Child(step, pid, read_end, errors)


def _bound(cpu_limit: float, parent: int) -> None:
    """In a fresh child: stop at ``cpu_limit`` CPU seconds (``SIGXCPU``, no core file) and die with
    ``parent`` (Linux).  System calls only: nothing that may take the loader's or import's locks."""
    if resource is not None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = max(1, math.ceil(cpu_limit))
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # (the parent died before the line above)
        os._exit(1)


def _prctl():
    """Linux's ``prctl``, looked up once, in the importing process (see :func:`_bound`)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PR_SET_PDEATHSIG = 1
_PRCTL = _prctl()


def _here(step: Callable[[], bytes]) -> Child:
    begin = cpu_seconds()
    data = step()
    return Child(step, data=data, cpu_seconds=cpu_seconds() - begin)


def cpu_seconds() -> float:
    """CPU seconds of this process plus those of the children it has waited for (the compile children)."""
    if resource is None:
        return time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime
