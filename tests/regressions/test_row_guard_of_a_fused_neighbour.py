"""A block of rows runs a count of rows it reads when it runs; a statement whose row is not a loop's
(``v - (2 v + r) // 3``) is tested against the count.  The test went around the whole body of the
innermost loop the row reads, so another statement fused into that body, on a row that is a loop's, was
skipped with it: causal attention over a symbolic batch, its query and key gradients computed in one
pass, lost the query gradient's terms whose key row lay past the count -- **wrong values** in ``dQ``
(0.05 in float64) at every batch the block of 4 rows ran (2, 3 and 4).  The test now goes on the
statements that reach the row only."""

import numpy as np

import tensorad as ta
from tensorad import topi


def _reference(q, k, v, h):
    """Causal attention's gradients with respect to Q and K, in NumPy float64."""
    scale = 1 / np.sqrt(q.shape[-1])
    s = q @ k.transpose(0, 2, 1) * scale
    s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = h @ v.transpose(0, 2, 1)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    return ds @ k, ds.transpose(0, 2, 1) @ q


def test_a_statement_beside_a_tested_row_runs_at_every_count():
    b = ta.size_var("b", max=4)
    Q, K = ta.placeholder((b, 3, 8), "float64", "Q"), ta.placeholder((b, 3, 8), "float64", "K")
    V, H = ta.placeholder((b, 3, 4), "float64", "V"), ta.placeholder((b, 3, 4), "float64", "H")
    dQ, dK, _ = ta.gradient(topi.nn.scaled_dot_product_attention(Q, K, V, True), [Q, K, V], H)
    kernel = ta.build([dQ, dK], [Q, K, V, H], num_threads=1)
    assert kernel.generic
    rng = np.random.default_rng(0)
    for rows in (1, 2, 3, 4):
        q, k = rng.uniform(-1, 1, (rows, 3, 8)), rng.uniform(-1, 1, (rows, 3, 8))
        v, h = rng.uniform(-1, 1, (rows, 3, 4)), rng.uniform(-1, 1, (rows, 3, 4))
        for got, want in zip(kernel(q, k, v, h), _reference(q, k, v, h)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{rows} rows")
