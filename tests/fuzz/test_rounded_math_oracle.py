"""The forward check against ``ta.evaluate`` where NumPy's float32 ``tanh`` is an
ulp off and a ``//`` turns that ulp into 1 -- the kernel's correctly rounded tanh disagreed with
the oracle by 17.  A float32 program's mismatch may match ``evaluate`` with its math computed in
float64 and rounded once (``evaluate_in_order(..., rounded_math=True)``)."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from fuzz import checks  # noqa: E402
from fuzz.program import generate  # noqa: E402
from fuzz.runner import job_for  # noqa: E402


def test_a_math_ulp_under_a_floor_is_not_a_mismatch():
    seed = 485818
    results = checks.run_checks(job_for(generate(seed), seed, checks=("forward", "checked")))
    assert [r["status"] for r in results] == ["ok", "ok"], results
