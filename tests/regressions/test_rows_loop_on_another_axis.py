"""A generic kernel's block of 8 rows over a Transformer block of one token and 8 features: lowering fuses
a pass over the rows (a layer norm's variance gradient) with a sum over the features read column by column
(its mean gradient, ``sum_j dY[b, j] * G[j]``), one loop of 8 running the rows of one and the features of
the other.  A count of rows below 8 must not cut that loop short (it dropped the last features' terms
from every row's input gradient): the block runs whole blocks only, and each size's gradient equals
``ta.evaluate``'s."""

import sys
from pathlib import Path

import numpy as np
import pytest

import tensorad as ta

sys.path.insert(0, str(Path(__file__).parents[1] / "codegen"))
from test_generic_kernels import BLOCK_PARAMS, DIM, transformer_block  # noqa: E402


@pytest.mark.slow
def test_a_loop_over_rows_and_features_is_not_cut_short_by_the_count():
    b = ta.size_var("b", max=8)
    X = ta.placeholder((b, 1, DIM), name="X")
    params = {k: ta.placeholder(s, name=k) for k, s in BLOCK_PARAMS.items()}
    H = ta.placeholder((b, 1, DIM), name="H")
    (dX,) = ta.JacobianRecursive(ta.topi.sum(transformer_block(X, params) * H), [X])
    kernel = ta.build(dX, [X, *params.values(), H])
    assert [rows for rows, _ in kernel.parts] == [8, 4, 1] and not kernel.bounded[0]
    assert kernel.why.startswith("blocks of 8 rows run whole")
    rng = np.random.default_rng(0)
    values = [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in BLOCK_PARAMS.values()]
    for n in (3, 7, 8):
        x, h = rng.standard_normal((2, n, 1, DIM)).astype(np.float32)
        want = ta.evaluate(dX, dict(zip([X, *params.values(), H], [x, *values, h])))
        np.testing.assert_allclose(kernel(x, *values, h), want, rtol=1e-4, atol=1e-4)
