"""An integer made from float data, judged against one summation order only.

``k0[i0, i1] = int64(c2[..] * 1e10) % (3 i0 - 1)`` over a float32 product ``c2`` (a strict
kernel: ``fastmath=False``, x86-64): the kernel sums in index order, NumPy pairwise, an ulp
apart; times 1e10 that is 2048, and past the ``%`` any residue.  Integers cast from floats were
compared as floats of the program's dtype only; they are now also compared against the integers
of the other orders the oracle folds (``Case.order_spread``).  An integer no order gives still
fails."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from fuzz import checks  # noqa: E402
from fuzz.program import generate  # noqa: E402
from fuzz.runner import job_for  # noqa: E402


def test_the_index_order_integers_are_not_a_mismatch():
    seed = 710231
    results = checks.run_checks(job_for(generate(seed), seed, checks=("forward",)))
    assert [r["status"] for r in results] == ["ok"], results


def test_an_integer_no_order_gives_still_fails():
    seed = 710231
    case = checks.Case(job_for(generate(seed), seed, checks=("forward",)))
    want, ref64 = case._reference()
    k = [t.name for t in case.outputs].index("k0")
    got = [np.array(w, copy=True) for w in want]
    got[k][2, 3] = (got[k][2, 3] + 2) % 5 + 7  # (no order's residue mod 5)
    with pytest.raises(checks.Mismatch, match="k0"):
        case._compare_all("forward", got, want, ref64)
