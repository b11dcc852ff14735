"""Differential fuzzing in the regular suite: a few hundred random programs (``fuzz/``).

Each program runs one check (they rotate over the seeds: build vs evaluate, checked mode,
optimizer, reverse vs finite differences, jvp vs reverse, HVP vs finite differences) in a
worker process with a time limit, so that a crash or a hang is a failure of that program.
``make fuzz`` runs 10,000 programs with every check.

Programs that fail through a known defect (issue 8, being fixed on other branches) are listed
in ``KNOWN`` with the defect id: the main test skips nothing else, and one strict ``xfail``
test per defect re-runs its programs -- it starts passing (and so fails, being strict) when
the defect is fixed, and the entry can go.
"""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from fuzz.checks import ALL  # noqa: E402
from fuzz.runner import fuzz  # noqa: E402

N_PROGRAMS = 200
TIMEOUT = 120.0  # generous: a loaded machine runs these several times slower

# seed -> (defect id, what fails).  Found by this suite's own programs; see the reproducers
# that `python -m fuzz --seeds S --checks C` writes.
KNOWN: dict[int, tuple[str, str]] = {
    169: ("D2", "argmax over r0 with where=(2*r0 - i0 + 1) % 5 == 0, output (7, 4): the merged "
                "output loop computes only i1 == 0"),
}
DEFECTS = {"D2": "% conditions when output axes are merged into one loop"}
# programs beyond the suite's range that failed through a defect since fixed (they run with it):
# 252, 373 (D1: parallel loops with a step), 278, 445 (D6: index products past int32)
FIXED = (252, 373, 278, 445)


def _check_of(seed: int) -> tuple[str, ...]:
    return (ALL[seed % len(ALL)],)


def _run(seeds) -> dict:
    """seed -> failure messages, running each seed's rotating check."""
    failures: dict[int, list[str]] = {}
    rep = fuzz(seeds, workers=2, timeout=TIMEOUT, checks=_check_of)
    for f in rep.failures:
        failures.setdefault(f.seed, []).append(f"{f.check} [{f.status}]: {f.message[:300]}")
    assert not rep.invalid, f"the generator made invalid programs: {rep.invalid[:3]}"
    assert rep.programs == len(seeds)
    return failures


def test_random_programs():
    seeds = [s for s in list(range(N_PROGRAMS)) + list(FIXED) if s not in KNOWN]
    failures = _run(seeds)
    assert not failures, "\n".join(f"seed {s}: {m}" for s, ms in sorted(failures.items()) for m in ms)


@pytest.mark.parametrize("defect", [pytest.param(d, marks=pytest.mark.xfail(strict=True, reason=f"{d}: {w}"))
                                    for d, w in sorted(DEFECTS.items())])
def test_known_defects(defect):
    seeds = [s for s, (d, _) in KNOWN.items() if d == defect]
    failures = _run(seeds)
    assert not failures, "\n".join(f"seed {s}: {m}" for s, ms in sorted(failures.items()) for m in ms)
