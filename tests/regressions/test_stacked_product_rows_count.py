"""A stacked product over a generic kernel's rows (the query, key and value projections of a Transformer
block, stacked: batch axes ``(stack, rows)``) runs the rows below the count: with AVX2 tiles its 256-row
block once refused the count (the rows were not the batch's first axis) and ran whole blocks only.  The
rows lead the batch axes, and each call reads and writes its own rows only (NaN past the input's rows,
a sentinel past the output's), against ``ta.evaluate``."""

import sys
from pathlib import Path

import numpy as np
import pytest

import tensorad as ta

sys.path.insert(0, str(Path(__file__).parents[1] / "codegen"))
from test_generic_kernels import BLOCK_PARAMS, DIM, transformer_block  # noqa: E402


@pytest.mark.slow
def test_stacked_projection_over_rows_takes_the_count_with_avx2_tiles():
    b = ta.size_var("b")
    X = ta.placeholder((b, 7, DIM), name="X")
    params = {k: ta.placeholder(s, name=k) for k, s in BLOCK_PARAMS.items()}
    Y = transformer_block(X, params)
    kernel = ta.build(Y, [X, *params.values()], target="llvm -mcpu=haswell", num_threads=2)
    assert kernel.why == "" and all(kernel.bounded)
    rng = np.random.default_rng(0)
    values = [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in BLOCK_PARAMS.values()]
    for n in (1, 7, 255, 257):
        big = np.full((n + 2, 7, DIM), np.nan, np.float32)
        big[:n] = rng.standard_normal((n, 7, DIM))
        out = np.full((n + 2, 7, DIM), 7.0, np.float32)
        kernel(big[:n], *values, out=out[:n])
        want = ta.evaluate(Y, dict(zip([X, *params.values()], [big[:n], *values])))
        np.testing.assert_allclose(out[:n], want, rtol=1e-4, atol=1e-4)
        assert (out[n:] == 7.0).all()
