"""``(-1.5) ** 1e20`` gave ``-inf`` in compiled code (NumPy: ``inf``).

The inline ``pow`` corrects ``exp(y log|x|)`` by the rounding error of ``y log|x|``; for a
huge ``y`` that error term is itself inf or NaN, and ``inf * (1 + -inf)`` is ``-inf``.  Every
float this large is an even integer, so the result is ``+inf`` or ``0``.  The oracle is NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_of_a_negative_base_by_a_huge_even_exponent(dtype):
    X = ta.placeholder((10,), dtype, name="X")
    Y = ta.placeholder((10,), dtype, name="Y")
    Z = ta.compute((10,), lambda i: ta.power(X[i], Y[i]), name="Z")
    x = np.array([-1.5, -1.5, -3.0, -1.5, -0.5, -1.5, -0.9, 1.5, -1.5, -2.0], dtype)
    y = np.array([1e30, 1e20, 1e17, 1e16, 1e20, -1e20, 1e17, 1e20, 3e9, 2.0 ** 24 + 2], dtype)
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    for opts in ({}, {"vector_width": 1}):
        np.testing.assert_array_equal(ta.build([Z], [X, Y], **opts)(x, y), want)
