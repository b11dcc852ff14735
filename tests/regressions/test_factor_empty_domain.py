"""A factored sum turned an empty domain's 0 into NaN.

``t3[i] = sum over k of select(i % 2 == 0, if_then_else(k % 3 == 1, 2x, t0), x)`` with
``t0 = max over an empty domain = -inf``.  For odd ``i`` the select never takes ``t0``: the sum
of its terms is over an empty set, ``0``.  The optimizer factors the invariant ``t0`` out,
``t0 * count(i)``, and ``-inf * 0`` is NaN.  The factored form must keep the original's strong
zero where the domain is empty.  Oracle: a NumPy formula written here, and the unoptimized
program under ``ta.evaluate``.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta


def _program():
    x = ta.placeholder((), "float64", name="x")
    r = ta.reduce_axis((0, 2), name="r")
    t0 = ta.compute((), lambda: ta.max(ta.abs(x[()]), axis=r, where=r < 0), name="t0")  # -inf
    k = ta.reduce_axis((1, 6), name="k")
    m = ta.reduce_axis((0, 9), name="m")
    t3 = ta.compute((4, 3), lambda a, i: ta.sum(ta.select(
        i % 2 == 0, ta.if_then_else((k + m) % 3 == 1, x[()] * 2.0, t0[()]), x[()]), axis=[k, m]), name="t3")
    return x, t3


def _want(x: float) -> np.ndarray:
    row = []
    for i in range(3):
        terms = [(2 * x if (k + m) % 3 == 1 else -np.inf) if i % 2 == 0 else x
                 for k in range(1, 6) for m in range(9)]
        row.append(sum(terms))
    return np.array([row] * 4)


def test_a_factored_sum_keeps_zero_where_its_domain_is_empty():
    x, t3 = _program()
    v = np.array(1.5)
    opt = ta.OptimizeAndLiftNonzeronessConditions(t3)
    np.testing.assert_array_equal(ta.evaluate([opt], {x: v})[0], _want(1.5))
    np.testing.assert_array_equal(ta.evaluate([t3], {x: v})[0], _want(1.5))
    np.testing.assert_array_equal(ta.build([opt], [x])(v), _want(1.5))
