"""A custom argmax (ties keep the first point) over ``r1`` of
``(v ** 2 + c) * p``, where for even ``i0`` nothing depends on ``r1``: all three points tie, and
``evaluate`` gives index 0.  The kernel gave 1 at default options: ``x ** 2`` had become
``x * x`` with the fast-math ``contract`` flag, and LLVM fused ``x * x + c`` into an
FMA in one copy of the value (the loop's first iteration, peeled) and not in another, so the
"equal" values differed by an ulp.  The general power's call was never contracted; its
multiplications are not either now.  Oracle: ``ta.evaluate`` and the tie rule (index 0 where
the value does not depend on ``r1``)."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from fuzz.checks import run_checks  # noqa: E402
from fuzz.program import generate  # noqa: E402
from fuzz.runner import job_for  # noqa: E402


def test_tied_points_of_a_square_keep_the_first_index():
    """The seed's program, data, options (``parallel_min_work=0``, no AVX-512, ``variants``)
    and calling (strided arguments): the kernel against ``evaluate``, every output."""
    job = job_for(generate(449201), 449201)
    job["checks"] = ["forward"]
    assert "x2[13, (i1 + 1) % 2])) ** 2" in job["source"]  # (the program this test is about)
    (result,) = run_checks(job)
    assert result["status"] == "ok", result
