"""A worker's thread limit: NumPy's BLAS keeps one thread unless NumPy is the system timed.

OpenBLAS's idle threads spin for about 0.1 s after each call; a worker that computes a NumPy
reference (the sweeps' float64 ``a @ b``) right before timing another system on the same cores
measured that system at half its speed (a 2-thread 512^3 product: 1.83 ms a call, not 0.97).
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from benchmarks import threads  # noqa: E402


def _limited(monkeypatch, **kw) -> dict:
    env: dict = {}
    monkeypatch.setattr(threads.os, "environ", env)  # (this process's own stays as it is)
    monkeypatch.setattr(threads.os, "sched_setaffinity", lambda pid, cpus: None, raising=False)
    threads.apply_thread_limit(2, **kw)
    return env


def test_numpy_blas_keeps_the_thread_count_when_numpy_is_timed(monkeypatch):
    env = _limited(monkeypatch)
    assert env["OPENBLAS_NUM_THREADS"] == "2" and env["OMP_NUM_THREADS"] == "2"


def test_numpy_blas_gets_one_thread_beside_another_system(monkeypatch):
    env = _limited(monkeypatch, numpy_blas=False)
    assert env["OPENBLAS_NUM_THREADS"] == "1"
    assert env["OMP_NUM_THREADS"] == "2" and env["MKL_NUM_THREADS"] == "2"  # (PyTorch's own)

