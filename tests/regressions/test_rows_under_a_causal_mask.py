"""A generic kernel's block of 4 rows over a length of 5 takes the count of rows where isl writes a causal
sum's loops over the rows and the length as one (``bo`` over 20 points): the block zeroes its sum at
``Y[bo // 5, bo % 5]`` and adds to it at ``Y[bo - (4 * bo + j) // 5, ...]``, the row that second form
reads known only by the test that guards it.  Each store of ``Y`` waits for the other to name the axis
of its rows, so the block runs a short block of rows, and each call matches NumPy float64 and counts the
static program's work."""

import numpy as np

import tensorad as ta

L, D = 5, 16


def _program(n):
    shapes = {"G": (n, L, D), "P": (n, 2, L, L), "S": (n, 2, L)}
    G, P, S = (ta.placeholder(s, name=k) for k, s in shapes.items())
    j = ta.reduce_axis((0, L), "j")
    Y = ta.compute((n, L, D), lambda b, i, d: ta.sum(
        ta.if_then_else(i <= j, G[b, j, d] * P[b, d // 8, j, i] / S[b, d // 8, j], 0.0), axis=j), name="Y")
    Z = ta.compute((n, L, D), lambda b, i, d: Y[b, L - 1 - i, d] * G[b, i, d], name="Z")
    return Z, [G, P, S]


def _want(g, p, s):
    """``Z[b, i, d] = G[b, i, d] * sum_{j >= L-1-i} G[b, j, d] P[b, d // 8, j, L-1-i] / S[b, d // 8, j]``."""
    g, p, s = (a.astype(np.float64) for a in (g, p, s))
    heads = np.arange(D) // 8
    mask = np.arange(L)[None, :] <= np.arange(L)[:, None]  # [j, i]: i <= j
    y = np.einsum("ji,bjd,bdji,bdj->bid", mask, g, p[:, heads], 1 / s[:, heads])
    return y[:, ::-1] * g


def test_a_block_of_four_rows_over_a_causal_sums_fused_loops_takes_the_count():
    Z, inputs = _program(ta.size_var("n"))
    kernel = ta.build(Z, inputs)
    assert [rows for rows, _ in kernel.parts] == [256, 64, 8, 4, 1] and all(kernel.bounded)
    rng = np.random.default_rng(0)
    for n in (1, 3, 4, 7, 12, 70):
        arrays = []
        for t in inputs:
            a = np.full((n + 2, *t.shape[1:]), np.nan, np.float32)
            a[:n] = rng.uniform(0.5, 1.5, (n, *t.shape[1:]))
            arrays.append(a[:n])
        np.testing.assert_allclose(kernel(*arrays), _want(*arrays), rtol=1e-5, atol=1e-5)
        static_out, static_in = _program(n)
        assert kernel.work_at(n) == ta.lower(static_out, static_in).work, f"work at n={n}"
