"""`make bench-readme`: only a full, quiet, correct run becomes the README's table and chart."""

from __future__ import annotations

import copy
import json
import pathlib

import pytest

from benchmarks import readme, report

ROOT = pathlib.Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "benchmarks" / "readme" / "latest.json"


@pytest.fixture
def good() -> dict:
    return json.loads(PUBLISHED.read_text())


def test_the_published_run_is_one_that_publish_accepts(good):
    assert readme.refusal(good) is None
    text = (ROOT / "README.md").read_text()
    table = text[text.index(readme.START):text.index(readme.END)]
    assert f"Measured {good['started']}" in table  # the README shows that run
    assert "](benchmarks/readme/latest.png)" in text


@pytest.mark.parametrize("spoil, reason", [
    (lambda r: r["options"].update(mode="quick"), "quick run"),
    (lambda r: r["options"].update(mode="tiny"), "tiny run"),
    (lambda r: r.update(flags={"quick": True, "busy": False}), "not a full one"),
    (lambda r: r["runs"][1]["systems"]["torch"].update(foreign_cpus=0.8), "busy: torch (2 thread"),
    (lambda r: r.update(flags={"quick": False, "busy": True}), "busy"),
    (lambda r: r["runs"][0]["systems"]["jax"].pop("foreign_cpus"), "load was not recorded for jax"),
    (lambda r: r["runs"][0]["systems"]["tensorad"]["workloads"]["dense"]["backward"]
     .update(status="mismatch"), "tensorad dense backward did not match"),
    (lambda r: r.update(runs=[]), "measured nothing"),
])
def test_refuses_quick_busy_or_wrong_runs(good, spoil, reason):
    bad = copy.deepcopy(good)
    spoil(bad)
    assert reason in (readme.refusal(bad) or "")


def test_publish_copies_the_run_and_rewrites_only_the_table(good, tmp_path):
    run = tmp_path / "results" / "latest.json"
    run.parent.mkdir()
    good["started"] = "2030-01-01 00:00:00"
    run.write_text(json.dumps(good))
    (tmp_path / "results" / "latest.png").write_bytes(b"png")
    page = tmp_path / "README.md"
    page.write_text(f"intro\n{readme.START}\nold table\n{readme.END}\noutro\n")
    written = readme.publish(str(run), str(page), str(tmp_path / "published"))
    assert (tmp_path / "published" / "latest.png").read_bytes() == b"png"
    assert json.loads((tmp_path / "published" / "latest.json").read_text())["started"] == good["started"]
    text = page.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{readme.END}\noutro\n") and "old table" not in text
    assert "Measured 2030-01-01 00:00:00" in text and len(written) == 3
    busy = copy.deepcopy(good)
    busy["options"]["mode"] = "quick"
    run.write_text(json.dumps(busy))
    with pytest.raises(ValueError, match="not published: the run is a quick run"):
        readme.publish(str(run), str(page), str(tmp_path / "published"))
    assert page.read_text() == text  # untouched


def test_bench_writes_only_to_an_untracked_folder():
    ignore = (ROOT / ".gitignore").read_text().splitlines()
    assert "benchmarks/results/" in ignore
    assert not any(line.startswith("!benchmarks/results") for line in ignore)
    assert report.RESULTS_DIR == str(ROOT / "benchmarks" / "results")
