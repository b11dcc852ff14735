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
    # beyond the suite's range: one program per defect, so that each strict xfail flips on its fix
    252: ("D1", "min over r0 with a % where-condition, 2 threads: a parallel loop with step 2"),
    373: ("D1", "checked build, 2 threads: a parallel loop with a step"),
    278: ("D6", "x1[0, (i2 * 1073741825 - 3) % 3]: int32 wraps in evaluate, exact in the optimizer"),
    445: ("D6", "t0[i1, (i0 * 1073741824 + 1) % 3, i0 - 1]: int32 evaluate vs int64 kernel"),
}
DEFECTS = {"D1": "parallel loop with a step (codegen/llvm_emit.py omp_function)",
           "D2": "% conditions when output axes are merged into one loop",
           "D6": "index arithmetic overflows int32 (evaluate wraps, the kernel and optimizer do not)"}


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
    seeds = [s for s in range(N_PROGRAMS) if s not in KNOWN]  # (KNOWN also holds seeds beyond)
    failures = _run(seeds)
    assert not failures, "\n".join(f"seed {s}: {m}" for s, ms in sorted(failures.items()) for m in ms)


@pytest.mark.parametrize("defect", [pytest.param(d, marks=pytest.mark.xfail(strict=True, reason=f"{d}: {w}"))
                                    for d, w in sorted(DEFECTS.items())])
def test_known_defects(defect):
    seeds = [s for s, (d, _) in KNOWN.items() if d == defect]
    failures = _run(seeds)
    assert not failures, "\n".join(f"seed {s}: {m}" for s, ms in sorted(failures.items()) for m in ms)
