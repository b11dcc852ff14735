"""isl counts a set with divisions by scanning it: two ``%`` conditions over a 1000^3 box take it
27 CPU-s, an HVP's three nested divisions 13 CPU-s.  A scan's update count
(``codegen/strategies/scan.py``, a prefix sum under ``%`` conditions: 3.4 CPU-s of counting for a 400 x 400
output, growing with the cube of the size) and a merge's body-run count (``simplify/sums/merge.py``,
shifted windows through nested floors) asked isl without a limit -- a hang at scale.  Now every
count of a set with divisions is judged by its shape (more than ``COUNT_DIVISIONS`` divisions: not
counted) and runs under ``COUNT_OPERATIONS`` of isl's operations (deterministic); where the budget
is spent the scan estimates by a division-free superset.  The merge no longer counts: it asks isl
whether two windows intersect (``simplify/merge._overlap_saves``).  Counted, not timed: each
count's divisions and operation budget.  Oracles: ``ta.evaluate``, brute force."""

from __future__ import annotations

import itertools

import islpy as isl
import numpy as np
import pytest

import tensorad as ta
from tensorad.ir import placeholders
from tensorad.poly.domain import COUNT_DIVISIONS, COUNT_OPERATIONS, bounded_count, count_bound


@pytest.fixture
def counts(monkeypatch):
    """Each isl count: (the most divisions in a piece, its context's operation budget)."""
    seen = []
    real = isl.Set.count_val

    def spy(s):
        seen.append((max([b.dim(isl.dim_type.div) for b in s.get_basic_sets()] or [0]),
                     s.get_ctx().get_max_operations()))
        return real(s)

    monkeypatch.setattr(isl.Set, "count_val", spy)
    return seen


def _bounded(seen, reached=True):
    assert seen or not reached  # (the program reaches a count)
    assert all(d == 0 or (d <= COUNT_DIVISIONS and ops == COUNT_OPERATIONS) for d, ops in seen), seen


def test_a_prefix_sum_under_modulo_conditions_counts_within_a_budget(counts):
    n = 12
    X = ta.placeholder((n, n), "float64", name="X")
    k, m = ta.reduce_axis((0, n), name="k"), ta.reduce_axis((0, n), name="m")
    Y = ta.compute((n, n), lambda i, j: ta.sum(X[k, m], axis=[k, m], where=(k <= j) & (
        (3 * k + 7 * m + 11 * i) % 13 < 6) & ((13 * k + 17 * m + 5 * i) % 11 < 4)), name="Y")
    kern = ta.build([Y], [X], cache=False)  # (lowered here: no disk cache)
    _bounded(counts)
    x = np.random.default_rng(0).standard_normal((n, n))
    np.testing.assert_allclose(kern(x), ta.evaluate([Y], {X: x})[0], rtol=1e-12, atol=1e-12)


def test_merged_windows_through_nested_floors_count_within_a_budget(counts):
    h, w = 5, 6
    X = ta.placeholder((h, w), "float64", name="X")
    Y = ta.compute((2 * h - 1, 2 * w - 1), lambda y, x: X[((y * 3 + 1) // 7 + y) // 3, (x * 5 + 2) // 11]
                   + X[((y + 2) * 3) // 7, ((x + 1) // 2 + x) // 4], name="Y")
    H = ta.placeholder(Y.shape, "float64", name="H")
    grad = ta.JacobianRecursive(Y, [X], H)
    kern = ta.build(grad, placeholders(grad), cache=False)
    _bounded(counts, reached=False)  # (the merge asks isl whether two windows meet: no count)
    hv = np.random.default_rng(1).standard_normal(Y.shape)
    want = np.zeros((h, w))
    for y, x in itertools.product(range(2 * h - 1), range(2 * w - 1)):
        want[((y * 3 + 1) // 7 + y) // 3, (x * 5 + 2) // 11] += hv[y, x]
        want[((y + 2) * 3) // 7, ((x + 1) // 2 + x) // 4] += hv[y, x]
    np.testing.assert_allclose(kern(hv), want, rtol=1e-12, atol=1e-12)


def test_bounded_count_is_exact_or_refuses(counts):
    small = isl.Set("{ [i, j, k] : 0 <= i < 7 and 0 <= j < 5 and 0 <= k < 6 and (i + 2j) % 3 = 0 "
                    "and (k + j) % 2 = 1 }")
    brute = sum((i + 2 * j) % 3 == 0 and (k + j) % 2 == 1
                for i, j, k in itertools.product(range(7), range(5), range(6)))
    assert bounded_count(small) == count_bound(small) == brute
    # 27 CPU-s to count without a budget: refused once the budget is spent
    costly = isl.Set("{ [i, j, k] : 0 <= i < 1000 and 0 <= j < 1000 and 0 <= k < 1000 and "
                     "(3i + 7j + 11k) % 1009 < 500 and (13i + 17j + 5k) % 997 < 400 }")
    assert bounded_count(costly) is None
    assert count_bound(costly) == 1000 ** 3  # (the box: its division-free superset)
    # more divisions than COUNT_DIVISIONS: not counted at all
    deep = isl.Set("{ [a, b, c] : 0 <= a < 4 and 0 <= b < 3 and 0 <= c < 16 and "
                   "(3b + 7c + 9 * floor((1 - b)/3) + 5 * floor((c + a)/7)) % 112 < 23 }")
    before = len(counts)
    assert bounded_count(deep) is None
    assert len(counts) == before
