"""A generic kernel's product and parallel nests that read no row (a product of two weights, which every
row then multiplies by) run in its part's first block of a call only, where they ran in every block (a
Winograd transform of a convolution's weights ran once per 256 rows): a test of the first-block flag
around their calls, their values kept for the part's later blocks and made again by the next call.  The
kernel's work is the static program's at each count (pinned target: the cost model's product and
threads), and its values are NumPy float64's at one block and several, on one thread and two."""

import numpy as np

import tensorad as ta
from fuzz.cheap import pinned

TARGET = pinned("llvm -mcpu=haswell")


def _program(n):
    X, W = ta.placeholder((n, 96), name="X"), ta.placeholder((96, 96), name="W")
    k, k2 = ta.reduce_axis((0, 96), name="k"), ta.reduce_axis((0, 96), name="k2")
    E = ta.compute((96, 96), lambda i, j: ta.tanh(W[i, j]) * W[j, i], name="E")
    T = ta.compute((96, 96), lambda i, j: ta.sum(E[i, k] * W[k, j], axis=k), name="T")
    return ta.compute((n, 96), lambda i, j: ta.sum(X[i, k2] * T[k2, j], axis=k2), name="Y"), [X, W]


def test_a_product_of_weights_runs_once_per_call():
    kernel = ta.build(*_program(ta.size_var("n")), target=TARGET)
    assert kernel.generic and all(any(s.attrs.first_block and s.attrs.gemm is not None
                                      for s in part.lowered.program.steps if hasattr(s, "attrs"))
                                  for _, part in kernel.parts)
    rng = np.random.default_rng(5)
    for threads, size in [(t, s) for t in (1, 2) for s in (1, 7, 300, 600, 7)]:  # (one block; whole
        kernel.num_threads = threads  # blocks and a short one; new weights each call)
        assert kernel.work_at(size) == ta.lower(*_program(size), target=TARGET).work, f"n={size}"
        x = rng.standard_normal((size, 96)).astype(np.float32)
        w = (rng.standard_normal((96, 96)) * 0.2).astype(np.float32)
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        want = x64 @ ((np.tanh(w64) * w64.T) @ w64)
        np.testing.assert_allclose(kernel(x, w), want, rtol=1e-4, atol=1e-4)
