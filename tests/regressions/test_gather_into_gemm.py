"""An embedding read inside a matrix product: the product's operand is a checked gather.

The packed matrix-product path emits its operands in packing routines that have no run-time
test of a gather index, so building ``matmul(embedding(E, T), W)`` at a size that picks it
raised "gather index ... emitted without its run-time check".  Such a product now runs as loops
with the test: right values, and an out-of-range token id is an ``IndexError``.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def test_embedding_then_matmul_builds_and_checks_its_indices(rng):
    V, D = 512, 128  # big enough for the packed product
    E = ta.placeholder((V, D), "float32", "E")
    T = ta.placeholder((4, 64), "int32", "T")
    W = ta.placeholder((D, D), "float32", "W")
    Y = ta.topi.matmul(ta.topi.nn.embedding(E, T), W)
    e, w = rng.standard_normal((V, D)).astype(np.float32), rng.standard_normal((D, D)).astype(np.float32)
    t = rng.integers(0, V, (4, 64)).astype(np.int32)
    k = ta.build([Y], [E, T, W])
    np.testing.assert_allclose(k(e, t, w), e[t] @ w, rtol=1e-5, atol=1e-5)
    t[1, 2] = V
    with pytest.raises(IndexError, match="gather index out of range"):
        k(e, t, w)
