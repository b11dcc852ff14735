"""``benchmarks.target_bench`` times each system in a process of its own, held to the thread
count (a BLAS pool spinning beside tensorad's 2-thread product halved its rate when they shared
a process), and reports the median over rounds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from benchmarks import target_bench  # noqa: E402


@pytest.mark.slow
def test_every_system_is_timed_in_its_own_process():
    """One round of real child processes (each imports torch: seconds of CPU each); the rounds'
    order and medians are checked below on children that answer at once."""
    t = target_bench._medians_of_rounds("llvm", 1, 1, ["gemm512"], cpu_time=False, rounds=1)
    assert set(t) == {(s, "gemm512") for s in target_bench.SYSTEMS["gemm"]}
    for (system, _), (seconds, note) in t.items():
        assert seconds > 0 and seconds == seconds  # a median was measured (no timing bar here)
        assert ("micro-kernel" in note) == (system == "tensorad")  # tensorad's strategy is named


def test_every_round_runs_every_system_once_in_its_own_process_in_a_rotated_order(monkeypatch):
    """Each round starts one child per system that has a case, with only its cases, in an order
    rotated from round to round; each figure is the median over the rounds, with the first
    round's note.  (The children here answer at once: ``subprocess.run`` stands in.)"""
    import json
    import subprocess

    seconds = (0.3, 0.1, 0.2)  # per round: the median, 0.2, is neither the first, the last nor the mean
    calls = []

    def child(argv, env, **kwargs):
        assert kwargs["check"] and argv[1:3] == ["-m", "benchmarks.target_bench"]
        assert env["OPENBLAS_NUM_THREADS"] == "1" and argv[argv.index("--threads") + 1] == "1"
        system, cases = argv[argv.index("--child") + 1], argv[argv.index("--cases") + 1].split(",")
        rnd = sum(1 for s, _, _ in calls if s == system)
        calls.append((system, cases, "--cpu-time" in argv))
        answer = {case: (seconds[rnd], f"{system} round {rnd}") for case in cases}
        return subprocess.CompletedProcess(argv, 0, "a line a child printed\n" + json.dumps(answer), "")

    monkeypatch.setattr(subprocess, "run", child)
    t = target_bench._medians_of_rounds("llvm", 1, 1, ["gemm512"], cpu_time=True, rounds=3)
    systems = sorted(target_bench.SYSTEMS["gemm"])  # (torch times only sum_exp: no child of it)
    assert [s for s, _, _ in calls] == systems + systems[1:] + systems[:1] + systems[2:] + systems[:2]
    assert all(cases == ["gemm512"] and cpu for _, cases, cpu in calls)
    assert t == {(s, "gemm512"): (0.2, f"{s} round 0") for s in systems}
    calls.clear()
    t = target_bench._medians_of_rounds("llvm", 1, 1, ["gemm512", "sum_exp"], cpu_time=False, rounds=1)
    every = sorted({s for family in target_bench.SYSTEMS.values() for s in family})
    assert [s for s, _, _ in calls] == every and not any(cpu for _, _, cpu in calls)
    both = ["gemm512", "sum_exp"]
    assert {s: cases for s, cases, _ in calls} == {"numpy": both, "tensorad": both, "torch": ["sum_exp"],
                                                    "torch.mm": ["gemm512"]}
    assert set(t) == {(s, c) for c, family in (("gemm512", "gemm"), ("sum_exp", "sum_exp"))
                      for s in target_bench.SYSTEMS[family]}


def test_a_child_holds_itself_to_its_threads_and_checks_tensorad_first():
    code = ("import os, sys; sys.argv = ['x', '--child', 'numpy', '--threads', '1', '--reps', '1', "
            "'--cases', 'sum_exp']; from benchmarks import target_bench; target_bench.main(); "
            "print(len(os.sched_getaffinity(0)), os.environ['OPENBLAS_NUM_THREADS'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    timed, limits = out.stdout.strip().splitlines()[-2:]
    assert '"sum_exp"' in timed and limits == "1 1"
