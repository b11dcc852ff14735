"""The ``jvp`` check's identity ``h . J u == u . J^T h`` where rounding decides the derivative.

A program differentiated a layer norm over rows of three equal values of ~1e8 whose gamma was
a mean of ~1e8: ``x - mean`` is an ulp's residue, ``rstd`` is ``1/sqrt(eps)``, and the
derivative is that residue amplified -- rounding, not the formula, decides it.  The reverse
gradient from ``ta.evaluate`` and from the kernel were 21 apart (in 7,400), and the identity,
checked to 1e-7, failed although neither mode is wrong.  A mismatch is allowed twice how far
both sides move when ``ta.evaluate`` computes them instead, or when the inputs move by a few ulps
(the program's product, differentiated by exclusive scans, rounds otherwise than its jvp: four
ulps move the reverse side by 16 in 7,400); a wrong derivative still fails.
"""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tensorad as ta  # noqa: E402
from fuzz import checks  # noqa: E402
from fuzz.program import generate  # noqa: E402
from fuzz.runner import job_for  # noqa: E402


def _jvp(seed: int) -> list[dict]:
    return checks.run_checks(job_for(generate(seed), seed, checks=("jvp",)))


def test_a_derivative_that_rounding_decides_passes():
    (result,) = _jvp(477990)
    assert result["status"] == "ok", result


def test_a_wrong_forward_derivative_still_fails(monkeypatch):
    """A jvp 0.1% too large -- about the size of that discrepancy -- on a program whose
    derivative rounding does not decide."""
    real = ta.jvp

    def scaled(out, ins, tangents, optimize=True):
        t = real(out, ins, tangents, optimize=optimize)
        return ta.compute(t.shape, lambda *i: t[i] * 1.001, name=f"{t.name}.scaled")
    monkeypatch.setattr(ta, "jvp", scaled)
    seed = next(s for s in range(1000, 1100) if generate(s).safe)
    results = _jvp(seed)
    assert [r["status"] for r in results] == ["fail"], results
    assert "h . jvp(u) vs u . reverse(h)" in results[0]["message"]


@pytest.mark.parametrize("seed", [478142])
def test_the_winner_destination_program_passes_every_derivative_check(seed):
    """The program of ``tests/regressions/test_winner_destination_keeps_guards.py`` through the
    fuzzer's own checks, its override rule included."""
    results = checks.run_checks(job_for(generate(seed), seed, checks=("reverse", "jvp", "hvp")))
    assert all(r["status"] == "ok" for r in results), results
