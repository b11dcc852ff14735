"""A product reading rows through a checked gather index is a matrix product.

``C[i, j] = sum_k E[I[i], k] * W[k, j]`` ran as loops (the packers cannot raise the
IndexError an out-of-range index must give); now the rows are copied once by a checked nest
(``codegen/strategies/gathered_rows.py``) and the product of the copy is packed.  Oracles: NumPy's
``E[I] @ W`` in float64; the gradient's weight side ``sum_i E[I[i], k] * H[i, j]`` too.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorad as ta


def _product(V, N, K, J, guard=False):
    E = ta.placeholder((V, K), "float64", "E")
    Ix = ta.placeholder((N,), "int32", "I")
    W = ta.placeholder((K, J), "float64", "W")
    k = ta.reduce_axis((0, K), "k")
    if guard:  # rows marked -1 are skipped: their index is never read
        C = ta.compute((N, J), lambda i, j: ta.sum(
            ta.if_then_else(Ix[i] >= 0, E[Ix[i], k], 0.0) * W[k, j], k), name="C")
    else:
        C = ta.compute((N, J), lambda i, j: ta.sum(E[Ix[i], k] * W[k, j], k), name="C")
    return E, Ix, W, C


def _data(V, N, K, J, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((V, K)), rng.integers(0, V, N).astype(np.int32),
            rng.standard_normal((K, J)))


def test_gathered_product_is_a_matrix_product():
    E, Ix, W, C = _product(300, 200, 96, 128)
    text = str(ta.lower([C], [E, Ix, W]))
    assert "matrix product" in text and "E.rows" in text, text
    e, i, w = _data(300, 200, 96, 128)
    k = ta.build([C], [E, Ix, W], num_threads=2)
    np.testing.assert_allclose(k(e, i, w), e[i] @ w, rtol=1e-12, atol=1e-12)
    bad = i.copy()
    bad[17] = 300
    for t in (1, 2):
        k.num_threads = t
        with pytest.raises(IndexError, match="300"):
            k(e, bad, w)


def test_weight_gradient_reads_the_copy_too():
    E, Ix, W, C = _product(300, 200, 96, 128)
    H = ta.placeholder(C.shape, "float64", "H")
    dE, dW = ta.gradient(C, [E, W], H)
    text = str(ta.lower([dW], [E, Ix, H]))
    assert "matrix product" in text and "E.rows" in text, text
    e, i, w = _data(300, 200, 96, 128)
    h = np.random.default_rng(1).standard_normal(C.shape)
    got_de, got_dw = ta.build([dE, dW], [E, Ix, W, H])(e, i, w, h)
    want_de = np.zeros_like(e)
    np.add.at(want_de, i, h @ w.T)
    np.testing.assert_allclose(got_dw, e[i].T @ h, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_de, want_de, rtol=1e-12, atol=1e-12)


def test_a_guarded_gather_is_not_copied_over_points_it_never_reads():
    E, Ix, W, C = _product(50, 40, 16, 24, guard=True)
    k = ta.build([C], [E, Ix, W], microkernel=True)
    assert "E.rows" not in str(k.lowered)
    e, i, w = _data(50, 40, 16, 24)
    i[::3] = -1  # out of range, but never read
    want = np.where((i >= 0)[:, None], e[np.maximum(i, 0)], 0.0) @ w
    np.testing.assert_allclose(k(e, i, w), want, rtol=1e-12, atol=1e-12)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(V=st.integers(1, 40), N=st.integers(1, 40), K=st.integers(1, 40), J=st.integers(1, 40),
       seed=st.integers(0, 1000))
def test_random_gathered_products(V, N, K, J, seed):
    E, Ix, W, C = _product(V, N, K, J)
    k = ta.build([C], [E, Ix, W], microkernel=True, num_threads=1)
    e, i, w = _data(V, N, K, J, seed)
    one = k(e, i, w)
    np.testing.assert_allclose(one, e[i] @ w, rtol=1e-12, atol=1e-12)
    for t in (2, 3):
        k.num_threads = t
        np.testing.assert_array_equal(k(e, i, w), one)
