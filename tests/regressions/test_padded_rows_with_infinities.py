"""A generic kernel's sums over its rows keep the infinities and NaNs of its last rows: the last rows
run as one short block of a larger part, which takes in none of the rows past the count (a block once
padded them with copies of the last row, and a padded row added ``inf * 0``, a NaN, to a sum whose true
value is infinite).  The oracles are NumPy formulas."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _weight_gradient() -> ta.Kernel:
    n = ta.size_var("n")
    X = ta.placeholder((n, 24), "float64", name="X")
    W = ta.placeholder((16, 24), "float64", name="W")
    k = ta.reduce_axis((0, 24))
    Y = ta.compute((n, 16), lambda i, j: ta.sum(X[i, k] * W[j, k], axis=k), name="Y")
    H = ta.placeholder((n, 16), "float64", name="H")
    g, = ta.JacobianRecursive(Y, [W], H)
    return ta.build(g, [X, W, H], microkernel=True)  # (a product summing over the rows)


@pytest.mark.parametrize("poison", [np.inf, -np.inf, np.nan])
def test_sums_over_rows_keep_the_infinities_of_the_last_row(poison):
    kernel = _weight_gradient()
    assert kernel.generic and kernel.why == ""
    rng = np.random.default_rng(0)
    for n in (3, 7, 30):
        x, w, h = rng.standard_normal((n, 24)), rng.standard_normal((16, 24)), rng.standard_normal((n, 16))
        x[-1, 5] = poison
        h[-1, 7] = poison
        with np.errstate(invalid="ignore"):
            want = h.T @ x
            np.testing.assert_allclose(kernel(x, w, h), want, rtol=1e-12)
            out = np.full_like(want, 7.0)
            kernel(x, w, h, out=out)
        np.testing.assert_allclose(out, want, rtol=1e-12)
