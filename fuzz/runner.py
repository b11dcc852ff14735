"""Running fuzz jobs in worker processes with a time limit, and saving reproducers.

Each worker is a fresh Python process (``spawn``: no LLVM state is inherited) that imports
tensorad once and runs jobs sent over a pipe.  A worker that dies (a segfault, an abort, the
OOM killer) or does not answer in time (a hang) is recorded as a ``crash`` or ``hang`` failure
of that program, killed if needed and replaced, and the run goes on.  "In time" is ``timeout``
seconds of the worker's CPU time (``/proc``; wall-clock time where that cannot be read), or
``wall_timeout`` seconds of wall-clock time for a worker that waits without computing: on a
shared machine a worker at low priority can get a few percent of a core, and a wall-clock
limit alone called slow-but-finishing programs hangs (a program of 15 CPU-s took
more than 300 s of wall time at ``nice -n 19`` beside five busy colleagues).

Failures are shrunk (:func:`.program.shrink_candidates`: each smaller variant that still fails
the same check the same way is kept) and saved as reproducer scripts: the program's source,
its data and options, and the check that failed, runnable with ``python path/to/script.py``
from the repository root.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait

from .checks import ALL, DERIVATIVE, FINITE_DIFFERENCES
from .program import Program, generate, shrink_candidates


def job_for(prog: Program, seed: int, checks=ALL) -> dict:
    """What a worker runs for ``prog``.  A layer (:mod:`.layers`) is checked against PyTorch
    instead of finite differences and of the unoptimized gradient, whose sums over every
    input element are quadratic at its size (an average pool over 2 x 16 x 29 x 29: minutes
    in ``evaluate``)."""
    skip = FINITE_DIFFERENCES + ("optimizer",) if prog.torch else \
        FINITE_DIFFERENCES if prog.out_has_steps else ()
    checks = [c for c in checks if (prog.safe or c not in DERIVATIVE) and c not in skip] or ["forward"]
    if prog.torch and "torch" not in checks:
        checks.append("torch")
    job = {"source": prog.render(), "source64": prog.render("float64"), "dtype": prog.dtype,
           "options": dict(prog.options), "data": prog.data, "seed": seed, "safe": prog.safe,
           "checks": checks, "all_outputs": seed % 3 != 0, "calling": prog.calling,
           "torch": prog.torch or None}
    extents = [d.shape[0] for d in prog.placeholders if d.shape]
    if "sizes" in checks and extents and not prog.torch:  # one extent made a size, and 3 more
        job["sized"] = {"symbolic": prog.render(size=(extents[0], None)),
                        "from_one": prog.render(size=(extents[0], None), least=1),
                        "static": prog.render(size=(extents[0], extents[0] + 3)), "at": extents[0] + 3}
    return job


def _worker(conn, cache_dir: str | None, parent: int, fault_log: str | None = None
            ) -> None:  # pragma: no cover - runs in the child
    _exit_with_parent(parent)
    if fault_log:  # a fatal signal (an abort in native code) writes the Python stack here
        import faulthandler

        faulthandler.enable(open(fault_log, "w"))  # noqa: SIM115  (open until the worker ends)
    if cache_dir:
        os.environ["TENSORAD_CACHE_DIR"] = cache_dir
    import tensorad  # noqa: F401  (before the first job's clock starts)

    from .checks import run_checks

    conn.send("ready")
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        conn.send(run_checks(job))


def _exit_with_parent(parent: int) -> None:
    """A worker ends when the fuzzing process ``parent`` is gone, also one killed while the
    worker was still starting (a worker that read its parent's pid after being
    reparented, watched the wrong process, and outlived the runner by its start-up).

    The parent's pid comes from the parent, so a worker already orphaned exits here; Linux
    kills it (``PR_SET_PDEATHSIG``) the moment the parent dies from now on, even while it is
    busy in native code that holds the GIL (strictly: when the parent's thread that started it
    ends -- a :class:`Pool` is driven from one thread); elsewhere a thread polls the parent's
    pid."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # orphaned before the line above: nobody will ask for results
        os._exit(3)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system, all threads) that process ``pid`` and its descendants have
    used -- the LLVM compile workers (:mod:`tensorad.codegen.jit.isolate`) included, those
    running now and those already reaped -- or ``None`` where ``/proc`` cannot tell.  (A
    compile process that looped was invisible to a worker's own time: one ran
    12 CPU-minutes under a 300 CPU-s limit.)"""
    stats = _proc_stats()
    if pid not in stats:
        return None
    ticks = sum(stats[p][1] for p in [pid, *_below(pid, stats)])
    return ticks / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """The processes below ``pid``, from /proc."""
    return _below(pid, _proc_stats())


def _below(pid: int, stats: dict[int, tuple[int, int]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for p, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(p)
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _proc_stats() -> dict[int, tuple[int, int]]:
    """Every process's ``(parent pid, CPU ticks of it and of its reaped children)``, from /proc."""
    stats = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # (the command name may hold spaces)
            stats[int(name)] = (int(fields[1]), sum(int(v) for v in fields[11:15]))
        except (OSError, ValueError, IndexError):
            continue  # (not a process, or gone meanwhile)
    return stats


#: programs a worker runs before a fresh process takes its place: every kernel a process links
#: stays loaded with its memory mappings, and a worker that had built about 30,000 kernels
#: reached the system's limit on them (LLVM aborted; ``build`` now raises
#: first, :func:`tensorad.codegen.jit.engine._room_for_object`) -- a limit of the process, not a defect
#: of the program it happened to run
JOBS_PER_WORKER = 400


class Worker:
    def __init__(self, ctx, cache_dir: str | None) -> None:
        self.conn, child = ctx.Pipe()
        fd, self.fault_log = tempfile.mkstemp(prefix="tensorad-fuzz-worker-", suffix=".log")
        os.close(fd)
        self.proc = ctx.Process(target=_worker, args=(child, cache_dir, os.getpid(), self.fault_log),
                                daemon=True)
        self.proc.start()
        child.close()
        self.job = None
        self.key = None
        self.started = 0.0
        self.cpu_started: float | None = None
        self.ready = False
        self.done = 0  # jobs answered

    def late(self, now: float, timeout: float, wall_timeout: float) -> str | None:
        """Why the current job counts as a hang, or ``None``."""
        wall = now - self.started
        cpu = cpu_seconds(self.proc.pid)
        if self.cpu_started is None or cpu is None:
            return f"no answer in {timeout:.0f} s" if wall > timeout else None
        if cpu - self.cpu_started > timeout:
            return f"no answer in {timeout:.0f} CPU-s ({wall:.0f} s)"
        if wall > wall_timeout:
            return f"no answer in {wall:.0f} s ({cpu - self.cpu_started:.0f} CPU-s)"
        return None

    def submit(self, key, job: dict) -> None:
        if not self.ready:  # a fresh worker imports tensorad first: not part of a job's time
            if self.conn.poll(600):
                try:
                    self.conn.recv()
                except (EOFError, OSError):
                    pass
            self.ready = True
        self.key, self.job, self.started = key, job, time.monotonic()
        self.cpu_started = cpu_seconds(self.proc.pid)
        try:
            self.conn.send(job)
        except (BrokenPipeError, OSError):
            pass  # a worker that died on start: reported as a crash of this job

    def kill(self) -> None:
        """Kill the worker and what it forked (a compile child in LLVM dies with its parent
        where ``PR_SET_PDEATHSIG`` exists; elsewhere this is what stops it)."""
        for pid in descendants(self.proc.pid) if self.proc.pid else ():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)

    def fault(self, lines: int = 6) -> str:
        """The innermost frames of the thread that took a fatal signal, as the worker's fault
        handler wrote them, or ''; the log is removed: the worker is gone."""
        try:
            with open(self.fault_log) as f:
                text = f.read()
            os.unlink(self.fault_log)
        except OSError:
            return ""
        text = text.split("Current thread", 1)[-1]  # (the other threads' stacks come first)
        return "; ".join([ln.strip() for ln in text.splitlines() if ln.strip().startswith("File")][:lines])
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.kill()
        self.fault()  # (removes the log)


WALL_FACTOR = 4  # a job's wall-clock limit, in multiples of its CPU limit
POLL_SECONDS = 5.0  # how often busy workers' CPU times are read
# how often once a worker has run past its limit in wall-clock time but not in CPU time (reading the
# CPU times of every process below the workers costs the parent a few milliseconds)
POLL_LATE_SECONDS = 0.25


class Pool:
    """``run(jobs)`` yields ``(key, results)`` for each ``(key, job)`` as they finish."""

    def __init__(self, workers: int = 2, timeout: float = 60.0, cache_dir: str | None = None,
                 wall_timeout: float | None = None) -> None:
        self.ctx = mp.get_context("spawn")
        self.n = workers
        self.timeout = timeout  # CPU seconds of a job (see the module docstring)
        self.wall_timeout = wall_timeout if wall_timeout is not None else WALL_FACTOR * timeout
        self.cache_dir = cache_dir
        self.workers: list[Worker] = []

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []

    def _spawn(self) -> Worker:
        return Worker(self.ctx, self.cache_dir)

    def run(self, jobs):
        jobs = iter(jobs)
        while len(self.workers) < self.n:
            self.workers.append(self._spawn())
        idle = list(self.workers)
        busy: list[Worker] = []
        exhausted = False
        while True:
            while idle and not exhausted:
                nxt = next(jobs, None)
                if nxt is None:
                    exhausted = True
                    break
                w = idle.pop()
                w.submit(*nxt)
                busy.append(w)
            if not busy:
                return
            now = time.monotonic()
            left = min(w.started + min(self.timeout, self.wall_timeout) - now for w in busy)
            ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy],
                         timeout=min(max(left, POLL_LATE_SECONDS), POLL_SECONDS))
            now = time.monotonic()
            for w in list(busy):
                result = None
                if w.conn in ready:
                    try:
                        result = w.conn.recv()
                    except (EOFError, OSError):
                        result = None
                if result is not None:
                    busy.remove(w)
                    key = w.key
                    w.done += 1
                    if w.done >= JOBS_PER_WORKER:  # (a fresh process: see JOBS_PER_WORKER)
                        w.kill()
                        w.fault()  # (removes its log)
                        self.workers.remove(w)
                        w = self._spawn()
                        self.workers.append(w)
                    idle.append(w)
                    yield key, result
                    continue
                dead = not w.proc.is_alive() or w.conn in ready or w.proc.sentinel in ready
                late = None if dead else w.late(now, self.timeout, self.wall_timeout)
                if dead or late:
                    w.kill() if late else w.proc.join(5)
                    code = w.proc.exitcode
                    status = "hang" if late else "crash"
                    msg = late if late else f"worker died (exit code {code})"
                    where = w.fault()  # (read for a hang too: it removes the log)
                    if where and not late:
                        msg += f" in {where}"
                    busy.remove(w)
                    self.workers.remove(w)
                    fresh = self._spawn()
                    self.workers.append(fresh)
                    idle.append(fresh)
                    yield w.key, [{"check": ",".join(w.job["checks"]), "status": status, "message": msg}]


# ---- a fuzzing run --------------------------------------------------------------------------

@dataclass
class Failure:
    seed: int
    check: str
    status: str
    message: str
    program: Program
    shrunk: Program | None = None
    path: str | None = None


@dataclass
class Report:
    programs: int = 0
    checks: dict = field(default_factory=dict)  # check -> number run
    invalid: list = field(default_factory=list)  # (seed, message)
    failures: list = field(default_factory=list)
    undecided: list = field(default_factory=list)  # (seed, check, elements the oracle could not judge)
    chain_nans: list = field(default_factory=list)  # (seed, check, NaNs judged as 0 * inf of the chain rule)
    seconds: float = 0.0

    def failed_seeds(self) -> set[int]:
        return {f.seed for f in self.failures}

    def summary(self) -> str:
        lines = [f"{self.programs} programs, {sum(self.checks.values())} checks "
                 f"({', '.join(f'{k} {v}' for k, v in sorted(self.checks.items()))}) "
                 f"in {self.seconds:.1f} s; "
                 f"{len(self.failures)} failures, {len(self.invalid)} invalid programs"]
        for f in self.failures:
            lines.append(f"  seed {f.seed} {f.check} [{f.status}]: {f.message[:300]}"
                         + (f"  -> {f.path}" if f.path else ""))
        if self.undecided:
            lines.append(f"  finite differences decided nothing at {sum(n for _, _, n in self.undecided)} "
                         f"derivative elements of {len(self.undecided)} passing checks (not compared): "
                         + ", ".join(f"{s} {c} ({n})" for s, c, n in self.undecided[:10]))
        if self.chain_nans:
            lines.append(f"  NaN as IEEE's 0 * inf in the chain rule, judged by their strong-zero values, at "
                         f"{sum(n for _, _, n in self.chain_nans)} derivative elements of "
                         f"{len(self.chain_nans)} passing checks: "
                         + ", ".join(f"{s} {c} ({n})" for s, c, n in self.chain_nans[:10]))
        for seed, msg in self.invalid[:10]:
            lines.append(f"  invalid seed {seed}: {msg[:200]}")
        return "\n".join(lines)


def signature(result: dict) -> tuple:
    """What makes two failures 'the same' while shrinking: the check, the status and the kind
    of message (its first words)."""
    return result["check"], result["status"], result.get("message", "").split(":")[0][:40]


def fuzz(seeds, workers: int = 2, timeout: float = 60.0, checks=ALL, shrink: int = 0,
         out_dir: str | None = None, cache_dir: str | None = None, progress=None,
         extras: bool = True, generator=None, wall_timeout: float | None = None,
         forms21: bool = True, forms22: bool = True, forms27: bool = True, forms49: bool = True,
         target: str | None = None) -> Report:
    """Generate and check the programs of ``seeds``; shrink each failure with at most
    ``shrink`` trials and save reproducers under ``out_dir`` (when given).  ``checks`` is a
    list of check names, or a function of the seed giving one (to spread checks over seeds).
    ``extras=False`` (or a function of the seed giving it): the generator's first version
    (:func:`.program.generate`).  ``generator``: another program generator of the seed (the
    layers of :func:`.layers.generate_layer`).  ``forms21``, ``forms22``, ``forms27``, ``forms49``: as
    :func:`.program.generate` (``False``: the programs seeds drew before those forms were
    added).  ``target``: every program built for this target
    (``"llvm -mcpu=haswell"``: an AVX2 run on any x86 host) instead of the one it draws."""
    report = Report()
    t0 = time.monotonic()
    progs = {}

    def jobs():
        for s in seeds:
            extra = extras(s) if callable(extras) else extras
            progs[s] = generator(s) if generator is not None else \
                generate(s, extras=extra, forms21=forms21, forms22=forms22, forms27=forms27, forms49=forms49)
            if target is not None:
                progs[s] = replace(progs[s], options={**progs[s].options, "target": target})
            yield s, job_for(progs[s], s, checks(s) if callable(checks) else checks)

    with Pool(workers, timeout, cache_dir, wall_timeout) as pool:
        for seed, results in pool.run(jobs()):
            report.programs += 1
            for r in results:
                if r["status"] == "invalid":
                    report.invalid.append((seed, r["message"]))
                    continue
                report.checks[r["check"]] = report.checks.get(r["check"], 0) + 1
                if r.get("undecided"):
                    report.undecided.append((seed, r["check"], r["undecided"]))
                if r.get("chain_nans"):
                    report.chain_nans.append((seed, r["check"], r["chain_nans"]))
                if r["status"] != "ok":
                    msg = r.get("message", "") + (f" [{r['hint']}]" if r.get("hint") else "")
                    report.failures.append(Failure(seed, r["check"], r["status"], msg, progs[seed]))
            if progress:
                progress(report)
        for f in report.failures:
            if shrink:
                f.shrunk = shrink_failure(pool, f, shrink)
            if out_dir:
                f.path = save_reproducer(f, out_dir)
    report.seconds = time.monotonic() - t0
    return report


def shrink_failure(pool: Pool, f: Failure, budget: int) -> Program:
    """Greedy shrinking: take the first smaller variant that fails the same way, repeat."""
    want = (f.check, f.status, f.message.split(":")[0][:40])
    checks = f.check.split(",") if f.status in ("hang", "crash") else [f.check]
    best = f.program
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        for cand in shrink_candidates(best):
            smaller = cand.size() < best.size() or len(cand.options) < len(best.options)
            if cand.size() > best.size() or not smaller:
                continue
            tries += 1
            (_, results), = pool.run([(0, {**job_for(cand, f.seed, checks), "triage": False})])
            hit = [r for r in results if r["status"] == f.status and signature(r) == want
                   or (f.status in ("hang", "crash") and r["status"] == f.status)]
            if hit:
                best, improved = cand, True
                break
            if tries >= budget:
                break
    return best


REPRO = '''"""Reproducer of a tensorad fuzz failure (seed {seed}): check {check!r} [{status}].

{message}

Run from the repository root: python {path}
"""
import os
import sys

sys.path.insert(0, os.getcwd())

from fuzz.checks import run_checks  # noqa: E402

SOURCE = {source!r}

SOURCE64 = {source64!r}

JOB = dict(source=SOURCE, source64=SOURCE64, **{rest!r})

if __name__ == "__main__":
    print("program:")
    print(SOURCE)
    print("options:", JOB["options"], "data:", JOB["data"])
    for result in run_checks(JOB):
        print(result)
'''


def save_reproducer(f: Failure, out_dir: str) -> str:
    prog = f.shrunk or f.program
    checks = f.check.split(",")
    job = job_for(prog, f.seed, checks)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"seed{f.seed}_{checks[0]}.py")
    with open(path, "w") as fh:
        message = f.message.replace('"""', "'''")
        rest = {k: v for k, v in job.items() if k not in ("source", "source64")}  # ``sized`` too
        fh.write(REPRO.format(seed=f.seed, check=f.check, status=f.status, message=message, path=path,
                              source=job["source"], source64=job["source64"], rest=rest))
    return path


def rerun(f: Failure, pool: Pool) -> list[dict]:
    (_, results), = pool.run([(0, job_for(f.shrunk or f.program, f.seed, [f.check]))])
    return results


__all__ = ["Pool", "Report", "Failure", "fuzz", "job_for", "save_reproducer", "replace"]
