"""The gradient of a product finds its zero factors by comparing each factor with 0, and counts
them (``Z``) beside the product of the others (``P``): ``dY/dg_k`` is ``P / g_k`` when no
factor is 0 and ``P`` at a lone zero.  A factor that rounds (``a * a + c``: one FMA, or two
roundings) can be 0 in one build and 2^-54 in another: ``ta.function``'s forward counted
``Z`` and ``P`` with fast math on an FMA target and the backward, built strictly for x86-64,
found its zero again (``P / 1``: a gradient of 1e-15 instead of 18), or the other way round
(no zero where ``Z == 1``: 0).  The zero test and the counts now read one copy of the
factor's bits, as a max's tie test does (tests/regressions/test_tie_test_asymmetry.py).

At ``a = 1 + 2^-27``, ``c = -(1 + 2^-26)``: ``a * a + c`` is 2^-54 fused and 0 rounded twice.
The other factors are 2 and 3, so ``dY/dc_0 = sum(h) * 6`` whatever ``g_0`` is.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

A = 1 + 2.0**-27
FUSED = {"fastmath": True, "target": "llvm -mcpu=haswell"}
STRICT = {"fastmath": False, "target": "llvm -mcpu=x86-64"}


@pytest.mark.parametrize("forward,backward", [(FUSED, STRICT), (STRICT, FUSED)])
@pytest.mark.parametrize("policy", ["default", "save_all"])
def test_a_factor_zero_in_one_rounding_only(forward, backward, policy):
    a = ta.placeholder((3,), "float64", name="a")
    c = ta.placeholder((3,), "float64", name="c")
    k = ta.reduce_axis((0, 3), name="k")
    Y = ta.compute((2,), lambda i: ta.prod(a[k] * a[k] + c[k], axis=[k]), name="Y")
    av, cv, h = np.array([A, 1.0, 1.0]), np.array([-(1 + 2.0**-26), 1.0, 2.0]), np.array([1.0, 2.0])
    y, res = ta.function(Y, [a, c], policy=policy, **forward).forward(av, cv)
    ga, gc = ta.function(Y, [a, c], policy=policy, **backward).backward(res, h)
    g0 = y[0] / 6  # the forward's g_0: 0 or 2^-54
    others = h.sum() * np.array([2.0 * 3.0, g0 * 3.0, g0 * 2.0])  # d prod / d g_k
    np.testing.assert_allclose(gc, others, rtol=1e-15, atol=0)
    np.testing.assert_allclose(ga, others * 2 * av, rtol=1e-15, atol=0)
