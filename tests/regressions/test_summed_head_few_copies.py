"""A head summed over the copies of a value is optimized like an adjoint: a head that is nonzero at a
few copies sums those only.

``C[i, j] = prod_r (x + 1)`` is one value copied over ``16 x 3``; ``Y = log(C[9, 0]) * x`` reads one
copy.  The gradient differentiates ``C`` once, with its head summed over the copies first; that sum was
made inside autodiff and never optimized, so it ran over all 48 copies of a head that is zero at all but
one.  Oracles: a hand count of the work and float64 central differences."""

from __future__ import annotations

import numpy as np

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"


def _program():
    x = ta.placeholder((), "float64", "x")
    r = ta.reduce_axis((0, 4), "r")
    C = ta.compute((16, 3), lambda i, j: ta.prod(x[()] + 1.0, axis=r), name="C")
    Y = ta.compute((), lambda: ta.log(C[9, 0]) * x[()], name="Y")
    return x, Y, ta.placeholder((), "float64", "H")


def test_the_summed_head_reads_one_copy():
    x, Y, H = _program()
    (g,) = ta.JacobianRecursive(Y, [x], H)
    # C at (9, 0): 4 terms; dx from C' (one term) and the one copy of the head
    assert ta.lower([g], [x, H], target=TARGET).work == 4 + 1


def test_gradient_matches_central_differences():
    x, Y, H = _program()
    (g,) = ta.JacobianRecursive(Y, [x], H)
    f = ta.build([Y], [x])
    for xv in (0.3, 1.7, -0.4):
        eps = 1e-6
        want = 1.5 * (f(np.array(xv + eps)) - f(np.array(xv - eps))) / (2 * eps)
        np.testing.assert_allclose(ta.build([g], [x, H])(np.array(xv), np.array(1.5)), want, rtol=1e-7)
