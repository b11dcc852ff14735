"""A masked product whose factors round twice (float64 through bfloat16) differentiates correctly.

Its zero test once compared a stored copy of the factors (``Y.tie``), held over the whole box.  The
gradient is now the product of the other factors from two exclusive scans along the box, which read
the factors as they are and compare no copy: a pass over the box each, then the routing over the
condition's domain."""

from __future__ import annotations

import numpy as np

import tensorad as ta
from tensorad.ir import placeholders

TARGET = "llvm -mcpu=skylake-avx512"


def test_saved_factors_of_a_masked_product_are_stored_on_its_domain():
    """A product whose factors round twice (float64 through bfloat16): two scans over the box and the
    routing over the points where its condition holds."""
    X = ta.placeholder((8,), "float64", name="X")
    r = ta.reduce_axis((0, 12), "r")
    Y = ta.compute((4, 6), lambda i, j: ta.prod(
        ta.cast("float64", ta.cast("bfloat16", ta.sqrt(X[(i + r) % 8]))), axis=r, where=(j + r) % 3 == 1),
        name="Y")
    H = ta.placeholder(Y.shape, "float64", name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    domain = 4 * 6 * 4  # (i, j, r) with (j + r) % 3 == 1
    work = ta.lower([dX], placeholders([dX]), target=TARGET).work
    box = 4 * 6 * 12
    assert work <= 2 * box + domain, f"gradient work {work} > two scans and the routing ({2 * box + domain})"
    # values: the kernel against the unoptimized gradient evaluated by NumPy
    raw = ta.JacobianRecursive(Y, [X], H, optimize=False)
    rng = np.random.default_rng(6)
    x, h = rng.uniform(0.5, 1.5, X.shape), rng.standard_normal(H.shape)
    x[5] = 0.0
    (want,) = ta.evaluate(raw, {X: x, H: h})
    got = ta.build([dX], [X, H], target="llvm")(x, h)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
