"""A masked product's saved factors are stored where its condition holds.

A product whose factors round twice (float64 through bfloat16) stores them once (``Y.tie``), so
that its zero test and its routing compare the same bits.  Outside the product's condition the
copy held the identity, which made code generation store it over the whole box (three times the
domain here); every reader reduces under the condition, so the copy is zero there and is
computed on the domain only."""

from __future__ import annotations

import numpy as np

import tensorad as ta
from tensorad.ir import placeholders

TARGET = "llvm -mcpu=skylake-avx512"


def test_saved_factors_of_a_masked_product_are_stored_on_its_domain():
    """A product whose factors round twice (float64 through bfloat16) stores them once for its
    zero test; over the window's points where its condition holds, not over the whole box."""
    X = ta.placeholder((8,), "float64", name="X")
    r = ta.reduce_axis((0, 12), "r")
    Y = ta.compute((4, 6), lambda i, j: ta.prod(
        ta.cast("float64", ta.cast("bfloat16", ta.sqrt(X[(i + r) % 8]))), axis=r, where=(j + r) % 3 == 1),
        name="Y")
    H = ta.placeholder(Y.shape, "float64", name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    domain = 4 * 6 * 4  # (i, j, r) with (j + r) % 3 == 1
    work = ta.lower([dX], placeholders([dX]), target=TARGET).work
    # the stored factors, the zero count, the nonzero factors' product, the routing: a pass over
    # the domain each (over the whole box: 6 passes)
    assert work <= 4 * domain, f"gradient work {work} > 4 passes over the domain ({4 * domain})"
    # values: the kernel against the unoptimized gradient evaluated by NumPy
    raw = ta.JacobianRecursive(Y, [X], H, optimize=False)
    rng = np.random.default_rng(6)
    x, h = rng.uniform(0.5, 1.5, X.shape), rng.standard_normal(H.shape)
    x[5] = 0.0
    (want,) = ta.evaluate(raw, {X: x, H: h})
    got = ta.build([dX], [X, H], target="llvm")(x, h)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
