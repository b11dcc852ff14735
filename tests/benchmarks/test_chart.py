"""The chart and the README's table show tensorad / fastest correct peer per workload, forward
and backward, and name the machine; checked on a small fabricated result table."""

from __future__ import annotations

import pytest

from benchmarks import plot, readme


def _entry(ms: float, status: str = "ok") -> dict:
    return {"status": status, "timing": {"median_ms": ms}}


def _results() -> dict:
    def system(fwd_a, bwd_a, fwd_b, bwd_b, status="ok"):
        return {"status": "ok", "workloads": {
            "a": {"forward": _entry(fwd_a), "backward": _entry(bwd_a, status)},
            "b": {"forward": _entry(fwd_b), "backward": _entry(bwd_b)}}}
    run1 = {"threads": 1, "systems": {
        "tensorad": system(2.0, 3.0, 1.0, 8.0),
        "torch": system(4.0, 6.0, 0.5, 10.0),
        "jax": system(5.0, 1.0, 2.0, 16.0, status="mismatch"),  # fastest backward of a, but wrong
        "numpy": system(8.0, 12.0, 4.0, 4.0)}}
    run2 = {"threads": 2, "systems": {
        "tensorad": {"status": "ok", "workloads": {"a": {"forward": _entry(1.0)}}},
        "torch": system(2.0, 3.0, 1.0, 5.0)}}
    return {"started": "2030-01-02 03:04:05", "options": {"mode": "full"},
            "machine": {"cpu": "Test CPU 9000", "logical_cpus": 4, "simd": ["avx2", "fma"]},
            "workloads": [{"name": "a", "describe": "X(2,3); grad X"},
                          {"name": "b", "describe": "Y(4,); grad Y"}],
            "runs": [run1, run2]}


def test_ratios_are_tensorad_over_the_fastest_correct_peer():
    rows = plot.ratio_rows(_results())
    assert rows[1]["a"] == pytest.approx((0.5, 0.5))   # 2/4 (torch); 3/6: jax's wrong 1.0 does not count
    assert rows[1]["b"] == pytest.approx((2.0, 2.0))   # 1/0.5 (torch); 8/4 (numpy)
    assert rows[2]["a"] == (pytest.approx(0.5), None)  # tensorad's backward was not timed
    assert rows[2]["b"] == (None, None)


def test_the_readme_table_says_where_tensorad_is_behind():
    table = readme.ratio_markdown(_results())
    assert "Measured 2030-01-02 03:04:05 on Test CPU 9000 (4 CPUs" in table
    assert "| a | X(2,3) | 0.50 / 0.50 | 0.50 / - |" in table
    assert "| b | Y(4,) | 2.00 / 2.00 | - / - |" in table
    behind = table[table.index("Behind"):]
    assert "b forward at 1 thread(s) (2.00, PyTorch)" in behind
    assert "b backward at 1 thread(s) (2.00, NumPy)" in behind
    assert " a " not in behind


def test_the_chart_is_drawn_with_the_machine_named(tmp_path):
    pytest.importorskip("matplotlib", reason="an optional extra; make test requires it")
    results = _results()
    assert "Test CPU 9000" in plot.machine_title(results) and "fastest peer" in plot.machine_title(results)
    path = plot.plot(results, str(tmp_path / "chart.png"))
    assert path and (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_readme_shows_the_published_run_as_ratio_markdown_writes_it():
    import json
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    published = json.loads((root / "benchmarks" / "readme" / "latest.json").read_text())
    text = (root / "README.md").read_text()
    assert readme.rewrite_readme(text, readme.ratio_markdown(published)) == text
