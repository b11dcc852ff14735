"""isl results back to IR (tensorad.poly.to_expr / domain): conversions checked point by point."""

from __future__ import annotations

import itertools

import islpy as isl
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples
from tensorad.simplify.algebra.consts import evaluate_scalar

import tensorad as ta
from tensorad.ir import var
from tensorad.poly.affine import IndexSpace
from tensorad.poly.domain import IndexSet
from tensorad.poly.to_expr import set_to_cond


def _points(variables):
    return itertools.product(*(range(v.lo, v.hi) for v in variables))


def test_flatten_index_is_solved_as_a_linear_function():
    a1, a2, a3, k = var("ax1", 0, 10), var("ax2", 0, 20), var("ax3", 0, 25), var("k", 0, 5000)
    dom = IndexSet.from_conditions([a1, a2, a3, k], [a1 == (k // 500) % 10, a2 == (k // 25) % 20,
                                                      a3 == k % 25])
    sol = dom.solve(k)
    assert (sol.pieces, sol.divs) == (1, 0)
    env = {a1: 3, a2: 7, a3: 11}
    assert evaluate_scalar(sol.value, env) == 3 * 500 + 7 * 25 + 11
    assert dom.project_out(k).gist(IndexSet.box([a1, a2, a3])).to_cond() is ta.const(True)


def test_strided_window_prefers_the_solution_without_divisions():
    h, oh, kh = var("h", 0, 9), var("oh", 0, 4), var("kh", 0, 3)
    dom = IndexSet.from_conditions([h, oh, kh], [h == 2 * oh + kh])
    by_kh, by_oh = dom.solve(kh), dom.solve(oh)
    assert by_kh.divs == 0 and by_oh.divs == 1
    for hv, ohv, khv in _points([h, oh, kh]):
        if hv == 2 * ohv + khv:
            assert evaluate_scalar(by_kh.value, {h: hv, oh: ohv}) == khv
            assert evaluate_scalar(by_oh.value, {h: hv, kh: khv}) == ohv
    assert dom.solve(h) is not None and IndexSet.from_conditions([h, oh], []).solve(oh) is None


def test_set_to_cond_holds_exactly_on_the_set():
    h, kh = var("h", 0, 9), var("kh", 0, 3)
    space = IndexSpace([h, kh])
    cases = [((h + kh) % 2 == 0) & (kh <= h), (h - 3 * kh >= 1) | (h == 0), (h // 3 == kh)]
    for c in cases:
        s = space.box().intersect(space.cond(c))
        back = set_to_cond(s, space.vars)
        for hv, kv in _points([h, kh]):
            env = {h: hv, kh: kv}
            assert evaluate_scalar(back, env) == evaluate_scalar(c, env), (c, back, env)


def test_lower_bounds_give_the_window_footprint():
    h, oh = var("h", 0, 9), var("oh", 0, 4)
    dom = IndexSet.from_conditions([h, oh], [2 * oh <= h, h <= 2 * oh + 2])
    assert dom.const_range(oh) == (0, 3)
    (lo, extent), *_ = dom.lower_bounds(oh, [h])
    assert extent == 2
    for hv, ohv in _points([h, oh]):
        if 2 * ohv <= hv <= 2 * ohv + 2:
            assert 0 <= ohv - evaluate_scalar(lo, {h: hv}) < extent


def test_rational_values_are_read_without_to_python():
    from tensorad.poly.to_expr import val_to_fraction

    v = isl.Val.int_from_si(isl.DEFAULT_CONTEXT, 3).div(isl.Val.int_from_si(isl.DEFAULT_CONTEXT, 4))
    assert val_to_fraction(v) == 0.75


_RANGES = st.tuples(st.sampled_from([0, 1, -3, 5, 2**70]), st.integers(-2, 40))


@given(st.lists(_RANGES, min_size=1, max_size=6), st.data())
@settings(max_examples=examples(60), deadline=None)
def test_a_box_is_the_intersection_of_its_ranges(ranges, data):
    # IndexSpace builds a box from constraints directly; it must be the set (and the printed
    # set, which the optimizer turns into conditions) that intersecting each range gives
    vs = [var(f"v{k}", lo, lo + n) for k, (lo, n) in enumerate(ranges)]
    space = IndexSpace(vs)
    sub = data.draw(st.lists(st.sampled_from(vs), unique=True))
    built = space.box(sub)
    expected = space.universe()
    for v in sub:
        pa = space.aff(v)
        expected = expected.intersect(pa.ge_set(space.constant(v.lo)))
        expected = expected.intersect(pa.lt_set(space.constant(v.hi)))
    assert built.is_equal(expected) and str(built) == str(expected)


@settings(max_examples=examples(200), deadline=None, derandomize=True)
@given(st.integers(-(1 << 80), 1 << 80), st.integers(1, 1 << 70) | st.integers(1, 12))
def test_isl_values_read_back_exactly_with_one_call(num, den):
    # an isl rational is read from its one text (``n`` or ``n/d``): an int when integral, the
    # exact Fraction otherwise -- not as numerator and denominator values, five calls into
    # isl and two of islpy's ``to_python`` (each printing the value again)
    from fractions import Fraction

    from tensorad.poly.to_expr import val_to_fraction

    want = Fraction(num, den)
    v = isl.Val(f"{want.numerator}/{want.denominator}")
    printed = []
    real = isl.Val.to_python
    isl.Val.to_python = lambda self: printed.append(self) or real(self)
    try:
        out = val_to_fraction(v)
    finally:
        isl.Val.to_python = real
    assert out == want and type(out) is (int if want.denominator == 1 else Fraction)
    assert not printed


def test_an_infinite_isl_value_is_not_a_number():
    import pytest

    from tensorad.poly.to_expr import val_to_fraction

    for v in (isl.Val.infty(isl.DEFAULT_CONTEXT), isl.Val.neginfty(isl.DEFAULT_CONTEXT),
              isl.Val.nan(isl.DEFAULT_CONTEXT)):
        with pytest.raises(ValueError):
            val_to_fraction(v)



def test_affine_part_projects_gather_indices_out_and_keeps_what_bounds_the_axes():
    """``clip(W[0], 3) == 2 i && clip(W[0], 3) == j`` reads data in each conjunct; over ``(i, j)`` it keeps
    what holds for some value of the gather index, ``j == 2 i`` below 3 (checked point by point), and a
    condition without a gather index says nothing."""
    from tensorad.ir.expr import TRUE, data_index
    from tensorad.poly.domain import affine_part

    i, j = var("i", 0, 4), var("j", 0, 9)
    W = ta.placeholder((1,), "int32", "W")
    w = data_index(W[0], 3, "clip")
    got = affine_part((w == i * 2) & (w == j), [i, j])
    want = {(a, b) for a, b in _points([i, j]) if any(c == 2 * a and c == b for c in range(3))}
    assert {(a, b) for a, b in _points([i, j]) if evaluate_scalar(got, {i: a, j: b})} == want
    assert affine_part(W[0] == i, [i]) is TRUE
