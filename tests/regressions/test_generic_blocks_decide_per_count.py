"""A staged program over ``n`` rows (a sum over the rows read after it is made) whose three products share
their rows' side ``X`` (``X Wq^T``, ``X Wk^T``, ``X Wv^T``): lowering stacks them into one product where
the shared side is large enough, from 16 rows here.  Its generic kernel ran a call of up to 64 rows as one
block of 64 rows, lowered at 64 rows, so calls of 9 to 15 rows ran stacked products (and the copies of the
weights that stacking makes) where the program written at their count runs three products: more work
than the static program's.  A one-block kernel now serves only the counts whose lowering decides as its
own does (a block of 15 rows runs 9 to 15), so at every count the generic kernel runs the static
program's work, and its values are NumPy's."""

import os
import sys

import numpy as np
import pytest

import tensorad as ta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzz.cheap import pinned  # noqa: E402

TARGET = pinned("llvm -mcpu=haswell")


def _program(n):
    X = ta.placeholder((n, 4), name="X")
    W = [ta.placeholder((4, 4), name=f"W{c}") for c in "qkv"]
    k = ta.reduce_axis((0, 4), "k")
    P = [ta.compute((n, 4), lambda i, j, w=w: ta.sum(X[i, k] * w[j, k], axis=k), name=f"P{c}")
         for w, c in zip(W, "qkv")]
    r = ta.reduce_axis((0, n), "r")
    S = ta.compute((4,), lambda j: ta.sum(X[r, j], axis=r), name="S")
    Y = ta.compute((n, 4), lambda i, j: P[0][i, j] * P[1][i, j] + P[2][i, j] * S[j], name="Y")
    return [Y], [X, *W]


def _stacked(lowered) -> bool:
    return any(name.endswith(".stacked") for name in lowered.plan[0])


@pytest.mark.slow  # (a generic build and 20 static lowerings: about 6 CPU-s)
def test_each_count_runs_the_static_programs_work():
    kernel = ta.build(*_program(ta.size_var("n")), target=TARGET)
    assert kernel.generic
    stacked = []
    for n in (*range(1, 18), 31, 33, 64):
        static = ta.lower(*_program(n), target=TARGET)
        stacked.append(_stacked(static))
        assert kernel.work_at(n) == static.work, f"n={n}"
    assert not stacked[0] and stacked[-1]  # (the decision changes between the counts checked)
    rng = np.random.default_rng(0)
    for n in (3, 12, 16, 40):
        x, *w = [rng.standard_normal(s).astype(np.float32) for s in ((n, 4), (4, 4), (4, 4), (4, 4))]
        q, k, v = (x.astype(np.float64) @ m.T.astype(np.float64) for m in w)
        want = q * k + v * x.astype(np.float64).sum(0)
        np.testing.assert_allclose(kernel(x, *w), want, rtol=1e-5, atol=1e-5)
