"""LLVM's internal failures, contained: compile jobs run in worker processes started clean.

:data:`WORKERS` owns this process's compile workers: at most :func:`.target.usable_cpus` fresh interpreters
running :mod:`.jit.compile_job` (llvmlite only), closed at interpreter exit; a process forked from this one
starts its own.  Starting one costs ~0.1 s of CPU: the first starts beside a build's lowering
(:meth:`Workers.prestart`), another only for :data:`START_BYTES` of IR waiting.  :meth:`Workers.run` gives
each :class:`.jit.compile_job.Job`'s bytes, or ``None`` when its worker died (an LLVM abort, past
:data:`CPU_LIMIT_SECONDS` of CPU, or its job not read and answered in :data:`HANG_SECONDS` from when it is
ready): the caller retries a safer pipeline (:func:`.jit.engine.compile_object`), and a new worker replaces
the dead one.  :data:`HERE` asks the caller to run the job in this process: where no worker can start (no
``sys.executable``, a frozen application, ``TENSORAD_COMPILE_WORKERS=0``), or to raise the Python error the
job raised in its worker.  A worker leaves after :data:`IDLE_SECONDS` without a job.  A worker that cannot
start, or ends before it is ready, makes jobs run here for :data:`RETRY_SECONDS` (doubled at each failure in a
row), then a build tries a new one; after :data:`MAX_FAILURES` in a row, jobs run here for the life of the
process.  The first failure warns. What a worker writes on stderr (LLVM's remarks) is written to this
process's stderr when its job succeeds; a dead worker's is dropped."""

from __future__ import annotations

import atexit
import os
import selectors
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Sequence

import llvmlite

from ..target import usable_cpus
from . import compile_job
from .compile_job import Job

try:
    import resource
except ImportError:  # (not POSIX: this process's CPU time only)
    resource = None

#: the CPU seconds one compile job may use: far past any module's optimization time
CPU_LIMIT_SECONDS = 20

#: the wall seconds a job may take, from its worker being ready, before the worker is taken for hung and
#: killed
HANG_SECONDS = 300

#: the wall seconds a new worker may take to be ready (an interpreter and llvmlite: ~0.1 s of CPU, far
#: longer on a loaded machine) before it is taken for hung
START_SECONDS = 60

#: a job's result that asks the caller to run it in this process
HERE = object()

#: the IR bytes waiting to be compiled that start another worker while one is live: about what LLVM
#: compiles (~2 us a byte) in the CPU time a worker's start costs (~0.1 s: Python and llvmlite's
#: library loaded); less waits for the live workers
START_BYTES = 64_000

#: the seconds a worker waits for its next job before it leaves (freeing its ~100 MB: a long-running process
#: that stops building keeps none); the next run starts another
IDLE_SECONDS = 120.0

#: the seconds jobs run in this process after a worker could not start or ended before it was ready (doubled
#: at each such failure in a row), before a build tries a new worker
RETRY_SECONDS = 2.0

#: the failures in a row to start a worker after which jobs run in this process for good
MAX_FAILURES = 6


class _Worker:
    """One worker process; ``cpu``: its CPU seconds when it last answered."""

    def __init__(self, command: list[str]) -> None:
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, bufsize=0)
        self.jobs, self.answers = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        os.set_blocking(self.jobs, False)  # (a job it does not read in time is a hang, see send)
        self.ready, self.cpu = False, 0.0

    def close(self, kill: bool = False) -> int:
        """End the worker (``kill``: at once, else when it has read its last job) and reap it; its status."""
        if kill:
            self.proc.kill()
        self.proc.stdin.close()
        self.proc.stdout.close()
        try:
            return self.proc.wait(timeout=None if kill else 5)
        except subprocess.TimeoutExpired:
            return self.close(kill=True)


class Workers:
    """Compile worker processes, their number bounded by the CPUs (``command``: what a worker runs,
    by default :mod:`.jit.compile_job` with this process's llvmlite)."""

    def __init__(self, command: list[str] | None = None) -> None:
        self.command = command
        self.lock = threading.Lock()
        self.live: list[_Worker] = []
        self.failures = 0  # (workers in a row that could not start or ended before they were ready)
        self.retry_at = 0.0  # (time.monotonic() from which a new worker is tried again)
        self.warned = self.closes_at_exit = False

    @property
    def broken(self) -> bool:
        """Whether jobs run in this process now: a worker failed to start, and its back-off is not over or
        :data:`MAX_FAILURES` were in a row."""
        return self.failures > 0 and (self.failures >= MAX_FAILURES or time.monotonic() < self.retry_at)

    def _start_failed(self, why: str) -> None:
        self.failures += 1
        wait = RETRY_SECONDS * 2 ** (self.failures - 1)
        self.retry_at = time.monotonic() + wait
        if not self.warned:
            self.warned = True
            warnings.warn(f"tensorad: a compile worker {why}; compiles run in this process, a new worker is "
                          f"tried in {wait:g} s (after {MAX_FAILURES} failures in a row, never)",
                          RuntimeWarning, stacklevel=4)

    def _command(self) -> list[str] | None:
        if self.command is not None:
            return self.command
        if (os.environ.get("TENSORAD_COMPILE_WORKERS") == "0" or not sys.executable
                or getattr(sys, "frozen", False)):
            return None
        return [sys.executable, compile_job.__file__, os.path.dirname(os.path.dirname(llvmlite.__file__))]

    def run(self, jobs: Sequence[Job], cpu_limit: float | None = None
            ) -> list[tuple[bytes | None | object, float]]:
        """Each job's bytes (``None``: its worker died; :data:`HERE`: run it here) and CPU seconds, the
        jobs run side by side, the next sent as soon as a worker is free; a worker starts beside live
        ones only for :data:`START_BYTES` of IR waiting."""
        command = self._command()
        if command is None or self.broken or not jobs:
            return [(HERE, 0.0)] * len(jobs)
        with self.lock:
            self._close_at_exit()
            return self._run(command, jobs, CPU_LIMIT_SECONDS if cpu_limit is None else cpu_limit)

    def prestart(self) -> None:
        """Start a worker now where none is live, its start beside the caller's work (a build's
        lowering) rather than before the first job."""
        command = self._command()
        with self.lock:
            for worker in [w for w in self.live if w.ready and w.proc.poll() is not None]:
                self._drop(worker)  # (it left idle)
            if command is None or self.broken or self.live:
                return
            self._close_at_exit()
            try:
                self.live.append(_Worker(command))
            except OSError as e:
                self._start_failed(f"could not start ({e})")

    def _close_at_exit(self) -> None:
        if not self.closes_at_exit:
            atexit.register(self.close)
            self.closes_at_exit = True

    def _run(self, command: list[str], jobs: Sequence[Job], cpu_limit: float) -> list:
        results: list = [(HERE, 0.0)] * len(jobs)
        queue = list(range(len(jobs)))[::-1]
        busy: dict[int, tuple[int, _Worker, float]] = {}  # (by the fd it answers on)
        width = min(len(jobs), max(1, usable_cpus()))
        with selectors.DefaultSelector() as sel:
            try:
                while queue or busy:
                    while queue and len(busy) < width and not self.broken:
                        waiting = sum(len(jobs[j].text) for j in queue)
                        if len(busy) == len(self.live) > 0 and waiting < START_BYTES:
                            break  # (a start would cost more than the wait for a live worker)
                        i = queue.pop()
                        try:
                            worker = self._free(command, busy)
                        except OSError:  # (a worker died idle, or none can start: the job waits)
                            queue.append(i)
                            continue
                        deadline = time.monotonic() + (HANG_SECONDS if worker.ready else START_SECONDS)
                        busy[worker.answers] = (i, worker, deadline)  # (an interrupt mid-send ends it too)
                        try:
                            compile_job.send(worker.jobs, (jobs[i].wire(), cpu_limit, IDLE_SECONDS), deadline)
                        except OSError as e:  # (it never read its job: hung; or it died idle: the job waits)
                            if isinstance(e, TimeoutError):
                                self._drop(worker, kill=True)
                                results[i] = (None, 0.0)
                            else:
                                queue.append(i)
                            del busy[worker.answers]
                            continue
                        sel.register(worker.answers, selectors.EVENT_READ)
                    if not busy:
                        break
                    wait = min(deadline for *_, deadline in busy.values()) - time.monotonic()
                    for key, _ in sel.select(max(0.0, wait)):
                        i, worker, _ = busy[key.fd]
                        answer = compile_job.receive(worker.answers)
                        if answer is not None and answer[0] == "ready":  # (its job's clock starts now)
                            worker.ready, worker.cpu, self.failures = True, answer[4], 0
                            busy[key.fd] = (i, worker, time.monotonic() + HANG_SECONDS)
                            continue
                        sel.unregister(key.fd)
                        del busy[key.fd]
                        if answer is not None and answer[0] == "retired":  # (it left idle: the job waits)
                            self._drop(worker)
                            queue.append(i)
                        else:
                            results[i] = self._result(worker, answer)
                    for fd, (i, worker, deadline) in list(busy.items()):
                        if time.monotonic() > deadline:
                            sel.unregister(fd)
                            del busy[fd]
                            self._drop(worker, kill=True)
                            results[i] = (None, 0.0)
            except BaseException:  # (an interrupt: the jobs under way are dropped with their workers)
                for _, worker, _ in busy.values():
                    if worker in self.live:
                        self._drop(worker, kill=True)
                raise
        return results

    def _free(self, command: list[str], busy: dict) -> _Worker:
        """A worker with no job, started when none is left."""
        taken = {id(w) for _, w, _ in busy.values()}
        for worker in self.live:
            if id(worker) not in taken:
                if worker.proc.poll() is None:
                    return worker
                if not worker.ready:
                    self._start_failed(f"ended before it was ready (status {worker.proc.returncode})")
                self._drop(worker)
                raise BrokenPipeError
        try:
            self.live.append(_Worker(command))
        except OSError as e:
            self._start_failed(f"could not start ({e})")
            raise
        return self.live[-1]

    def _result(self, worker: _Worker, answer: tuple | None) -> tuple[bytes | None | object, float]:
        if answer is None:  # (it died: an abort, its CPU limit; before it was ready, it could not start)
            self._drop(worker)
            if not worker.ready:
                self._start_failed(f"ended before it was ready (status {worker.proc.returncode})")
            return (None if worker.ready else HERE), 0.0
        status, data, cpu, said, worker.cpu = answer
        if status != "ok":
            return HERE, cpu
        view = memoryview(said)
        while view:
            view = view[os.write(2, view):]
        return data, cpu

    def _drop(self, worker: _Worker, kill: bool = False) -> None:
        self.live.remove(worker)
        worker.close(kill)

    def cpu_seconds(self) -> float:
        """The CPU seconds the live workers had used when they last answered."""
        return sum(w.cpu for w in self.live)

    def close(self) -> None:
        """End every worker and reap it (at interpreter exit; a later compile starts new ones)."""
        with self.lock:
            while self.live:
                self._drop(self.live[-1])

    def forget(self) -> None:
        """In a forked child: the workers are the parent's (their pipes closed here, nothing reaped)."""
        self.lock = threading.Lock()
        for worker in self.live:
            worker.proc.returncode = 0  # (not this process's child)
            worker.proc.stdin.close()
            worker.proc.stdout.close()
        self.live = []


WORKERS = Workers()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WORKERS.forget)


def cpu_seconds() -> float:
    """CPU seconds of this process plus those of its compile workers, live and ended."""
    if resource is None:
        return time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime + WORKERS.cpu_seconds()
