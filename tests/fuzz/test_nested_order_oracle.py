"""The optimizer's regrouped sum judged against one-accumulator orders only.

``t1[i] = sum_{r1, r2} b1[0, r2]`` with ``b1 = (-1e30, 1e30, -0.938)`` (the ``huge`` data
profile): the optimizer computes ``9 * [sum_r2 b1]``, -8.44 -- the exact value -- while every
order the oracle tried folds all 27 terms into one accumulator, which loses the small term at
each step but the last: -0.938.  The oracle now also folds a sum axis by axis (partials over the
inner axes, then their sum: ``evaluate_in_order(..., "nested")``), the order the regrouping
computes.  Where the orders agree the allowance stays 0, so a missing term still fails."""

from __future__ import annotations

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tensorad as ta  # noqa: E402
from fuzz import checks  # noqa: E402
from fuzz.program import generate  # noqa: E402
from fuzz.runner import job_for  # noqa: E402


def test_a_regrouped_sum_of_cancelling_terms_is_not_a_mismatch():
    seed = 610834
    results = checks.run_checks(job_for(generate(seed), seed, checks=("optimizer",)))
    assert [r["status"] for r in results] == ["ok"], results


def test_orders_that_agree_leave_no_allowance():
    b1 = ta.placeholder((1, 17), "float64", name="b1")
    r1, r2 = ta.reduce_axis((-1, 8), name="r1"), ta.reduce_axis((0, 3), name="r2")
    t1 = ta.compute((9,), lambda i0: ta.sum(b1[0, r2], axis=[r1, r2]), name="t1")
    feed = {b1: np.linspace(0.5, 2.0, 17).reshape(1, 17)}
    want = [ta.evaluate(t1, feed)]
    job = dict(source="import tensorad as ta\nINPUTS = []\nTENSORS = []\nOUT = None\n", source64=None,
               dtype="float64", options={}, data="smooth", seed=1, checks=[])
    case = checks.Case({**job, "source64": job["source"]})
    noise, alternatives = case.order_spread([t1], feed, want)
    assert np.all(noise[0] <= 1e-12 * np.abs(want[0]))
    wrong = want[0] * 8 / 9  # a term missing in every element
    try:
        checks.compare("t1", wrong, want[0], "float64", noise=noise[0], alternatives=alternatives[0])
    except checks.Mismatch:
        pass
    else:
        raise AssertionError("a missing term passed")
