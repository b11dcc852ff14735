"""The gradient of a max whose source reads under an index guard could not be
built (``OutOfBoundsError``), with default options.

``Y[i] = max_r if_then_else(i + 1 < 7, L[0, i + 1], 0) * T[i, r]``: the forward saves where
each window's winner landed (``Y.dest``), -1 where the guard fails, and the backward adds at
that point under ``Y.dest(i) >= 0``.  That data test implies ``i + 1 < 7``, but the bounds proof
cannot see through data, and the term's value reads ``L[0, i + 1]``: the gradient of ``w`` was
refused for ``i = 15``.  The guard is tested again beside the destination now.  Oracle: central
finite differences of the program written in NumPy.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta


def _forward(x, w):
    lv = np.tanh(x[0])  # L[0, b]
    t = np.maximum(w * 3.0, w * 1.0)  # T[i, r] = max_s w[r] (s + 1), s < 3
    g = np.array([lv[i + 1] if i + 1 < 7 else 0.0 for i in range(16)])
    return np.max(g[:, None] * t[None, :], axis=1)


def test_the_gradient_of_a_guarded_max_builds_and_is_right(rng, numeric_grad):
    x = ta.placeholder((3, 7), "float64", "x")
    w = ta.placeholder((4,), "float64", "w")
    L = ta.compute((3, 7), lambda a, b: ta.tanh(x[a, b]), name="L")
    r, s = ta.reduce_axis((0, 4), "r"), ta.reduce_axis((0, 3), "s")
    T = ta.compute((16, 4), lambda i, k: ta.max(w[k] * (s + 1.0), axis=s), name="T")
    Y = ta.compute((16,), lambda i: ta.max(ta.if_then_else(i + 1 < 7, L[0, i + 1], 0.0) * T[i, r], axis=r),
                   name="Y")
    H = ta.placeholder((16,), "float64", "H")
    grads = ta.JacobianRecursive(Y, [x, w], H)
    kernel = ta.build(grads, [x, w, H])
    xv, wv, hv = rng.uniform(-1, 1, (3, 7)), rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 16)
    np.testing.assert_allclose(ta.build([Y], [x, w])(xv, wv), _forward(xv, wv), rtol=1e-12)
    want = numeric_grad(_forward, [xv, wv], hv)
    for got, expected in zip(kernel(xv, wv, hv), want):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-8)
