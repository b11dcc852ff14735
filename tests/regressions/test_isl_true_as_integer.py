"""isl's AST builder may write a true operand of ``&&`` / ``||`` as the integer 1 (the
gradient of a select masked by ``(i0 + i1) % 3 == 1`` raised "expected a condition
(bool expression), got a int32 expression 1" while building its loops, with default options).
The oracle is a NumPy formula written here."""

from __future__ import annotations

import numpy as np

import tensorad as ta


def test_gradient_of_a_mod_masked_gather_builds_and_is_right():
    x = ta.placeholder((16, 1), "float64", name="x")
    y = ta.compute((16, 7), lambda a, b: ta.select((a + b) % 3 == 1, ta.const(0.0, "float64"),
                                                   x[(3 - b) % 16, 0]), name="y")
    H = ta.placeholder((16, 7), "float64", name="H")
    (g,) = ta.JacobianRecursive(y, [x], H)
    h = np.random.default_rng(7).uniform(-1, 1, (16, 7))
    got = np.asarray(ta.build([g], [x, H])(np.zeros((16, 1)), h))
    want = np.zeros((16, 1))
    for a in range(16):
        for b in range(7):
            if (a + b) % 3 != 1:
                want[(3 - b) % 16, 0] += h[a, b]
    np.testing.assert_allclose(got, want, rtol=1e-12)
