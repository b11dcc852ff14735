"""The fuzzer's finite-difference oracle checks itself before it calls a mismatch.

Four seeds were reported as wrong gradients when the oracle was wrong: 13513 and 14253
(tensorad's reverse gradients, -704.88 and a prod of x^51, were right; the oracle summed
outputs of magnitude 1e19 and 1e58 with the head before subtracting, and the difference
vanished in rounding), 12677 (``sin`` of a product near 1e234: no step can follow it) and
14838 (``4.5 x`` beside a 51-fold product of about 1e20: its ulps drown the difference at
small steps; a step of 4e-3 judges it, and tensorad agrees).  The oracle subtracts outputs
element by element, and where a derivative disagrees it takes the differences again with
twice the step: a mismatch needs the two estimates to agree and their rounding noise to be
small, at the base step or at a larger one.  Elements no step judges are counted.  The unit
tests below show it still catches a wrong derivative wherever the differences are stable.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from fuzz.checks import Mismatch, compare_fd, run_checks  # noqa: E402
from fuzz.program import generate  # noqa: E402
from fuzz.runner import job_for  # noqa: E402

TRUE = np.array([3.0, -2.0, 0.0, 1e3, 0.25])


def _smooth(eps):
    """Central differences of a smooth function: the derivative plus an O(eps^2) error, and
    their rounding noise (values of magnitude 1: an ulp of 1 over 2 eps)."""
    return TRUE + 0.3 * eps * eps, np.full(TRUE.shape, 2.2e-16 / eps)


def test_a_wrong_derivative_is_a_mismatch_where_the_differences_are_stable():
    compare_fd("d", TRUE.copy(), _smooth, 1e-6, rtol=1e-4)  # right: passes
    for k in range(TRUE.size):
        wrong = TRUE.copy()
        wrong[k] += 1.0
        with pytest.raises(Mismatch, match=rf"at \[(np\.int64\()?{k}\)?\]"):
            compare_fd("d", wrong, _smooth, 1e-6, rtol=1e-4)
    nan = TRUE.copy()
    nan[1] = np.nan
    with pytest.raises(Mismatch, match="non-finite"):
        compare_fd("d", nan, _smooth, 1e-6, rtol=1e-4)


def test_unconverged_differences_are_no_verdict_and_the_other_elements_still_count():
    def kink(eps):  # element 2 has a kink inside every step window: its estimate moves with eps
        fd, noise = _smooth(eps)
        fd[2] = 5.0 + 3.0 * np.log2(eps / 1e-6)
        return fd, noise

    got = TRUE.copy()
    compare_fd("d", got, kink, 1e-6, rtol=1e-4)  # only element 2 disagrees, and it is unstable
    got[4] = 7.0
    with pytest.raises(Mismatch, match=r"1 elements whose differences decide nothing.*at \[(np\.int64\()?4"):
        compare_fd("d", got, kink, 1e-6, rtol=1e-4)


def test_a_centred_kink_is_no_verdict_and_a_smooth_curvature_is_no_kink():
    """``minimum(a, b)`` at ``a == b`` (bfloat16 data ties often): the central
    difference is 1/2 at every step, so the steps agree, but the forward and backward
    differences are 0 and 1 at every step -- their gap does not shrink with the step: a kink,
    no verdict (the kernel's one-sided rule says 1).  A smooth function's gap grows with the
    step (``s f''``): a wrong derivative there is still a mismatch."""
    def with_skew(eps, kink_at=None, curvature=50.0):
        fd, noise = _smooth(eps)
        skew = np.full(TRUE.shape, curvature * eps)  # s |f''|
        if kink_at is not None:
            fd[kink_at] = 0.5
            skew[kink_at] = 1.0
        return fd, noise, skew

    got = TRUE.copy()
    got[2] = 1.0  # the kernel's side of the tie
    assert compare_fd("d", got, lambda e: with_skew(e, kink_at=2), 1e-6, rtol=1e-4) == 1
    got[0] += 1.0  # a wrong smooth element beside it is still called
    with pytest.raises(Mismatch, match=r"at \[(np\.int64\()?0"):
        compare_fd("d", got, lambda e: with_skew(e, kink_at=2), 1e-6, rtol=1e-4)
    wrong = TRUE.copy()
    wrong[3] += 1.0  # strong curvature, no kink: decided, a mismatch
    with pytest.raises(Mismatch, match=r"at \[(np\.int64\()?3"):
        compare_fd("d", wrong, lambda e: with_skew(e, curvature=1e4), 1e-6, rtol=1e-4)


def test_huge_unstable_garbage_does_not_widen_the_tolerance_of_the_others():
    def garbage(eps):  # element 0 is noise of magnitude 1e9 (a huge sum's rounding)
        fd, noise = _smooth(eps)
        fd[0] = 1e9 * (-3.0) ** round(np.log2(eps / 1e-6))
        return fd, noise

    got = TRUE.copy()
    got[1] += 1.0  # off by 1 at a scale of 1e3: a mismatch at rtol 1e-4
    with pytest.raises(Mismatch, match=r"at \[(np\.int64\()?1\)?\]"):
        compare_fd("d", got, garbage, 1e-6, rtol=1e-4)


def test_differences_drowned_in_rounding_noise_are_no_verdict_unless_a_larger_step_decides():
    def quantized(eps):  # element 3 sits beside a huge constant: its ulps swamp small steps
        fd, noise = _smooth(eps)
        noise[3] = 100 * 1e-6 / eps  # 100 at eps = 1e-6, 1.6 at 64 eps, 0.024 at 4096 eps
        if eps < 2e-3:
            fd[3] = TRUE[3] + 40.0  # at small steps both estimates are equally wrong
        return fd, noise

    compare_fd("d", TRUE.copy(), quantized, 1e-6, rtol=1e-4)  # decided at 4096 eps: right
    wrong = TRUE.copy()
    wrong[3] += 7.0
    with pytest.raises(Mismatch, match=r"at \[(np\.int64\()?3\)?\]"):
        compare_fd("d", wrong, quantized, 1e-6, rtol=1e-4)

    def drowned(eps):  # no step decides element 3: no verdict there, the others still count
        fd, noise = quantized(eps)
        noise[3] = np.inf
        return fd, noise

    compare_fd("d", wrong, drowned, 1e-6, rtol=1e-4)
    wrong[0] += 1.0
    with pytest.raises(Mismatch, match=r"decide nothing.*at \[(np\.int64\()?0\)?\]"):
        compare_fd("d", wrong, drowned, 1e-6, rtol=1e-4)


@pytest.mark.parametrize("seed,checks", [(13513, ["reverse"]), (14253, ["reverse"]), (14838, ["reverse"]),
                                         (12677, ["reverse", "hvp"])])
def test_programs_finite_differences_cannot_judge_pass(seed, checks):
    job = {**job_for(generate(seed, forms=False), seed, checks), "triage": False}
    assert job["safe"] and job["checks"] == checks
    results = run_checks(job)
    assert [r["status"] for r in results] == ["ok"] * len(checks), results
    if seed == 12677:  # the element no step can judge is counted, not silent (14838: judged at 4096 eps)
        assert all(r.get("undecided", 0) >= 1 for r in results), results
    else:
        assert not any(r.get("undecided") for r in results), results


def test_a_step_function_of_the_data_gets_no_finite_differences():
    """The output is float(int64(x0 * 1e10) * 2), whose derivative is 0 wherever it
    exists (tensorad's answer, as PyTorch's and JAX's); central differences straddle its steps and
    give 5e10.  Such a program keeps the checks that need no differences."""
    prog = generate(81355, forms=False)
    assert prog.safe and prog.out_has_steps
    checks = job_for(prog, 81355)["checks"]
    assert "reverse" not in checks and "hvp" not in checks
    assert {"forward", "optimizer", "jvp", "split"} <= set(checks)
    # the flag follows the dependence: a program whose output reads no such cast keeps its oracle
    free = next(s for s in range(80000, 80400) if generate(s).steps and not generate(s).out_has_steps)
    assert "reverse" in job_for(generate(free), free)["checks"]
