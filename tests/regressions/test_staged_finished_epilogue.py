"""A program over a symbolic batch that scales a sum over the rows after it is made (a mean's ``1 / n``, batch
norm's ``1 / sqrt(var + eps)``) runs past one block as stages, the sum finished by one stage and read by
the next.  The next stage once computed that scaling as a nest of its own, counted as work, where the
static program computes it as the epilogue of the sum's nest: past 64 rows the generic batch norm ran 3
more than the static program (one per channel), the log-softmax NLL's mean 1 more.  A later stage now
computes an elementwise tensor that alone reads a finished sum, at its own index, once after the sum's
last block, bookkeeping as the static program's fused epilogue is; a sum read by several tensors, or
that is a program output, keeps its readers' nests counted, as the static program does."""

import numpy as np
import pytest

import tensorad as ta
from fuzz.cheap import pinned

TARGET = pinned("llvm -mcpu=haswell")  # (the cost model's choices pinned: the same counts on every CPU)
SIZES = (1, 7, 64, 65, 300)


def _program(n, also_read: bool, shown: bool):
    """``Y[i, j] = X[i, j] * E[j]``, ``E[j] = 1 / sqrt(S[j] / n + 1)``, ``S[j]`` the sum of ``X[:, j]``
    squared; with ``also_read``, ``Y`` reads ``S`` too; with ``shown``, ``S`` is an output too."""
    X = ta.placeholder((n, 6), name="X")
    k = ta.reduce_axis((0, n), "k")
    S = ta.compute((6,), lambda j: ta.sum(X[k, j] * X[k, j], axis=k), name="S")
    E = ta.compute((6,), lambda j: 1.0 / ta.sqrt(S[j] / ta.cast("float32", n) + 1.0), name="E")
    Y = ta.compute((n, 6), lambda i, j: X[i, j] * E[j] + (S[j] if also_read else 0.0), name="Y")
    return ([Y, S] if shown else [Y]), [X]


@pytest.mark.parametrize("also_read,shown", [(False, False), (True, False), (False, True)])
def test_generic_work_is_the_static_programs_and_results_numpys(also_read, shown):
    outputs, inputs = _program(ta.size_var("n"), also_read, shown)
    kernel = ta.build(outputs, inputs, target=TARGET)
    assert kernel.generic
    rng = np.random.default_rng(0)
    for size in SIZES:
        static = ta.lower(*_program(size, also_read, shown), target=TARGET)
        assert kernel.work_at(size) == static.work, f"n={size}"
        x = rng.standard_normal((size, 6)).astype(np.float32)
        got = kernel(x)
        got = got if isinstance(got, tuple) else (got,)
        x64 = x.astype(np.float64)
        s = (x64 * x64).sum(0)
        y = x64 / np.sqrt(s / size + 1.0) + (s if also_read else 0.0)
        np.testing.assert_allclose(got[0], y, rtol=2e-5, atol=2e-5 * max(1.0, np.abs(y).max()))
        if shown:
            np.testing.assert_allclose(got[1], s, rtol=2e-5)
