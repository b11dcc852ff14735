"""The fuzz oracle's allowance for the summation order (fuzz/checks.Case.order_spread).

A layer norm of 16 elements that all equal 1.22e120 gave 1.0
in every build (``fastmath=False`` too) where ``ta.evaluate`` gave 0.  The kernel's index-order
sum puts the mean an ulp off the common value, so ``(x - mean) / sqrt(var + eps)`` is
``ulp / ulp = 1``; NumPy's pairwise sum of 16 equal values is exact.  Both are IEEE roundings of
one formula.  The oracle now evaluates the program again with its sums folded in index order and
in reverse and allows each element its spread: the program passes because an index-order evaluation
gives the kernel's value, and a kernel whose sum misses a term still fails wherever the orders
agree.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from fuzz import checks

# The program as the fuzzer wrote it (the generator's prelude of reducers left out).
SEED_SOURCE = """
import tensorad as ta
DT = 'float64'
x0 = ta.placeholder((16, 1), DT, name='x0')
t0 = ta.compute((3,), lambda i0: ta.cast(DT, (i0 + -3) // 2), name='t0')
t1 = ta.compute((2, 3), lambda i0, i1: ta.if_then_else((i0 + 2 >= 0) & (i0 + 2 < 1), x0[i0, i0 + 2], 0.0),
                name='t1')
r0 = ta.reduce_axis((0, 2), name='r0')
r1 = ta.reduce_axis((0, 3), name='r1')
t2 = ta.compute((16,), lambda i0: ta.prod(x0[(r1 + 1) // 3 % 16, 0 - r1 % 1], axis=[r0, r1]), name='t2')
L3 = ta.topi.nn.layer_norm(t2, ndim=1)
t3 = ta.compute((2, 7), lambda i0, i1: ta.if_then_else((i1 + 2 >= 0) & (i1 + 2 < 16), L3[i1 + 2], -1.0),
                name='t3')
INPUTS = [x0]
TENSORS = [t0, t1, t2, L3, t3]
OUT = t3
"""

# The same arithmetic written out (a mean, a centred variance, a normalization), with the number
# of terms the mean's sum reads as a parameter: 16 is right, 15 plants a sum missing one term.
NORM_SOURCE = """
import tensorad as ta
DT = 'float64'
x = ta.placeholder((16,), DT, name='x')
k = ta.reduce_axis((0, TERMS), name='k')
m = ta.compute((), lambda: ta.sum(x[k], axis=k) * (1.0 / 16), name='m')
j = ta.reduce_axis((0, 16), name='j')
v = ta.compute((), lambda: ta.sum((x[j] - m[()]) * (x[j] - m[()]), axis=j) * (1.0 / 16), name='v')
y = ta.compute((16,), lambda i: (x[i] - m[()]) / ta.sqrt(v[()] + 1e-5), name='y')
INPUTS = [x]
TENSORS = [m, v, y]
OUT = y
"""

SEED_X0 = np.full((16, 1), 0.5)
SEED_X0[0, 0], SEED_X0[1, 0] = -1e30, -1.1052004540  # t2 = (x0[0]^2 x0[1])^2 = 1.22e120 everywhere


def _job(source: str, options: dict, checks_=("forward",)) -> dict:
    return dict(source=source, source64=source, dtype="float64", options=options, data="huge",
                seed=131017, safe=False, checks=list(checks_), all_outputs=True, calling="plain",
                torch=None, triage=False)


def _norm_case(terms: int, options: dict, x: np.ndarray) -> checks.Case:
    case = checks.Case(_job(NORM_SOURCE.replace("TERMS", str(terms)), options))
    case.feed[case.inputs[0]] = x
    return case


CONSTANT = np.full(16, 1.2214680e120)
ORDINARY = np.linspace(-1.0, 2.0, 16) ** 3


def test_the_premise_the_constant_vector_is_order_sensitive():
    case = _norm_case(16, {}, CONSTANT)
    y = case.outputs[2]
    assert np.all(ta.evaluate(y, case.feed) == 0.0)  # pairwise: the mean is exact
    from tensorad.reference import evaluate_in_order
    assert np.all(np.abs(evaluate_in_order(y, case.feed, "sequential")) == 1.0)  # ulp / ulp


@pytest.mark.parametrize("fastmath", [True, False])
def test_equal_terms_layer_norm_passes_forward_and_checked(fastmath):
    case = checks.Case(_job(SEED_SOURCE, {"fastmath": fastmath, "num_threads": 2,
                                          "parallel_min_work": 0}))
    case.feed[case.inputs[0]] = SEED_X0
    t2, L3 = case.ns["t2"], case.ns["L3"]
    assert np.all(ta.evaluate(t2, case.feed) == ta.evaluate(t2, case.feed)[0])  # 16 equal terms
    want = checks._tuple(ta.evaluate(case.outputs, case.feed))
    spread, alternatives = case.order_spread(case.outputs, case.feed, want)
    assert np.all(spread[3] >= np.abs(ta.build([L3], [case.inputs[0]], fastmath=fastmath)(SEED_X0)))
    case.forward()
    case.checked()


@pytest.mark.parametrize("fastmath", [True, False])
def test_an_order_sensitive_right_answer_passes(fastmath):
    case = _norm_case(16, {"fastmath": fastmath}, CONSTANT)
    want = checks._tuple(ta.evaluate(case.outputs, case.feed))
    from tensorad.reference import evaluate_in_order
    got = checks._tuple(evaluate_in_order(case.outputs, case.feed, "sequential"))
    assert not np.array_equal(got[2], want[2])
    case._compare_all("build", got, want, None)
    case.forward()  # the real kernel, whatever order it sums in


@pytest.mark.parametrize("fastmath", [True, False])
@pytest.mark.parametrize("x", [CONSTANT, ORDINARY], ids=["constant", "ordinary"])
def test_a_kernel_whose_sum_misses_a_term_still_fails(fastmath, x):
    case = _norm_case(16, {"fastmath": fastmath}, x)
    planted = _norm_case(15, {"fastmath": fastmath}, x)
    got = checks._tuple(ta.build(planted.outputs, planted.inputs, fastmath=fastmath)(x))
    want = checks._tuple(ta.evaluate(case.outputs, case.feed))
    # on the constant vector the normalized output of the planted kernel is 1 as well (the spread
    # covers it: order decides that element); its mean is 15/16 of the value, far outside the
    # mean's spread of an ulp or two
    with pytest.raises(checks.Mismatch, match=r"build m: .*got .*want"):
        case._compare_all("build", got, want, None)


def test_a_well_conditioned_element_gets_no_spread():
    case = _norm_case(16, {}, ORDINARY)
    want = checks._tuple(ta.evaluate(case.outputs, case.feed))
    spread, _ = case.order_spread(case.outputs, case.feed, want)
    for s, w in zip(spread, want):
        assert np.all(s <= 1e-14 * (np.abs(w) + 1.0))


def test_an_order_that_overflows_allows_a_non_finite_value():
    source = """
import tensorad as ta
DT = 'float64'
x = ta.placeholder((3,), DT, name='x')
k = ta.reduce_axis((0, 3), name='k')
s = ta.compute((), lambda: ta.sum(x[k], axis=k), name='s')
t = ta.compute((), lambda: x[0] * 0.5, name='t')
INPUTS = [x]
TENSORS = [s, t]
OUT = s
"""
    case = checks.Case(_job(source, {"fastmath": False}))
    case.feed[case.inputs[0]] = np.array([-1e308, 1e308, 1e308])  # reversed: 1e308 + 1e308 = inf
    want = checks._tuple(ta.evaluate(case.outputs, case.feed))
    assert float(want[0]) == 1e308
    case._compare_all("build", [np.array(np.inf), want[1]], want, None)  # the reversed order's inf
    with pytest.raises(checks.Mismatch, match="non-finite values differ"):
        case._compare_all("build", [np.array(-np.inf), want[1]], want, None)  # no order gives -inf
    with pytest.raises(checks.Mismatch, match="build s: at"):
        case._compare_all("build", [np.array(0.0), want[1]], want, None)  # an order's inf allows no 0
    with pytest.raises(checks.Mismatch, match="non-finite values differ"):
        case._compare_all("build", [want[0], np.array(np.inf)], want, None)


def test_optimizer_and_split_comparisons_allow_the_order_spread_too():
    case = _norm_case(16, {}, CONSTANT)
    m, y = case.outputs[0], case.outputs[2]
    from tensorad.reference import evaluate_in_order
    other = evaluate_in_order([m, y], case.feed, "sequential")
    case._compare_orders("optimized", other, [m, y], case.feed, strong_zero=True)
    wrong = [other[0] * (15 / 16), other[1]]
    with pytest.raises(checks.Mismatch, match="optimized m"):
        case._compare_orders("optimized", wrong, [m, y], case.feed, strong_zero=True)


# A custom product equal along i1 (it never reads it),
# compared with itself: fast math reassociated the 17 factors of t0[0, 0] and t0[0, 1]
# differently (1.6 ulps apart), so the select took the other branch; every single order
# evaluates both alike.  The mixed orders fold neighbours apart and find the flip.
FLIP_SOURCE = """
import tensorad as ta
DT = 'float32'
MYPROD = ta.comm_reducer(lambda x, y: x * y, lambda t: ta.const(1, t), name="myprod")
x0 = ta.placeholder((5,), DT, name='x0')
r0 = ta.reduce_axis((1, 18), name='r0')
t0 = ta.compute((4, 3), lambda i0, i1: MYPROD(x0[(i0 * 2 + r0) % 5] / (ta.abs(x0[i0]) + 1.0), axis=[r0]),
                name='t0')
t2 = ta.compute((2, 5), lambda i1, i2: ta.select(t0[0, 0] >= t0[i1, 1], t0[0, 0], 2.0), name='t2')
INPUTS = [x0]
TENSORS = [t0, t2]
OUT = t2
"""


def test_a_comparison_of_one_reduction_reassociated_two_ways_may_flip():
    case = checks.Case({**_job(FLIP_SOURCE, {}), "data": "unit", "dtype": "float32"})
    t2 = case.ns["t2"]
    want = checks._tuple(ta.evaluate(case.outputs, case.feed))
    assert np.all(want[1][0] != 2.0)  # t0[0, 0] >= t0[0, 1]: equal in evaluate
    flipped = want[1].copy()
    flipped[0] = 2.0  # what a kernel that ordered t0[0, 1]'s factors apart computes
    _, alternatives = case.order_spread(case.outputs, case.feed, want)
    assert any(np.all(a[0] == 2.0) for a in alternatives[1])  # (a mixed order flips it)
    case._compare_orders("build", [want[0], flipped], case.outputs, case.feed)  # (no Mismatch)
    assert t2.shape == (2, 5)
