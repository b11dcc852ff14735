"""``ta.evaluate`` of an inlined tensor disagreed
with ``ta.evaluate`` of the original and with every build.

``t0[i] = x0[(i * 1073741824 + 3) % 5]`` read at ``t0[7]``: ``ta.InlineNonReductions`` puts the
int32 constant 7 where the axis variable was, and ``evaluate`` multiplied two int32 constants
in int32 (wrapping: ``x0[4]``) where the variable's product is exact (``x0[1]``), as compiled
code computes every read index (in 64 bits).  A read's index is now exact in ``evaluate`` too
(``tensorad.reference.numpy_eval.exact_indices``); an int32 value outside an index still wraps,
in both.  Oracles: Python's exact integers, NumPy's int32 arithmetic."""

from __future__ import annotations

import numpy as np

import tensorad as ta


def test_an_inlined_constant_index_is_exact_in_evaluate_and_build():
    x0 = ta.placeholder((5,), "float64", name="x0")
    t0 = ta.compute((9,), lambda i: x0[(i * 1073741824 + 3) % 5], name="t0")
    t1 = ta.compute((2,), lambda j: t0[7] + t0[j], name="t1")
    x = np.array([-1.3, 0.73, 1.34, -1.27, -1.95])
    want = np.array([x[(7 * 1073741824 + 3) % 5] + x[(j * 1073741824 + 3) % 5] for j in range(2)])
    inlined = ta.InlineNonReductions(t1, [t0])
    for t in (t1, inlined):
        np.testing.assert_array_equal(ta.evaluate(t, {x0: x}), want)
        np.testing.assert_array_equal(ta.build([t], [x0])(x), want)


def test_an_int32_value_outside_an_index_still_wraps():
    c = ta.compute((2,), lambda i: ta.cast("float64", (ta.const(7, "int32") * 1073741824 + 3) % 5 + i * 0),
                   name="c")
    with np.errstate(over="ignore"):
        wrapped = float((np.int32(7) * np.int32(1073741824) + np.int32(3)) % np.int32(5))
    assert wrapped == 4.0
    np.testing.assert_array_equal(ta.evaluate(c, {}), [wrapped, wrapped])
    np.testing.assert_array_equal(ta.build([c], [])(), [wrapped, wrapped])
