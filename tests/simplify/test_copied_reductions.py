"""A product, a max, an argmax or a sum whose value is copied along an output axis it never reads
(a broadcast) differentiates once per distinct value: the head is summed over the copied axis first, so the
zero count, the nonzero product, the winner and its routing run over the distinct outputs, not
over every copy.  Without that, the gradient of ``Y[c, i] = prod_k X[i, k]`` did each of those
passes ``C`` times (10x the forward's work here).

Oracles: NumPy formulas of the gradients written here, float64 central differences; work counted by
hand on a pinned target."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tensorad as ta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzz.cheap import pinned, plain_work  # noqa: E402

C, R, K = 8, 6, 10  # copies, distinct rows, window


def _copied(reducer):
    X = ta.placeholder((R, K), "float64", "X")
    k = ta.reduce_axis((0, K), "k")
    Y = ta.compute((C, R), lambda c, i: reducer(X[i, k], axis=[k]), name="Y")
    H = ta.placeholder((C, R), "float64", "H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    return X, H, g


@pytest.mark.parametrize("name, hand", [
    # the zero count and the nonzero product (one pass each), the head summed over c, the routing
    ("prod", 2 * R * K + C * R + R * K),
    # the winner, the head summed over c, one scatter per distinct output, the tie routing (a pass
    # over the window of each distinct output when every point ties)
    ("max", R * K + C * R + R + R * K),
])
def test_a_copied_reduction_differentiates_once_per_distinct_value(name, hand):
    X, H, g = _copied(getattr(ta, name))
    work = ta.lower([g], [X, H], target=pinned()).work
    assert work <= 1.1 * hand, f"{name}: gradient work {work} > 1.1 x hand {hand}"


@pytest.mark.parametrize("name", ["prod", "max"])
def test_a_copied_reduction_gradient_matches_numpy(name):
    X, H, g = _copied(getattr(ta, name))
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 1.5, (R, K))
    x[0, 3] = 0.0  # a row with one zero: only that factor has a nonzero derivative
    x[1, 2] = x[1, 7] = 0.0  # two zeros: no derivative at all
    h = rng.standard_normal((C, R))
    hs = h.sum(axis=0)[:, None]
    if name == "prod":
        others = np.array([[np.prod(np.delete(row, k)) for k in range(K)] for row in x])
        want = hs * others
    else:
        want = hs * (x == x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(ta.build([g], [X, H])(x, h), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), want, rtol=1e-12, atol=1e-12)


def test_an_axis_of_one_element_is_not_a_copy():
    """A kept dimension (``keepdims=True``) is an axis of extent 1 the reduction never reads.
    Summing the head over one element saves nothing, and the reduction taken apart over it is
    a new one, computed again beside the forward's value that ``maximum`` reads.  Hand count:
    the min and its hit count (a pass over X each), the scatter per output, the tie routing (a
    pass over X when every point ties) and one copy of the gradient the kept axis makes."""
    X = ta.placeholder((R, K), "float64", "X")
    T = ta.topi.min(X, axis=0, keepdims=True)
    Z = ta.compute((K,), lambda j: ta.maximum(T[0, j], ta.const(0.0, "float64")), name="Z")
    H = ta.placeholder((K,), "float64", "H")
    (g,) = ta.JacobianRecursive(Z, [X], H)
    work = ta.lower([g], [X, H], target=pinned()).work
    assert work <= 4 * R * K + K, f"work {work}: the min computed twice"
    x = np.random.default_rng(2).standard_normal((R, K))
    h = np.random.default_rng(3).standard_normal(K)
    m = x.min(axis=0)
    want = (x == m) * np.where(m > 0, h, 0.0)
    np.testing.assert_allclose(ta.build([g], [X, H])(x, h), want, rtol=1e-12, atol=1e-12)


def test_copies_beside_an_axis_of_one_element():
    """``Y[c, o, i] = prod_k X[i, k]`` with ``o`` of extent 1: the head is summed over ``c``
    alone and the narrowed reduction keeps ``o`` (a narrowed head that dropped ``o`` read a
    variable of no axis and failed to build)."""
    X = ta.placeholder((R, K), "float64", "X")
    k = ta.reduce_axis((0, K), "k")
    Y = ta.compute((C, 1, R), lambda c, o, i: ta.prod(X[i, k], axis=[k]), name="Y")
    H = ta.placeholder((C, 1, R), "float64", "H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    rng = np.random.default_rng(1)
    x, h = rng.uniform(0.5, 1.5, (R, K)), rng.standard_normal((C, 1, R))
    others = np.array([[np.prod(np.delete(row, k)) for k in range(K)] for row in x])
    want = h.sum(axis=(0, 1))[:, None] * others
    np.testing.assert_allclose(ta.build([g], [X, H])(x, h), want, rtol=1e-12, atol=1e-12)


def test_an_empty_copied_axis_gives_a_zero_gradient_without_passes():
    """Copied along an axis of extent 0 the head is empty: the gradient is a zero fill, with
    no product passes over the distinct values (a summed empty head was not proven zero)."""
    X = ta.placeholder((R, K), "float64", "X")
    k = ta.reduce_axis((0, K), "k")
    Y = ta.compute((0, R), lambda c, i: ta.prod(X[i, k], axis=[k]), name="Y")
    H = ta.placeholder((0, R), "float64", "H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([g], [X, H], target=pinned()).work == 0  # a fill: no counted loop
    np.testing.assert_array_equal(ta.build([g], [X, H])(np.ones((R, K)), np.ones((0, R))), 0.0)


U = 5  # points of a reduction axis the terms never read


def _repeated(reducer):
    """``Y[i] = reducer over (k, u) of X[i, k]``: every term repeats ``U`` times."""
    X = ta.placeholder((R, K), "float64", "X")
    k, u = ta.reduce_axis((0, K), "k"), ta.reduce_axis((0, U), "u")
    Y = ta.compute((R,), lambda i: reducer(X[i, k], axis=[k, u]), name="Y")
    H = ta.placeholder((R,), "float64", "H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    return X, H, g


@pytest.mark.parametrize("name, hand", [
    # the zero count, the shrunk product Y' and its power Y'^(U-1) (the head's factor U Y'^(U-1)),
    # the nonzero product, the routing
    ("prod", 4 * R * K + R * (U - 1)),
    # the winner and where it landed, one scatter per output, the tie routing (a pass over each
    # output's window when every point ties)
    ("max", 2 * R * K + 2 * R),
    ("min", 2 * R * K + 2 * R),
])
def test_a_reduction_axis_no_term_reads_shrinks_to_one_point(name, hand):
    """Without the shrink each pass ran over the ``U`` repeats of every term (2.75x to 4.3x)."""
    X, H, g = _repeated(getattr(ta, name))
    work = ta.lower([g], [X, H], target=pinned()).work
    assert work <= hand, f"{name}: gradient work {work} > hand {hand}"


@pytest.mark.parametrize("name", ["prod", "max", "min"])
def test_a_repeated_reduction_gradient_matches_numpy(name):
    """``prod`` is ``prod_k(x)^U``: ``U p^(U-1)`` times the other factors' product, zero in a row
    with a zero (``U >= 2``); a max or min splits its head evenly among the tied terms."""
    X, H, g = _repeated(getattr(ta, name))
    rng = np.random.default_rng(4)
    x = rng.uniform(-1.5, 1.5, (R, K))
    x[0, 3] = 0.0
    x[1, 2] = x[1, 7] = 0.0
    x[2, 1] = x[2, 4] = 9.0  # a tied max
    x[3, 5] = x[3, 8] = -9.0  # a tied min
    h = rng.standard_normal(R)
    if name == "prod":
        p = x.prod(axis=1, keepdims=True)
        others = np.array([[np.prod(np.delete(row, k)) for k in range(K)] for row in x])
        want = h[:, None] * U * p ** (U - 1) * others
    else:
        best = getattr(x, name)(axis=1, keepdims=True)
        tied = x == best
        want = h[:, None] * tied / tied.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(ta.build([g], [X, H])(x, h), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), want, rtol=1e-12, atol=1e-12)


def test_a_repeat_count_that_is_a_size_variable_shrinks_as_a_static_one():
    """A product over an unread axis of ``n`` points, ``n`` a size variable: its gradient bound
    at ``n = U`` does the work of the program written with ``U`` (the power ``Y'^(n-1)`` is a
    product over the points but one, at any ``n``; a static-only shrink made them differ)."""
    def program(extent):
        X = ta.placeholder((R, K), "float64", "X")
        k, u = ta.reduce_axis((0, K), "k"), ta.reduce_axis((0, extent), "u")
        Y = ta.compute((R,), lambda i: ta.prod(X[i, k], axis=[k, u]), name="Y")
        H = ta.placeholder((R,), "float64", "H")
        return list(ta.JacobianRecursive(Y, [X], H)), [X, H]

    n = ta.size_var("n", min=2)
    bound = ta.lower(*program(n), target=pinned(), sizes={"n": U}).work
    assert bound == ta.lower(*program(U), target=pinned()).work


def _argmax_combine(x, y):
    keep = x[1] >= y[1]
    return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])


ARGMAX = ta.comm_reducer(_argmax_combine, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)),
                         name="argmax")
GATHER = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3], dtype=np.int32)  # K columns of X, some twice


def _copied_argmax():
    """``(I, V)[c, i] = argmax_k X[i, k]``, copied along ``c``: the gradient of the value ``V``."""
    X = ta.placeholder((R, K), "float64", "X")
    k = ta.reduce_axis((0, K), "k")
    _, V = ta.compute((C, R), lambda c, i: ARGMAX((k, X[i, k]), axis=[k]), name="Y")
    H = ta.placeholder((C, R), "float64", "H")
    (g,) = ta.JacobianRecursive(V, [X], H)
    return X, V, H, g, {}


def _copied_sum():
    """``Y[c, i] = sum_k X[i, G[k]]`` (columns gathered by data), copied along ``c``."""
    X = ta.placeholder((R, K), "float64", "X")
    G = ta.placeholder((K,), "int32", "G")
    k = ta.reduce_axis((0, K), "k")
    Y = ta.compute((C, R), lambda c, i: ta.sum(X[i, G[k]], axis=[k]), name="Y")
    H = ta.placeholder((C, R), "float64", "H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    return X, Y, H, g, {G: GATHER}


@pytest.mark.parametrize("make, hand", [
    # the head summed over c, the winner once per distinct output, the routing written per element of X
    (_copied_argmax, C * R + 2 * R * K),
    # the head summed over c, then a scatter of one add per term (i, k)
    (_copied_sum, C * R + R * K),
])
def test_a_copied_argmax_or_sum_differentiates_once_per_distinct_value(make, hand):
    """A selecting reduction (argmax) ran its winner pass once per copy, and a gathered sum scattered
    each copy's head (``C R K`` adds) instead of summing the head over the copies first."""
    X, _, H, g, extra = make()
    work = ta.lower([g], [X, H, *extra], target=pinned()).work
    assert work <= hand, f"gradient work {work} > hand {hand}"


@pytest.mark.parametrize("make", [_copied_argmax, _copied_sum])
def test_a_copied_argmax_or_sum_gradient_matches_central_differences(make):
    """The gradient of ``sum(H * Y)`` against float64 central differences (distinct values: no ties)."""
    X, Y, H, g, extra = make()
    rng = np.random.default_rng(5)
    x = rng.permutation(R * K).reshape(R, K) / (R * K) + rng.uniform(0, 1e-3, (R, K))
    h = rng.standard_normal((C, R))
    f = ta.build([Y], [X, *extra])
    eps = 1e-6
    want = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += eps
        down[idx] -= eps
        want[idx] = (np.sum(h * f(up, *extra.values())) - np.sum(h * f(down, *extra.values()))) / (2 * eps)
    got = ta.build([g], [X, H, *extra])(x, h, *extra.values())
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h, **extra}), want, rtol=1e-6, atol=1e-8)


M = 4  # elements of X read, each by several window points


def _copied_folded_sum():
    """``Y[c, i] = sum_k X[k % M] A[i, k]``, copied along ``c``: each element of ``X`` is read by
    ``K / M`` window points whose terms differ (``A[i, k]``)."""
    X, A = ta.placeholder((M,), "float64", "X"), ta.placeholder((R, K), "float64", "A")
    k = ta.reduce_axis((0, K), "k")
    Y = ta.compute((C, R), lambda c, i: ta.sum(X[k % M] * A[i, k], axis=[k]), name="Y")
    H = ta.placeholder((C, R), "float64", "H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    return X, A, Y, H, g


def test_a_copied_sum_over_several_points_per_element_sums_the_head_first():
    """A sum copied along ``c`` whose read of ``X`` leaves several window points per element with
    differing terms kept its sum over the window inside the sum over the copies: ``C R K`` terms.
    Hand count: the head summed over ``c`` (``C R``), each term ``hs[i] A[i, k]`` formed (``R K``)
    and added into its element (``R K``)."""
    X, A, _, H, g = _copied_folded_sum()
    work = plain_work([g], [A, H], target=pinned())
    assert work <= C * R + 2 * R * K, f"gradient work {work} > hand {C * R + 2 * R * K}"


def test_a_copied_sum_over_several_points_per_element_matches_central_differences():
    X, A, Y, H, g = _copied_folded_sum()
    rng = np.random.default_rng(7)
    x, a, h = rng.standard_normal(M), rng.standard_normal((R, K)), rng.standard_normal((C, R))
    f = ta.build([Y], [X, A])
    eps, want = 1e-6, np.zeros(M)
    for j in range(M):
        up, down = x.copy(), x.copy()
        up[j] += eps
        down[j] -= eps
        want[j] = (np.sum(h * f(up, a)) - np.sum(h * f(down, a))) / (2 * eps)
    np.testing.assert_allclose(ta.build([g], [A, H])(a, h), want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ta.evaluate(g, {A: a, H: h}), want, rtol=1e-7, atol=1e-9)


def test_a_copied_sum_whose_points_per_element_only_count_keeps_its_terms():
    """``Y[c, i] = sum_k tanh(X[i, k // 2])``: the two window points of an element have one term,
    which the optimizer counts; the head's sum over ``c`` then is the whole gradient's work per
    row (each element's value copied along the row), and summing it apart would add a pass.
    Hand count: ``C R`` for the head's sums, ``R K / 2`` for the elements read."""
    X = ta.placeholder((R, K), "float64", "X")
    k = ta.reduce_axis((0, K), "k")
    Y = ta.compute((C, R), lambda c, i: ta.sum(ta.tanh(X[i, k // 2]), axis=[k]), name="Y")
    H = ta.placeholder((C, R), "float64", "H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    work = plain_work([g], [X, H], target=pinned())
    assert work <= C * R + R * K // 2, f"gradient work {work} > hand {C * R + R * K // 2}"
    x, h = np.random.default_rng(8).standard_normal((R, K)), np.random.default_rng(9).standard_normal((C, R))
    want = np.zeros((R, K))
    want[:, :K // 2] = 2 * h.sum(axis=0)[:, None] * (1 - np.tanh(x[:, :K // 2]) ** 2)
    np.testing.assert_allclose(ta.build([g], [X, H])(x, h), want, rtol=1e-12, atol=1e-12)
