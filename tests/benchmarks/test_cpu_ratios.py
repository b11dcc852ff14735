"""Smoke test of ``python -m benchmarks.cpu_ratios`` (tensorad / fastest peer in CPU time) on tiny
shapes, NumPy as the peer; it times nothing it asserts, it checks the report's shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_ratios_of_checked_phases_and_notes_for_missing_ones(tmp_path):
    out = tmp_path / "ratios.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cpu_ratios", "dense,flatten", "--tiny",
                           "--peers", "numpy", "--rounds", "2", "--sample-s", "0.001", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {f"{w}:{p}" for w in ("dense", "flatten") for p in ("forward", "backward", "step")}
    for system, ms in rows["dense:step"]["ms"].items():  # a step: the forward, then the backward
        assert ms == rows["dense:forward"]["ms"][system] + rows["dense:backward"]["ms"][system]
    dense = rows["dense:forward"]
    assert dense["fastest_peer"] == "numpy" and dense["ratio"] > 0
    assert set(dense["ms"]) == {"tensorad", "numpy"}
    assert "forward geomean tensorad / fastest peer" in proc.stdout
    assert "step geomean tensorad / fastest peer" in proc.stdout
