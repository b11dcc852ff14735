"""A product or a max whose value is copied along an output axis it never reads (a broadcast)
differentiates once per distinct value: the head is summed over the copied axis first, so the
zero count, the nonzero product, the winner and its routing run over the distinct outputs, not
over every copy.  Without that, the gradient of ``Y[c, i] = prod_k X[i, k]`` did each of those
passes ``C`` times (10x the forward's work here).

Oracles: NumPy formulas of the gradients written here; work counted by hand on a pinned target."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tensorad as ta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzz.cheap import pinned  # noqa: E402

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
    # the winner, the head summed over c, one scatter per distinct output
    ("max", R * K + C * R + R),
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
    the min and its hit count (a pass over X each), the scatter per output, and one copy of
    the gradient the kept axis makes."""
    X = ta.placeholder((R, K), "float64", "X")
    T = ta.topi.min(X, axis=0, keepdims=True)
    Z = ta.compute((K,), lambda j: ta.maximum(T[0, j], ta.const(0.0, "float64")), name="Z")
    H = ta.placeholder((K,), "float64", "H")
    (g,) = ta.JacobianRecursive(Z, [X], H)
    work = ta.lower([g], [X, H], target=pinned()).work
    assert work <= 3 * R * K + K, f"work {work}: the min computed twice"
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
    assert ta.lower([g], [X, H], target=pinned()).work == R * K
    np.testing.assert_array_equal(ta.build([g], [X, H])(np.ones((R, K)), np.ones((0, R))), 0.0)
