"""A loss over a Gram matrix ran two products where an expert runs one.

``L = sum_ab (G[a, b] - T[a, b])^2`` with ``G = F F^T / N`` (a style loss) has the gradient
``dF = 2 H / N * (E F + E^T F)``, ``E = G - T``.  Reverse mode reaches ``F`` through both reads of
``F`` in ``G``, and the optimizer lifted the scale ``2 H / N`` out of each sum: the two sums, read
times one scale, were not merged (only sums read alone were), and when merged, the held brackets
of each term split the merged sum again.  So ``E F`` and ``E^T F`` ran as two products
(``2 C^2 N`` terms) beside the forward's ``C^2 N``.  Sums read times equal factors of the
body's axes now merge, the scale stays out, and a merged sum of them keeps its one pass: the
gradient is one product of the summed ``E + E^T`` with ``F``.  A merge never makes a sum over
more points than its terms had (``sum_k A[i, k] A[k, i]``'s gradient keeps its two row sums).

Oracles: float64 central differences and a NumPy formula written here.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"


def _style_loss(c: int, n: int):
    F = ta.placeholder((c, n), "float64", "F")
    T = ta.placeholder((c, c), "float64", "T")
    k, a, b = (ta.reduce_axis((0, m), name) for m, name in ((n, "k"), (c, "a"), (c, "b")))
    G = ta.compute((c, c), lambda i, j: ta.sum(F[i, k] * F[j, k], k) / float(n), name="G")
    L = ta.compute((), lambda: ta.sum((G[a, b] - T[a, b]) ** 2, [a, b]), name="L")
    return L, F, T


def test_gram_loss_gradient_is_one_product_of_the_summed_head():
    c, n = 8, 12
    L, F, T = _style_loss(c, n)
    H = ta.placeholder((), "float64", "H")
    (dF,) = ta.JacobianRecursive(L, [F], H)
    backward = ta.lower([dF], [F, T, H], target=TARGET).work
    forward_product = c * c * n
    assert backward <= 2 * forward_product + 2 * c * c, backward  # G again, then (E + E^T) F

    rng = np.random.default_rng(0)
    f, t, h = rng.standard_normal((c, n)), rng.standard_normal((c, c)), np.array(0.7)
    e = f @ f.T / n - t
    want = h * 2.0 / n * (e + e.T) @ f
    np.testing.assert_allclose(ta.build([dF], [F, T, H], target="llvm")(f, t, h), want, rtol=1e-10)


def test_gram_loss_gradient_matches_central_differences():
    L, F, _ = _style_loss(3, 5)
    assert ta.gradcheck(L, [F])


def test_a_merge_runs_over_no_more_points_than_its_sums():
    n = 16
    A = ta.placeholder((n, n), "float64", "A")
    k = ta.reduce_axis((0, n), "k")
    B = ta.compute((n, n), lambda i, j: ta.sum(A[i, k] * A[k, i] + 5.0, k), name="B")
    H = ta.placeholder((n, n), "float64", "H")
    (dA,) = ta.JacobianRecursive(B, [A], H)
    # dA[p, q] = (h[p] + h[q]) A[q, p], h[i] = sum_j H[i, j]: the row sums once, not per (p, q)
    assert ta.lower([dA], [A, H], target=TARGET).work <= 2 * n * n
    rng = np.random.default_rng(1)
    a, hv = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    hs = hv.sum(1)
    np.testing.assert_allclose(ta.evaluate(dA, {A: a, H: hv}), (hs[:, None] + hs[None, :]) * a.T, rtol=1e-10)
