"""The fuzz oracle's conditioning allowance for fast-math kernels (fuzz/checks.Case.rounding_noise).

Fast-math may reassociate a reduction; its rounding then differs from ``evaluate``'s by a few ulps
of the terms.  In ``cos(prod of x1 over 51 points)``, the product near 1e9,
those ulps become 6e-8 in the cosine, over float64's tolerance, and the check would fail although
the kernel is right (it passes with ``fastmath=False``).  A mismatch of a fast-math kernel is now
judged against how far ``evaluate``'s own value moves when the inputs move by a few ulps; a
well-conditioned element gets no allowance, so a wrong value still fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from fuzz import checks

SOURCE = """
import tensorad as ta
DT = 'float64'
x0 = ta.placeholder((3,), DT, name='x0')
x1 = ta.placeholder((), DT, name='x1')
r0 = ta.reduce_axis((0, 17), name='r0')
r1 = ta.reduce_axis((-1, 2), name='r1')
t0 = ta.compute((), lambda: ta.prod(x1[()], axis=[r0, r1]), name='t0')
t2 = ta.compute((), lambda: ta.cos(t0[()]), name='t2')
t3 = ta.compute((3,), lambda i: x0[i] * 2.0, name='t3')
INPUTS = [x0, x1]
TENSORS = [t0, t2, t3]
OUT = t2
"""


def _case(options=None):
    job = dict(source=SOURCE, source64=SOURCE, dtype="float64", options=options or {}, data="smooth",
               seed=103196, safe=True, checks=["forward"], all_outputs=True, calling="plain", torch=None)
    case = checks.Case(job)
    case.feed[case.inputs[1]] = np.array(1.5)  # 1.5 ** 51 = 9.6e8
    return case


def test_an_ill_conditioned_element_gets_an_allowance_a_well_conditioned_one_none():
    case = _case()
    want = checks._tuple(case.ta.evaluate(case.outputs, case.feed))
    noise = case.rounding_noise(want)
    assert float(noise[1]) > 1e-8  # cos of 9.6e8: ulps of the product are 1e-7 of the argument
    assert np.all(noise[2] <= 1e-14 * np.abs(want[2]) + 1e-300)  # 2 x: exact up to an ulp


def test_a_wrong_value_still_fails_where_the_element_is_well_conditioned():
    case = _case()
    want = checks._tuple(case.ta.evaluate(case.outputs, case.feed))
    got = [np.array(w, copy=True) for w in want]
    got[2] = got[2] + 1e-6 * np.abs(got[2])
    with pytest.raises(checks.Mismatch, match="t3"):
        case._compare_all("build", got, want, None)
    got = [np.array(w, copy=True) for w in want]
    got[1] = got[1] + 5e-8  # within the cosine's conditioning: rounding can do that
    case._compare_all("build", got, want, None)


def test_no_conditioning_allowance_without_fast_math():
    # (a strict kernel gets the order spread only, Case.order_spread: none here, the orders agree)
    case = _case({"fastmath": False})
    want = checks._tuple(case.ta.evaluate(case.outputs, case.feed))
    got = [np.array(w, copy=True) for w in want]
    got[1] = got[1] + 5e-8
    with pytest.raises(checks.Mismatch, match="t2"):
        case._compare_all("build", got, want, None)


CANCEL = """
import tensorad as ta
DT = 'float64'
a = ta.placeholder((4,), DT, name='a')
r = ta.reduce_axis((0, 4), name='r')
s = ta.compute((), lambda: ta.sum(a[r] * 1.0, axis=[r]), name='s')
t = ta.compute((), lambda: ta.tanh(s[()]), name='t')
INPUTS = [a]
TENSORS = [s, t]
OUT = t
"""


@pytest.mark.parametrize("seed", range(12))
def test_an_element_either_side_of_a_steep_point_is_found_by_every_draw(seed):
    # Tanh of a sum whose terms +-1e60 cancel in evaluate's order; an FMA keeps the
    # products unrounded and leaves 1e44 of them, so tanh may be -1 or 1.  A random draw moves the
    # sum up or down (half the draws each way); with its mirror image, every seed finds the
    # allowance of 2 (before, 2 draws missed it for a quarter of the seeds).
    job = dict(source=CANCEL, source64=CANCEL, dtype="float64", options={}, data="smooth", seed=seed,
               safe=True, checks=["forward"], all_outputs=True, calling="plain", torch=None)
    case = checks.Case(job)
    case.feed[case.inputs[0]] = np.array([1e60, 3e30, -1e60, 2e30])
    want = checks._tuple(case.ta.evaluate(case.outputs, case.feed))
    assert float(want[1]) == 1.0
    noise = case.rounding_noise(want)
    assert float(noise[1]) >= 2.0


def test_an_integer_decided_by_floats_may_move_as_far_as_its_noise():
    """The index of the maximum of ``sin`` of products near 1e41 (every ulp moves
    the sine anywhere) followed the kernel's product order.  An integer element passes where it
    equals another order's value or moves no more than a few ulps of the inputs move it; an
    element they do not move must still be exact."""
    want = np.array([13, 1, 20], np.int32)
    checks.compare("argmax", np.array([48, 1, 20], np.int32), want, "int32", noise=np.array([140.0, 0, 0]))
    checks.compare("argmax", np.array([48, 1, 20], np.int32), want, "int32",
                   alternatives=[np.array([48, 1, 55], np.int32)])
    for got, noise in (([48, 2, 20], [140.0, 0, 0]), ([48, 1, 20], [30.0, 0, 0])):
        with pytest.raises(checks.Mismatch):
            checks.compare("argmax", np.array(got, np.int32), want, "int32", noise=np.array(noise))
    with pytest.raises(checks.Mismatch):
        checks.compare("argmax", np.array([48, 1, 20], np.int32), want, "int32")
