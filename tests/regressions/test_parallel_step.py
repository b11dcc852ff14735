"""A parallel loop with a step (``range(0, 1001, 2)``, from isl's AST for a
``i % 2 == 0`` condition) was split among threads by iteration *count* ignoring the step: with
2 threads the second one started on an odd row and the even rows of the second half were
never computed.  Oracle: ``ta.evaluate`` (and a NumPy formula)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


@pytest.mark.parametrize("threads", [2, 3, 4])
@pytest.mark.parametrize("rows,modulus,offset", [(1001, 2, 0), (1000, 3, 1), (37, 5, 4)])
def test_strided_parallel_loop_computes_every_row(threads, rows, modulus, offset, rng):
    X = ta.placeholder((rows, 16), name="X")
    k = ta.reduce_axis((0, 1), name="k")
    Y = ta.compute((rows, 16), lambda i, j: ta.sum(X[i, j], axis=k, where=i % modulus == offset), name="Y")
    kern = ta.build([Y], [X], num_threads=threads, parallel_min_work=0)
    assert "parallel for" in str(kern.lowered) and f", {modulus}):" in str(kern.lowered)
    x = rng.uniform(-1, 1, (rows, 16)).astype(np.float32)
    want = np.where((np.arange(rows) % modulus == offset)[:, None], x, 0)
    got = kern(x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, ta.evaluate([Y], {X: x})[0])
