"""`python -m benchmarks.layers_table`: one column per run, ratios to the fastest peer."""

from __future__ import annotations

import json
import math
import pathlib

from benchmarks import layers_table

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN = json.loads((ROOT / "benchmarks" / "readme" / "latest.json").read_text())["runs"][0]


def _ratio(run: dict, workload: str, phase: str) -> float:
    """tensorad's median over the fastest correct peer's, read from the run here."""
    systems = run["systems"]
    peers = [systems[s]["workloads"][workload][phase] for s in ("torch", "torch-compile", "jax", "numpy")
             if s in systems and workload in systems[s].get("workloads", {})]
    best = min(e["timing"]["median_ms"] for e in peers if e and e.get("status") == "ok" and "timing" in e)
    return systems["tensorad"]["workloads"][workload][phase]["timing"]["median_ms"] / best


def test_rows_columns_and_geometric_mean():
    text = layers_table.table([("first", RUN), ("second", RUN)])
    lines = text.splitlines()
    assert lines[0] == "| layer | first | second |"
    names = list(RUN["systems"]["tensorad"]["workloads"])
    assert [ln.split(" | ")[0].strip("| ") for ln in lines[2:-1]] == names
    fwd = [_ratio(RUN, n, "forward") for n in names]
    geo = math.exp(sum(map(math.log, fwd)) / len(fwd))
    assert f"**{geo:.2f} / " in lines[-1]
    worst = max(range(len(names)), key=lambda k: fwd[k])
    cell = lines[2 + worst].split(" | ")[1]
    want = f"{fwd[worst]:.2f}"
    assert (f"**{want}**" if fwd[worst] > 1.5 else want) in cell


def test_usage_without_files(capsys):
    assert layers_table.main([]) == 2
    assert "layers_table" in capsys.readouterr().err
