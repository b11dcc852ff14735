"""Differential fuzzing in the regular suite: 64 random programs (``fuzz/``), eight for each check.

Each program runs one check (they rotate over the seeds: build vs evaluate, checked mode,
optimizer, reverse vs finite differences, jvp vs reverse, HVP vs finite differences, forward
and backward built differently) in a worker process with a time limit, so that a crash or a
hang is a failure of that program.
``make fuzz`` runs 10,000 programs with every check.

Programs that once failed through a defect since fixed are listed in ``FIXED`` and run with
the others, so that the defect cannot come back unseen.
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

N_PROGRAMS = 8 * len(ALL)  # a sample; ``make fuzz`` is the deep search
TIMEOUT = 120.0  # generous: a loaded machine runs these several times slower

# programs that failed through a defect since fixed (they run with the others, drawn by the
# generator's first version, ``extras=False``, which made them):
# 169 (% conditions on merged output loops), 252, 373 (parallel loops with a step),
# 278, 445 (index products past int32), 10275 (its checked build: an if_then_else whose
# reads lie in a nested one was computed eagerly), 10811 (pow of -1.5 by 1e20 gave -inf)
FIXED = (169, 252, 373, 278, 445, 10275, 10811)
# the check a fixed seed failed (its rotating check before ``split`` joined the rotation)
CHECK_OF = {169: "checked", 252: "forward", 373: "checked", 278: "optimizer", 445: "checked",
            10275: "checked", 10811: "forward"}


def _check_of(seed: int) -> tuple[str, ...]:
    return (CHECK_OF.get(seed, ALL[seed % len(ALL)]),)


def _run(seeds) -> dict:
    """seed -> failure messages, running each seed's rotating check."""
    failures: dict[int, list[str]] = {}
    rep = fuzz(seeds, workers=2, timeout=TIMEOUT, checks=_check_of, extras=lambda s: s not in FIXED)
    for f in rep.failures:
        failures.setdefault(f.seed, []).append(f"{f.check} [{f.status}]: {f.message[:300]}")
    assert not rep.invalid, f"the generator made invalid programs: {rep.invalid[:3]}"
    assert rep.programs == len(seeds)
    return failures


@pytest.mark.slow
def test_random_programs():
    seeds = sorted(set(range(N_PROGRAMS)) | set(FIXED))
    failures = _run(seeds)
    assert not failures, "\n".join(f"seed {s}: {m}" for s, ms in sorted(failures.items()) for m in ms)
