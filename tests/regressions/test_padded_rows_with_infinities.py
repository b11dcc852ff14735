"""A generic kernel's last rows may run as one padded block, the padding a copy of the last real row
and zeros in the input whose zero rows add nothing to the sums over the rows.  Where that real row
holds an infinity, a padded row adds ``inf * 0``, a NaN, to a sum whose true value is infinite: the
kernel runs the rows again unpadded, and its sums equal NumPy's, infinities and NaNs included."""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.codegen.runtime import rows

import tensorad as ta


def _weight_gradient() -> ta.Kernel:
    n = ta.size_var("n")
    X = ta.placeholder((n, 24), "float64", name="X")
    W = ta.placeholder((16, 24), "float64", name="W")
    k = ta.reduce_axis((0, 24))
    Y = ta.compute((n, 16), lambda i, j: ta.sum(X[i, k] * W[j, k], axis=k), name="Y")
    H = ta.placeholder((n, 16), "float64", name="H")
    g, = ta.JacobianRecursive(Y, [W], H)
    return ta.build(g, [X, W, H], microkernel=True)  # (a product over the rows: padded blocks)


@pytest.mark.parametrize("poison", [np.inf, -np.inf, np.nan])
def test_sums_of_a_padded_block_keep_the_infinities_of_its_last_row(monkeypatch, poison):
    monkeypatch.setattr(rows, "PADDED_WORK", 0)  # (a padded block is the cheapest plan here)
    kernel = _weight_gradient()
    assert kernel.generic
    rng = np.random.default_rng(0)
    for n in (3, 7, 30):
        assert kernel.plan(n)[1] is not None, "the padded block is not exercised"
        x, w, h = rng.standard_normal((n, 24)), rng.standard_normal((16, 24)), rng.standard_normal((n, 16))
        x[-1, 5] = poison
        h[-1, 7] = poison
        want = h.T @ x
        np.testing.assert_allclose(kernel(x, w, h), want, rtol=1e-12)
        out = np.full_like(want, 7.0)
        kernel(x, w, h, out=out)
        np.testing.assert_allclose(out, want, rtol=1e-12)

