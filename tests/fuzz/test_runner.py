"""The fuzzing machinery itself: a crash or a hang is a recorded failure, not the end of the run;
failures are shrunk and saved as reproducer scripts that run on their own."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import replace

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from fuzz.checks import ALL  # noqa: E402
from fuzz.program import generate, shrink_candidates  # noqa: E402
from fuzz.runner import Failure, Pool, job_for, save_reproducer  # noqa: E402

GOOD = """import tensorad as ta
DT = 'float64'
x0 = ta.placeholder((3,), DT, name='x0')
t0 = ta.compute((3,), lambda i0: x0[i0] * 2.0, name='t0')
INPUTS = [x0]
TENSORS = [t0]
OUT = t0
"""


def _job(source: str) -> dict:
    return {"source": source, "source64": source, "dtype": "float64", "options": {}, "data": "unit",
            "seed": 0, "safe": True, "checks": ["forward"], "all_outputs": True}


@pytest.mark.slow
def test_crash_and_hang_are_failures_and_the_run_goes_on():
    jobs = [("crash", _job("import os\nos.abort()\n")),
            ("hang", _job("import time\ntime.sleep(600)\n")),
            ("good", _job(GOOD))]
    # the hang sleeps, so only the wall-clock limit ends it; the good job takes under a second
    with Pool(workers=2, timeout=20, wall_timeout=8) as pool:
        results = dict(pool.run(jobs))
    assert results["crash"][0]["status"] == "crash" and "exit code" in results["crash"][0]["message"]
    # the worker's fault handler names where the abort happened (the job's source)
    assert 'File "<fuzz program>", line 2' in results["crash"][0]["message"], results["crash"][0]["message"]
    assert results["hang"][0]["status"] == "hang"
    assert results["good"] == [{"check": "forward", "status": "ok"}]


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.slow
def test_a_hang_is_counted_in_cpu_seconds():
    # a loop that computes is a hang after `timeout` CPU seconds, long before the wall-clock
    # limit; a job that waits longer than `timeout` without computing (a worker starved of
    # CPU on a shared machine looks the same to a clock) still answers.  Meanwhile the parent
    # reads the workers' CPU times a few times a second, not in a loop that takes a core (each
    # reading walks /proc: milliseconds)
    jobs = [("spin", _job("while True:\n    pass\n")),
            ("waits", _job("import time\ntime.sleep(4)\n" + GOOD))]
    before = _own_cpu()
    with Pool(workers=2, timeout=1.5, wall_timeout=300) as pool:
        results = dict(pool.run(jobs))
    assert _own_cpu() - before < 0.5
    assert results["spin"][0]["status"] == "hang" and "CPU-s" in results["spin"][0]["message"]
    assert results["waits"] == [{"check": "forward", "status": "ok"}]


@pytest.mark.slow
def test_the_cpu_of_forked_children_counts_and_they_are_killed(tmp_path, running):
    # LLVM looped in a forked compile child, whose CPU the worker's own time
    # did not show; the worker is a hang after `timeout` CPU-s of it and its children, and
    # killing it kills the child
    pid_file = tmp_path / "child.pid"
    source = ("import os\npid = os.fork()\nif pid == 0:\n    while True:\n        pass\n"
              f"open({str(pid_file)!r}, 'w').write(str(pid))\nos.waitpid(pid, 0)\n")
    with Pool(workers=1, timeout=1.5, wall_timeout=300) as pool:
        ((_, results),) = list(pool.run([("forks", _job(source))]))
    assert results[0]["status"] == "hang" and "CPU-s" in results[0]["message"], results
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 30
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(child)


def test_generated_programs_are_deterministic_and_shrink_to_smaller_ones():
    a, b = generate(7), generate(7)
    assert a.render() == b.render() and a.options == b.options
    assert generate(8).render() != a.render()
    smaller = list(shrink_candidates(a))
    assert smaller and all(c.size() <= a.size() for c in smaller if c.options == a.options)


def test_reproducer_script_runs_on_its_own(tmp_path):
    prog = generate(3)
    f = Failure(3, "forward", "fail", "a made-up mismatch", prog)
    path = save_reproducer(f, str(tmp_path))
    out = subprocess.run([sys.executable, path], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "'check': 'forward'" in out.stdout and prog.render().splitlines()[-1] in out.stdout



def test_a_reproducer_of_the_sizes_check_carries_the_program_over_a_size(tmp_path):
    """The ``sizes`` check reads the program written over a size variable from its job (``sized``);
    a reproducer script holds the whole job, so that it runs that check and does not pass by
    skipping it."""
    import importlib.util

    prog = replace(generate(3), safe=True)
    f = Failure(3, "sizes", "fail", "a made-up mismatch", prog)
    spec = importlib.util.spec_from_file_location("repro", save_reproducer(f, str(tmp_path)))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    job = job_for(prog, 3, ["sizes"])
    assert "sized" in job and module.JOB == job

def test_every_check_runs_on_a_program():
    prog = replace(generate(11), safe=True, data="smooth")
    with Pool(workers=1, timeout=240) as pool:
        ((_, results),) = list(pool.run([(0, job_for(prog, 11))]))
    assert {r["check"] for r in results} == set(ALL) == {"forward", "checked", "optimizer", "reverse",
                                                         "jvp", "hvp", "split", "jacobian"}
    assert all(r["status"] == "ok" for r in results), results


def test_an_llvm_diagnostic_on_stderr_fails_the_check(monkeypatch, capfd):
    """LLVM writes its remarks to file descriptor 2 itself; a check during which one appears
    fails (a user's build prints nothing), and the text still reaches the real stderr."""
    from fuzz import checks

    def noisy(self):
        os.write(2, b"remark: <unknown>:0:0: loop not vectorized: call instruction cannot be vectorized\n")

    monkeypatch.setattr(checks.Case, "forward", noisy)
    (result,) = checks.run_checks(_job(GOOD))
    assert result["status"] == "fail" and "LLVM wrote to stderr" in result["message"], result
    assert "loop not vectorized" in capfd.readouterr().err
    monkeypatch.setattr(checks.Case, "forward", lambda self: os.write(2, b"a warning of Python's\n"))
    assert checks.run_checks(_job(GOOD))[0]["status"] == "ok"


KILLED_RUNNER = """import os, signal, sys
sys.path.append({root!r})  # after the sleeping tensorad
from fuzz.runner import Pool

if __name__ == "__main__":
    pool = Pool(workers=2, timeout=5)
    pids = [pool._spawn().proc.pid for _ in range(2)]
    with open({pids!r}, "w") as f:
        f.write(" ".join(map(str, pids)))
    os.kill(os.getpid(), signal.SIGKILL)  # killed while its workers are still starting
"""


def test_workers_die_with_a_runner_killed_while_they_start(tmp_path, running):
    """A worker orphaned before it looked up its parent watched the wrong process
    and lived on.  Here a worker's start-up never ends (a ``tensorad`` whose import sleeps, first
    on the path): only the death of its parent can end it."""
    (tmp_path / "tensorad").mkdir()
    (tmp_path / "tensorad" / "__init__.py").write_text("import time\ntime.sleep(300)\n")
    script, pids = tmp_path / "runner.py", tmp_path / "pids"
    script.write_text(KILLED_RUNNER.format(root=ROOT, pids=str(pids)))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, timeout=120,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert proc.returncode == -9
    workers = [int(p) for p in pids.read_text().split()]
    deadline = time.monotonic() + 60  # a liveness bound (the fix ends them at once), not a timing
    while any(map(running, workers)) and time.monotonic() < deadline:
        time.sleep(0.2)
    survivors = [p for p in workers if running(p)]
    for p in survivors:
        os.kill(p, 9)
    assert not survivors, f"workers {survivors} outlived their runner"


def test_a_target_run_builds_every_program_for_that_target(monkeypatch):
    """``--target "llvm -mcpu=haswell"``: an AVX2 run on an AVX-512 host, whatever
    target each program draws; the programs are otherwise the seed's."""
    import fuzz.runner as runner

    seen = []

    def recording(prog, seed, checks):
        seen.append((seed, prog.options.get("target"), prog))
        return job_for(prog, seed, checks)

    monkeypatch.setattr(runner, "job_for", recording)
    rep = runner.fuzz([3, 4], workers=1, checks=("forward",), target="llvm -mcpu=haswell")
    assert rep.programs == 2 and not rep.failures, rep.summary()
    assert [(s, t) for s, t, _ in seen] == [(3, "llvm -mcpu=haswell"), (4, "llvm -mcpu=haswell")]
    assert [p for _, _, p in seen] == [generate(3), generate(4)]  # (equality leaves options out)


def test_workers_are_replaced_after_their_share_of_programs(monkeypatch):
    """A worker runs ``JOBS_PER_WORKER`` programs, then a fresh process takes its place (kernels
    stay linked for a process's life: a worker that never ends meets the system's mapping limit)."""
    import fuzz.runner as runner

    monkeypatch.setattr(runner, "JOBS_PER_WORKER", 1)
    pids = []
    real_spawn = runner.Pool._spawn

    def spawn(self):
        w = real_spawn(self)
        pids.append(w.proc.pid)
        return w

    monkeypatch.setattr(runner.Pool, "_spawn", spawn)
    rep = runner.fuzz([5, 6, 7], workers=1, checks=("forward",))
    assert rep.programs == 3 and not rep.failures, rep.summary()
    assert len(set(pids)) == 4  # the first worker, and a fresh one after each program
