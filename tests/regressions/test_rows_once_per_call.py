"""Work of a generic kernel's block that reads no row (a sum over a weight's columns that every row then
scales by) runs in each part's first block of a call only, its values kept for the part's later blocks and
made again by the next call: the kernel's values are NumPy's at counts of one block and of several blocks,
with new weights on each call, and its work is the static program's."""

import numpy as np

import tensorad as ta


def _program(n):
    X = ta.placeholder((n, 6), name="X")
    W = ta.placeholder((6, 5), name="W")
    k = ta.reduce_axis((0, 5), name="k")
    T = ta.compute((6,), lambda j: ta.sum(W[j, k] * W[j, k], axis=k), name="T")
    return ta.compute((n, 6), lambda i, j: X[i, j] * T[j] + X[i, j], name="Y"), [X, W]


def test_work_that_reads_no_row_runs_once_per_call_and_part():
    Y, inputs = _program(ta.size_var("n"))
    kernel = ta.build(Y, inputs)
    assert kernel.generic and any(k.signature.once_work for _, k in kernel.parts)
    rng = np.random.default_rng(0)
    for size in (1, 7, 300, 600, 7):  # (one block; whole blocks and a short one)
        assert kernel.work_at(size) == ta.lower(*_program(size)).work, f"n={size}"
        x = rng.standard_normal((size, 6)).astype(np.float32)
        w = rng.standard_normal((6, 5)).astype(np.float32)  # (new weights each call: made again)
        np.testing.assert_allclose(kernel(x, w), x * (w * w).sum(1) + x, rtol=1e-5, atol=1e-5)
