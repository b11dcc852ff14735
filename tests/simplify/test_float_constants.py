"""Float constants and float arithmetic of indices are never truncated to integers.

``cast("float64", i) * 0.3 < 1.0`` holds for ``i < 4`` only; read as integer arithmetic
(``int(0.3) == 0``) it held everywhere and the optimizer turned the mask into the constant 1.
Oracles: NumPy formulas and ``ta.evaluate`` of the unoptimized tensor.
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.simplify.algebra.ranges import bounds

import tensorad as ta
from tensorad.ir.expr import const, var
from tensorad.poly.affine import IndexSpace, NotAffine
from tensorad.poly.linear import to_linear

F64 = "float64"


def test_float_mask_is_not_folded_to_a_constant():
    Y = ta.compute((8,), lambda i: ta.select(ta.cast(F64, i) * 0.3 < 1.0, 1.0, 0.0), name="Y")
    Yo = ta.OptimizeAndLiftNonzeronessConditions(Y)
    want = (np.arange(8) * 0.3 < 1.0).astype(np.float32)
    np.testing.assert_array_equal(ta.evaluate([Yo], {})[0], want)
    np.testing.assert_array_equal(ta.build([Yo], [])(), want)


@pytest.mark.parametrize("scale, bound", [(0.3, 1.0), (2.5, 6.0), (-0.75, -2.0)])
def test_optimized_gradient_of_a_float_mask(scale, bound):
    X = ta.placeholder((9,), F64, name="X")
    Y = ta.compute((9,), lambda i: ta.if_then_else(ta.cast(F64, i) * scale < bound, X[i] * X[i], 0.0),
                   name="Y")
    k = ta.reduce_axis((0, 9), "k")
    L = ta.compute((), lambda: ta.sum(Y[k], axis=k), name="L")
    (g,) = ta.gradient(L, [X])
    g = ta.OptimizeAndLiftNonzeronessConditions(g)
    x = np.random.default_rng(0).standard_normal(9)
    want = np.where(np.arange(9) * scale < bound, 2 * x, 0.0)
    np.testing.assert_allclose(ta.evaluate([g], {X: x})[0], want, rtol=1e-12)
    np.testing.assert_allclose(ta.build([g], [X])(x), want, rtol=1e-12)


def test_index_analyses_treat_float_arithmetic_as_opaque():
    i = var("i", 0, 8)
    fx = ta.cast(F64, i) * const(0.3, F64)
    assert to_linear(fx).terms == ((fx, 1),)  # an atom, not 0 * i
    assert to_linear(const(0.3, F64)).const == 0 and to_linear(const(0.3, F64)).terms
    assert bounds(fx) == (None, None)
    with pytest.raises(NotAffine):
        IndexSpace([i]).aff(fx)
    with pytest.raises(NotAffine):
        IndexSpace([i]).cond(fx < const(1.0, F64))
