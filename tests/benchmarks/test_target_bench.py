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
def test_every_system_is_timed_in_its_own_process_for_every_round():
    t = target_bench._medians_of_rounds("llvm", 1, 1, ["gemm512"], cpu_time=False, rounds=2)
    assert set(t) == {(s, "gemm512") for s in target_bench.SYSTEMS["gemm"]}
    for (system, _), (seconds, note) in t.items():
        assert seconds > 0 and seconds == seconds  # a median was measured (no timing bar here)
        assert ("micro-kernel" in note) == (system == "tensorad")  # tensorad's strategy is named


def test_a_child_holds_itself_to_its_threads_and_checks_tensorad_first():
    code = ("import os, sys; sys.argv = ['x', '--child', 'numpy', '--threads', '1', '--reps', '1', "
            "'--cases', 'sum_exp']; from benchmarks import target_bench; target_bench.main(); "
            "print(len(os.sched_getaffinity(0)), os.environ['OPENBLAS_NUM_THREADS'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    timed, limits = out.stdout.strip().splitlines()[-2:]
    assert '"sum_exp"' in timed and limits == "1 1"
