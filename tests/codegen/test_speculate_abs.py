"""A data-tested ``if_then_else`` whose branches take ``abs`` is made a ``select``
(codegen/passes/speculate.py: ``abs`` is one bitwise and, not a costly function), so a smooth-L1 loss's
sum is vector code, not a branch per element."""

import re

import numpy as np

import tensorad as ta
from tensorad import topi


def test_smooth_l1_sum_is_a_vector_loop(rng):
    A = ta.placeholder((64, 256), "float32", "A")
    B = ta.placeholder((64, 256), "float32", "B")
    d = lambda i, j: A[i, j] - B[i, j]  # noqa: E731
    e = ta.compute(A.shape, lambda i, j: ta.if_then_else(ta.abs(d(i, j)) < 1.0, 0.5 * d(i, j) * d(i, j),
                                                         ta.abs(d(i, j)) - 0.5), name="e")
    Y = topi.mean(e)
    text = str(ta.lower([Y], [A, B]))
    assert "select((abs(" in text and "if_then_else" not in text
    kern = ta.build([Y], [A, B], num_threads=1, target="llvm -mcpu=haswell")
    assert re.search(r"fadd[^\n]*<8 x float>", kern.llvm_ir)
    a = rng.uniform(-2, 2, A.shape).astype(np.float32)
    b = rng.uniform(-2, 2, B.shape).astype(np.float32)
    a[0, 0], b[0, 1] = np.inf, np.nan
    kern = ta.build([Y], [A, B], num_threads=1)
    assert np.isnan(kern(a, b))  # (an inf and a NaN term)
    a[0, 0], b[0, 1] = 1.0, 1.0
    diff = a.astype(np.float64) - b
    want = np.where(np.abs(diff) < 1, 0.5 * diff * diff, np.abs(diff) - 0.5).mean()
    np.testing.assert_allclose(kern(a, b), want, rtol=1e-5)
