"""A max whose terms all tie: its gradient splits the head evenly among the ties, found by
comparing each term with the winner the forward computed.  The optimizer had folded the
gradient's copy of ``pow(0.5, 1.5)`` with NumPy while the forward computed it with the
kernel's inline ``pow``; the two differ by an ulp, so only the winner itself was counted as a
tie and ``x.grad`` came out H/6 of its value.  Transcendental functions of
constants are folded only where every implementation gives the same bits."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.ir.expr import Op, const, unary


def _program():
    x = ta.placeholder((2,), "float64", name="x")
    r0 = ta.reduce_axis((0, 3), name="r0")
    r1 = ta.reduce_axis((0, 2), name="r1")
    t = ta.compute((1, 4), lambda i0, i1: ta.max(
        ta.power(ta.abs(ta.if_then_else((r0 - 3 >= 0) & (r0 - 3 < 2), x[r0 - 3], 0.0)) + 0.5, 1.5)
        - x[(i0 + -2) // 3 % 2], axis=[r0, r1]), name="t")
    return x, t


@pytest.mark.parametrize("xv", [[0.1, 0.2], [0.4, -0.3], [-1.0, 2.5]])
def test_gradient_of_an_all_tied_max_counts_every_tie(xv):
    x, t = _program()
    H = ta.placeholder((1, 4), "float64", name="H")
    (g,) = ta.JacobianRecursive(t, [x], H)
    h = np.array([[0.3, -0.7, 1.1, 0.2]])
    want = np.array([0.0, -h.sum()])  # t = 0.5**1.5 - x[1] everywhere: dt/dx[1] = -1
    xv = np.array(xv)
    np.testing.assert_allclose(np.asarray(ta.evaluate(g, {x: xv, H: h})), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(ta.build([g], [x, H])(xv, h)), want, rtol=1e-12)


def test_transcendental_constants_fold_only_where_exact():
    from tensorad.simplify.algebra.consts import fold_constant
    half, one, zero = const(0.5, "float64"), const(1.0, "float64"), const(0.0, "float64")
    assert fold_constant(half ** const(1.5, "float64")) is None
    assert fold_constant(unary(Op.EXP, half)) is None
    assert fold_constant(half ** zero).arg == 1.0
    assert fold_constant(unary(Op.EXP, zero)).arg == 1.0
    assert fold_constant(unary(Op.LOG, one)).arg == 0.0
    assert fold_constant(half * half).arg == 0.25  # exactly rounded arithmetic still folds
