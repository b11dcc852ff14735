"""``0.5 / maximum(0.0, t)`` where ``t`` is a product that is
``-0.0`` (zeros times a negative value).  Compiled code computes IEEE 754-2019 ``maximum``
(``llvm.maximum``: NaN propagates, ``-0 < +0``): ``+0``, so ``+inf``.  ``ta.evaluate`` used
NumPy's ``maximum``, which returns one operand of an equal pair by position: ``-0``, so
``-inf``.  The evaluator, its max/min reductions and the optimizer's constant folding now share
the IEEE rule (``tensorad.ir.dtype.maximum``/``minimum``/``fold_extreme``).  Oracle: the
standard's definition, written here with Python's ``math.copysign``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import tensorad as ta

SPECIAL = [0.0, -0.0, 1.5, -1.5, math.inf, -math.inf, math.nan]


def _ieee(kind: str, a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b == 0.0:  # +0 and -0: the maximum is -0 only if both are, the minimum +0 only if both are
        negative = [math.copysign(1.0, v) < 0 for v in (a, b)]
        if kind == "max":
            return -0.0 if all(negative) else 0.0
        return -0.0 if any(negative) else 0.0
    return max(a, b) if kind == "max" else min(a, b)


def _same(got: float, want: float) -> bool:
    if math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


PAIRS = list(itertools.product(SPECIAL, SPECIAL))


@pytest.mark.parametrize("kind", ["max", "min"])
def test_elementwise_maximum_signs_agree_in_evaluate_and_build(kind):
    a = ta.placeholder((len(PAIRS),), "float64", name="a")
    b = ta.placeholder((len(PAIRS),), "float64", name="b")
    fn = ta.maximum if kind == "max" else ta.minimum
    Y = ta.compute((len(PAIRS),), lambda i: fn(a[i], b[i]), name="Y")
    av = np.array([p[0] for p in PAIRS])
    bv = np.array([p[1] for p in PAIRS])
    (ev,) = ta.evaluate([Y], {a: av, b: bv})
    built = ta.build([Y], [a, b])(av, bv)
    for k, (x, y) in enumerate(PAIRS):
        want = _ieee(kind, x, y)
        assert _same(float(ev[k]), want), (kind, x, y, ev[k])
        assert _same(float(built[k]), want), (kind, x, y, built[k])


@pytest.mark.parametrize("kind", ["max", "min"])
def test_reduction_sign_of_zero(kind):
    rows = [[0.0, -0.0], [-0.0, 0.0], [-0.0, -0.0], [0.0, 0.0], [-0.0, -1.0], [0.0, 1.0]]
    X = ta.placeholder((len(rows), 2), "float32", name="X")
    k = ta.reduce_axis((0, 2), name="k")
    red = ta.max if kind == "max" else ta.min
    Y = ta.compute((len(rows),), lambda i: red(X[i, k], axis=k), name="Y")
    xv = np.array(rows, np.float32)
    (ev,) = ta.evaluate([Y], {X: xv})
    built = ta.build([Y], [X])(xv)
    for i, (p, q) in enumerate(rows):
        want = _ieee(kind, p, q)
        assert _same(float(ev[i]), want), (kind, rows[i], ev[i])
        assert _same(float(built[i]), want), (kind, rows[i], built[i])


def test_division_by_a_negative_zero_product():
    X = ta.placeholder((3,), "float32", name="X")
    r = ta.reduce_axis((0, 3), name="r")
    t = ta.compute((1,), lambda i: ta.prod(ta.if_then_else(r == 1, X[r], 0.0), axis=r), name="t")
    Y = ta.compute((), lambda: 0.5 / ta.maximum(ta.const(0.0, "float32"), t[0]), name="Y")
    xv = np.array([1.0, -2.0, 1.0], np.float32)  # t = 0 * -2 * 0 = -0.0
    (ev,) = ta.evaluate([Y], {X: xv})
    built = ta.build([Y], [X])(xv)
    assert float(ev) == math.inf and float(built) == math.inf


def test_constant_folding_uses_the_same_rule():
    zero, negzero = ta.const(0.0, "float64"), ta.const(-0.0, "float64")
    Y = ta.compute((2,), lambda i: ta.select(i == 0, 1.0 / ta.maximum(negzero, zero),
                                             1.0 / ta.minimum(zero, negzero)), name="Y")
    for tensor in (Y, ta.OptimizeAndLiftNonzeronessConditions(Y)):
        assert ta.build([tensor], [])().tolist() == [math.inf, -math.inf]
        assert ta.evaluate([tensor], {})[0].tolist() == [math.inf, -math.inf]


@pytest.mark.parametrize("first", [0.0, -0.0])
def test_negative_zero_constant_is_not_merged_with_zero(first):
    """Hash-consing keyed constants by ``==``: whichever of 0.0 and -0.0 was made first stood for
    both, so ``1 / -0.0`` depended on what the process had built before."""
    keep = ta.const(first, "float64")  # noqa: F841 -- alive while the other one is made
    Y = ta.compute((2,), lambda i: ta.select(i == 0, 1.0 / ta.const(0.0, "float64"),
                                             1.0 / ta.const(-0.0, "float64")), name="Y")
    assert ta.build([Y], [])().tolist() == [math.inf, -math.inf]
    assert ta.evaluate([Y], {})[0].tolist() == [math.inf, -math.inf]
