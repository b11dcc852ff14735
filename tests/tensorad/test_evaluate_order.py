"""``evaluate_in_order``: ``ta.evaluate`` with its sums and products folded one term at a time.

Each order is an IEEE rounding of the same formula; the values below are worked by hand (the
cancellation ``1 + 1e100 - 1e100`` is 0 left to right and 1 right to left), so the oracle is
the arithmetic, not tensorad.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.reference import ORDERS, evaluate_in_order


def _sum_program(n: int, where=None, dtype: str = "float64"):
    X = ta.placeholder((n,), dtype, name="X")
    k = ta.reduce_axis((0, n), name="k")
    S = ta.compute((), lambda: ta.sum(X[k], axis=k, where=where(k) if where else None), name="S")
    return X, S


def test_sequential_and_reversed_fold_one_term_at_a_time():
    X, S = _sum_program(3)
    x = np.array([1.0, 1e100, -1e100])
    assert float(evaluate_in_order(S, {X: x}, "sequential")) == 0.0  # (1 + 1e100) - 1e100
    assert float(evaluate_in_order(S, {X: x}, "reversed")) == 1.0    # (-1e100 + 1e100) + 1
    assert float(evaluate_in_order(S, {X: x}, "numpy")) == float(ta.evaluate(S, {X: x}))


def test_masked_points_are_skipped_in_order():
    X, S = _sum_program(4, where=lambda k: k != 1)
    x = np.array([1.0, 5.0, 1e100, -1e100])
    assert float(evaluate_in_order(S, {X: x}, "sequential")) == 0.0
    assert float(evaluate_in_order(S, {X: x}, "reversed")) == 1.0


def test_several_reduce_axes_fold_in_c_order_and_outer_points_apart():
    X = ta.placeholder((2, 2, 3), "float64", name="X")
    a = ta.reduce_axis((0, 2), name="a")
    b = ta.reduce_axis((0, 3), name="b")
    S = ta.compute((2,), lambda i: ta.sum(X[a, i, b], axis=[a, b]), name="S")
    x = np.zeros((2, 2, 3))
    x[0, 0] = [1.0, 1e100, 0.0]  # row i=0, C order over (a, b): 1, 1e100, 0, -1e100, 0, 0
    x[1, 0] = [-1e100, 0.0, 0.0]
    x[:, 1] = [[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]  # row i=1: 2, 0, 0, 0, 0, 0
    seq = evaluate_in_order(S, {X: x}, "sequential")
    rev = evaluate_in_order(S, {X: x}, "reversed")
    np.testing.assert_array_equal(seq, [0.0, 2.0])
    np.testing.assert_array_equal(rev, [1.0, 2.0])


def test_products_are_ordered_and_max_is_not_touched():
    X = ta.placeholder((3,), "float64", name="X")
    k = ta.reduce_axis((0, 3), name="k")
    P = ta.compute((), lambda: ta.prod(X[k], axis=k), name="P")
    M = ta.compute((), lambda: ta.max(X[k], axis=k), name="M")
    x = np.array([1e300, 1e300, 1e-300])
    p_seq, m_seq = evaluate_in_order([P, M], {X: x}, "sequential")
    p_rev, m_rev = evaluate_in_order([P, M], {X: x}, "reversed")
    assert float(p_seq) == np.inf          # 1e300 * 1e300 overflows first
    assert float(p_rev) == pytest.approx(1e300, rel=1e-12)  # 1e-300 * 1e300 first
    assert float(m_seq) == float(m_rev) == 1e300


def test_float32_rounds_in_float32_and_equal_terms_spread_by_order():
    # 1/3 sixteen times in float32: pairwise is exact at each level of the tree, index order is not
    X, S = _sum_program(16, dtype="float32")
    x = np.full(16, 1 / 3, np.float32)
    seq = np.float32(0)
    for v in x:
        seq = np.float32(seq + v)
    got = evaluate_in_order(S, {X: x}, "sequential")
    assert got.dtype == np.float32 and got == seq


@pytest.mark.parametrize("outer, extent", [((0,), 3), ((2,), 0), ((0,), 0)])
def test_empty_outputs_and_empty_sums(outer, extent):
    X = ta.placeholder((2, 3), "float32", name="X")
    k = ta.reduce_axis((0, extent), name="k")
    S = ta.compute(outer, lambda i: ta.sum(X[i, k], axis=k), name="S")
    for order in ORDERS:
        got = evaluate_in_order(S, {X: np.ones((2, 3), np.float32)}, order)
        np.testing.assert_array_equal(got, np.zeros(outer, np.float32))


def test_an_unknown_order_is_a_clear_error():
    X, S = _sum_program(2)
    with pytest.raises(ValueError, match=r"order must be one of .*'sequential'.*got 'pairwise'"):
        evaluate_in_order(S, {X: np.zeros(2)}, "pairwise")
    assert ORDERS[0] == "numpy"


def test_mixed_orders_fold_neighbours_apart_and_move_them_by_their_rounding():
    # each element of a reduction in one order by its parity, then up or down by n/2 ulps:
    # elements equal in every single order (neither reads the axis between them) differ
    X = ta.placeholder((3,), "float64", name="X")
    k = ta.reduce_axis((0, 3), name="k")
    S = ta.compute((2, 2), lambda i, j: ta.sum(X[k], axis=k), name="S")
    x = np.array([1.0, 1e100, -1e100])
    step = 3 * np.finfo(np.float64).eps / 2
    odd = [[False, True], [True, False]]
    for order, up in (("mixed", odd), ("mixed-odd", np.logical_not(odd))):
        got = evaluate_in_order(S, {X: x}, order)
        want = np.where(up, 1.0 * (1 + step), 0.0)  # odd points reversed (1), even sequential (0)
        np.testing.assert_array_equal(got, want)


def test_a_bare_custom_product_follows_the_order_and_a_selecting_one_does_not():
    myprod = ta.comm_reducer(lambda a, b: a * b, lambda t: ta.const(1, t), name="myprod")
    argmaxish = ta.comm_reducer(lambda a, b: ta.select(a >= b, a, b), lambda t: ta.min_value(t), name="mx")
    X = ta.placeholder((4,), "float32", name="X")
    k = ta.reduce_axis((0, 4), name="k")
    P = ta.compute((2,), lambda i: myprod(X[k], axis=k), name="P")
    M = ta.compute((2,), lambda i: argmaxish(X[k], axis=k), name="M")
    x = np.array([3.0, 1 / 3, 7.0, 1 / 7], np.float32)
    seq = np.float32(1)
    for v in x:
        seq = np.float32(seq * v)
    rev = np.float32(1)
    for v in x[::-1]:
        rev = np.float32(rev * v)
    assert float(evaluate_in_order(P, {X: x}, "sequential")[0]) == seq
    assert float(evaluate_in_order(P, {X: x}, "reversed")[0]) == rev
    mixed = evaluate_in_order(P, {X: x}, "mixed")
    assert mixed[0] < mixed[1]  # (even: forward, moved down; odd: reversed, moved up)
    for order in ORDERS:
        np.testing.assert_array_equal(evaluate_in_order(M, {X: x}, order), [7.0, 7.0])


def test_nested_folds_the_inner_axis_into_partials_first():
    # sum_{a, b} X[b] over a in 3, b in 3 with X = (-1e30, 1e30, 1): one accumulator loses the 1
    # at every step but the last; partials over b are 1 each, and their sum is 3
    X = ta.placeholder((3,), "float64", name="X")
    a, b = ta.reduce_axis((0, 3), name="a"), ta.reduce_axis((0, 3), name="b")
    S = ta.compute((), lambda: ta.sum(X[b], axis=[a, b]), name="S")
    x = np.array([-1e30, 1e30, 1.0])
    assert float(evaluate_in_order(S, {X: x}, "sequential")) == 1.0
    assert float(evaluate_in_order(S, {X: x}, "nested")) == 3.0


def test_nested_is_sequential_over_one_axis_and_respects_the_mask():
    X, S = _sum_program(4, where=lambda k: k != 1)
    x = np.array([1.0, 5.0, 1e100, -1e100])
    assert float(evaluate_in_order(S, {X: x}, "nested")) == 0.0
    X2 = ta.placeholder((2, 3), "float64", name="X2")
    i, j = ta.reduce_axis((0, 2), name="i"), ta.reduce_axis((0, 3), name="j")
    S2 = ta.compute((), lambda: ta.sum(X2[i, j], axis=[i, j], where=(i + j) % 2 == 0), name="S2")
    x2 = np.array([[1e100, 7.0, -1e100], [9.0, 2.0, 11.0]])
    # kept: (0, 0), (0, 2), (1, 1); partials per i: 1e100 - 1e100 = 0, then 2
    assert float(evaluate_in_order(S2, {X2: x2}, "nested")) == 2.0
