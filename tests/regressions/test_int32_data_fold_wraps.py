"""Integer data folds with the semantics it runs with.

``int32(-9.0) - int32(3e10)``: the second cast saturates to 2147483647 and the difference of
two int32 values of data wraps, to 2147483640, in ``ta.evaluate`` and in every kernel.  The
simplifier's linear forms collected it in exact integers into the int32 constant
-2147483656 -- a constant past int32 is exact index arithmetic, so the optimized program
gave -2147483656.  Oracles: NumPy's int32 arithmetic written here and the unoptimized program.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta


def test_a_difference_of_saturated_casts_wraps_after_optimization():
    t0 = ta.compute((3, 2), lambda i0, i1: ta.cast("float64", ta.cast("int64", i0) * 3 - 3), name="t0")
    k0 = ta.compute((), lambda: ta.cast("int32", t0[0, 1] * 3.0) - ta.cast("int32", t0[2, 0] * 1e10),
                    name="k0")
    t2 = ta.compute((3, 9), lambda i0, i1: ta.cast("float64", k0[()]), name="t2")
    with np.errstate(over="ignore"):
        want = float(np.int32(-9) - np.int32(2147483647))
    assert want == 2147483640.0
    optimized = ta.OptimizeAndLiftNonzeronessConditions(t2)
    np.testing.assert_array_equal(ta.evaluate(optimized, {}), np.full((3, 9), want))
    np.testing.assert_array_equal(ta.evaluate(t2, {}), np.full((3, 9), want))
    x = ta.placeholder((1,), "float64", name="x")
    np.testing.assert_array_equal(ta.build([optimized], [x])(np.zeros(1)), np.full((3, 9), want))
