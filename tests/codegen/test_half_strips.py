"""A reduction stored in a half dtype keeps its strip loop order.

A column sum ``B[j] = bfloat16(sum_i H[i, j])`` accumulates in float32.  The strip form
accumulates in the output buffer, which a bfloat16 output cannot hold; fusing the rounding
consumer into the sum once forced scalar accumulators walking ``H`` down its columns (a
bfloat16 layer norm's dgamma and dbeta: 7x slower than PyTorch).  The epilogue fusion now
costs the loop order it would really get, so the sum keeps its strips in a float32 temporary
and the rounding is a pass of its own over the (short) output.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from tensorad.codegen.program import Nest

import tensorad as ta

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(11)


def _nests(lowered):
    return [s for s in lowered.program.steps if isinstance(s, Nest)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_column_sum_accumulates_in_float32_strips(dtype):
    rows, cols = 200, 96
    H = ta.placeholder((rows, cols), dtype, "H")
    B = ta.topi.sum(H, axis=0)
    assert B.dtype == dtype
    lowered = ta.lower([B], [H])
    sums = [n for n in _nests(lowered) if "sum over" in n.note]
    assert len(sums) == 1 and "accumulates in the output" in sums[0].note, [n.note for n in _nests(lowered)]
    assert lowered.work == rows * cols + cols  # the sum, then one rounding per column
    npdt = BF16 if dtype == "bfloat16" else np.dtype(np.float16)
    h = RNG.uniform(-1, 1, (rows, cols)).astype(npdt)
    got = ta.build([B], [H])(h)
    want = h.astype(np.float64).sum(0)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2, atol=2e-2)


def test_bfloat16_layer_norm_parameter_gradients_read_whole_rows():
    n, t, c = 3, 10, 96
    X = ta.placeholder((n, t, c), "bfloat16", "X")
    G = ta.placeholder((c,), "bfloat16", "G")
    Bt = ta.placeholder((c,), "bfloat16", "Bt")
    H = ta.placeholder((n, t, c), "bfloat16", "H")
    Y = ta.topi.nn.layer_norm(X, G, Bt)
    dX, dG, dB = ta.gradient(Y, [X, G, Bt], H)
    lowered = ta.lower([dX, dG, dB], [X, G, Bt, H])
    # the column sums over the rows run in the row pass that reads the rows for dX
    column_sums = [s for s in _nests(lowered) if "column sum over the rows" in s.note]
    assert len(column_sums) == 1 and column_sums[0].note.count("column sum over the rows") == 2, \
        [s.note for s in _nests(lowered)]
    # a bfloat16 head widened and rounded back is the head: no round trip is left in the loops
    assert "bfloat16(float32(H" not in str(lowered)

    x, g, b, h = (RNG.uniform(lo, 1.5, s).astype(BF16) for lo, s in
                  ((-1.5, (n, t, c)), (0.5, (c,)), (-1.5, (c,)), (-1.5, (n, t, c))))
    got = ta.build([dX, dG, dB], [X, G, Bt, H])(x, g, b, h)
    x64, g64, h64 = (a.astype(np.float64) for a in (x, g, h))
    mu = x64.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat = (x64 - mu) * rstd
    dxhat = h64 * g64
    want_dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    for a, w in zip(got, (want_dx, (h64 * xhat).sum((0, 1)), h64.sum((0, 1)))):
        np.testing.assert_allclose(a.astype(np.float64), w, rtol=2e-2, atol=5e-2)
