"""Optimized code's zero of the other sign, judged as a wrong value.

``max_r pow(float16(-(if_then_else(g[r] in range, g[g[r]], 0.0))), x0[..]) * P`` (a custom
argmax-max-sum reducer, the AVX2 target): where the guard fails the base is ``-(0.0) = -0.0``
and ``pow(-0.0, -3)`` is ``-inf``, so the max is 9; ``OptimizeAndLiftNonzeronessConditions``
moves the negation into the branch (``-select(c, x, 0) = select(c, -x, 0)``), the base is
``+0.0``, the power ``+inf`` and the max inf.  docs/conventions.md licenses the sign of a zero
in optimized code, and so the sign of an infinity made from it; the oracle now also accepts,
for the optimizer's comparisons, the program evaluated with every zero ``+0``
(``evaluate_in_order(..., unsigned_zeros=True)``).  Oracles: NumPy's IEEE arithmetic written
here; a value neither reading gives still fails."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tensorad as ta  # noqa: E402
from fuzz import checks  # noqa: E402
from fuzz.program import generate  # noqa: E402
from fuzz.runner import job_for  # noqa: E402
from tensorad.reference import evaluate_in_order  # noqa: E402


def _signed_zero_program():
    x = ta.placeholder((4,), "float64", name="x")
    c = ta.placeholder((4,), "int32", name="c")
    z = ta.compute((4,), lambda i: -ta.if_then_else(c[i] > 0, x[i], 0.0), name="z")
    y = ta.compute((4,), lambda i: ta.power(z[i], -3.0) + 1.0 / z[i], name="y")
    return x, c, z, y


def test_unsigned_zeros_make_every_zero_positive():
    x, c, z, y = _signed_zero_program()
    feed = {x: np.array([2.0, -0.0, 0.5, 3.0]), c: np.array([1, 1, 0, 0], np.int32)}
    zi, yi = evaluate_in_order([z, y], feed, "numpy")
    zu, yu = evaluate_in_order([z, y], feed, "numpy", unsigned_zeros=True)
    with np.errstate(divide="ignore"):  # (NumPy's IEEE values, written out)
        want_z = np.array([-2.0, 0.0, -0.0, -0.0])
        want_y = np.power(want_z, -3.0) + 1.0 / want_z
    np.testing.assert_array_equal(zi, want_z)
    assert list(np.signbit(zi)) == [True, False, True, True]  # -(-0.0) is +0.0
    np.testing.assert_array_equal(yi, want_y)  # -inf at the -0.0s, +inf at the +0.0
    assert not np.signbit(zu[1:]).any() and zu[0] == -2.0
    np.testing.assert_array_equal(yu, [-0.125 - 0.5, np.inf, np.inf, np.inf])


def test_the_fuzzed_program_is_not_a_mismatch():
    seed = 760814
    job = job_for(generate(seed), seed, checks=("optimizer",))
    job["options"] = {**job["options"], "target": "llvm -mcpu=haswell"}
    job["data"] = "nasty"
    results = checks.run_checks(job)
    assert [r["status"] for r in results] == ["ok"], results


def test_a_value_neither_reading_gives_still_fails():
    x, c, z, y = _signed_zero_program()
    m = ta.reduce_axis((0, 4), name="m")
    top = ta.compute((), lambda: ta.max(y[m], axis=m), name="top")
    feed = {x: np.array([2.0, 1.0, 0.5, 3.0]), c: np.array([1, 1, 0, 0], np.int32)}
    want = ta.evaluate(top, feed)
    job = dict(source="import tensorad as ta\nINPUTS = []\nTENSORS = []\nOUT = None\n", source64=None,
               dtype="float64", options={}, data="smooth", seed=1, checks=[])
    case = checks.Case({**job, "source64": job["source"]})
    _, alternatives = case.order_spread([top], feed, [want], regrouped=True)
    assert np.any([np.isposinf(a) for a in alternatives[0]])  # (+0 -> +inf: the other reading)
    with pytest.raises(checks.Mismatch):
        checks.compare("top", np.array(5.0), want, "float64", alternatives=alternatives[0])
