"""A nested bracket read its head out of bounds where no outer term reads it.

The Hessian-vector product of ``t2[a, i1, b] = erf(t1[(i1 - 1) % 5])`` factors the inner sum
``[sum over a, b of head[a, i1 + (j + 1) % 5, b]]`` out as a tensor over ``(i1, j)``.  That
tensor is computed on the whole box of ``(i1, j)``, but only the outer sum's where-condition
(``i1 + (j + 1) % 5 <= 8``) kept its read of ``head`` in bounds: ``ta.build`` refused the
program (OutOfBoundsError).  The bracket now keeps the outer conjuncts.  Oracle: float64
central differences of the gradient, and the unoptimized HVP under ``ta.evaluate``.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta


def test_hvp_with_a_nested_bracket_builds_and_matches_finite_differences():
    x0 = ta.placeholder((7, 2), "float64", name="x0")
    t1 = ta.compute((5,), lambda i: ta.sin(x0[i, (i - 3) % 2]), name="t1")
    t2 = ta.compute((2, 9, 4), lambda a, i1, b: ta.erf(t1[(i1 - 1) % 5]), name="t2")
    H = ta.placeholder(t2.shape, "float64", name="head")
    ax = [ta.reduce_axis((0, n), name=f"l{d}") for d, n in enumerate(t2.shape)]
    L = ta.compute((), lambda: ta.sum(t2[tuple(ax)] * H[tuple(ax)], axis=ax), name="loss")
    v = ta.placeholder((7, 2), "float64", name="v")
    (hv,) = ta.hessian_vector_product(L, [x0], [v])
    (raw,) = ta.hessian_vector_product(L, [x0], [v], optimize=False)
    (g,) = ta.gradient(L, [x0])
    rng = np.random.default_rng(0)
    x, h, d = rng.normal(size=(7, 2)), rng.normal(size=(2, 9, 4)), rng.normal(size=(7, 2))
    got = ta.build([hv], [x0, H, v])(x, h, d)
    grad = ta.build([g], [x0, H])
    eps = 1e-5
    fd = (grad(x + eps * d, h) - grad(x - eps * d, h)) / (2 * eps)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got, ta.evaluate([raw], {x0: x, H: h, v: d})[0], rtol=1e-12, atol=1e-12)
