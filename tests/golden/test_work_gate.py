"""The work gate: every program of the corpus (``corpus.py``) lowers to the forward and
gradient work pinned in ``work.json``, for each pinned target, and its gradient keeps the
cheap-gradient principle (``fuzz/cheap.py``).

A rise is a regression and fails.  A fall is an improvement, and fails too until the golden
file is regenerated in the same commit, with the reason in the commit message::

    TENSORAD_NO_DISK_CACHE=1 .venv/bin/python tools/golden_work.py

A program of the corpus missing from the file fails, and so does a name in the file that the
corpus no longer has (regenerate after adding or removing programs).

The default suite measures the corpus's fast tier (``Entry.fast``: the small shapes, the forms,
the families, the seed benchmarks, ten fuzz programs); ``TENSORAD_WORK_GATE=full`` measures
every program (``make fuzz`` runs it so).
"""

from __future__ import annotations

import functools
import os

import golden_corpus as C
import pytest

from fuzz.cheap import violation

_CORPUS = C.entries()  # (made once: each worker collects this module)
ALL_NAMES = {e.name for e in _CORPUS}
ENTRIES = {e.name: e for e in _CORPUS if e.fast or os.environ.get("TENSORAD_WORK_GATE") == "full"}


@functools.cache
def _golden() -> dict:
    return C.read_golden()


@pytest.mark.parametrize("name", list(ENTRIES))
def test_work_is_golden_and_the_gradient_cheap(name):
    measured = C.measure(ENTRIES[name])
    rises, falls, missing = C.differences(_golden(), name, measured.counts)
    problems = [f"REGRESSION {r}" for r in rises]
    problems += [f"missing (regenerate work.json: tools/golden_work.py) {m}" for m in missing]
    problems += [f"improvement (regenerate work.json in this commit, with the reason: "
                 f"tools/golden_work.py) {f}" for f in falls]
    if (why := violation(name, measured.cost)):
        problems.append(f"cheap-gradient principle broken: {why}")
    assert not problems, "\n".join(problems)


def test_the_golden_file_names_only_programs_of_the_corpus():
    stale = {name for table in _golden().values() for name in table} - ALL_NAMES
    assert not stale, f"work.json names programs the corpus lacks (regenerate): {sorted(stale)}"


def test_no_allowance_of_a_program_that_keeps_the_principle():
    """An allowance of a corpus program (of the tier measured) that keeps the principle is
    stale: remove it."""
    from fuzz.cheap import ALLOWED

    kept = [name for name in ALLOWED if name in ENTRIES and C.measure(ENTRIES[name]).cost.holds]
    assert not kept, f"allowed programs that now keep the cheap-gradient principle: {kept}"
