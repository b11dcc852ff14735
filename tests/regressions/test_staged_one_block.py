"""A staged program (a sum over the rows read after it is made, or the count of rows read as a value) runs
a call of at most ``BLOCK`` rows as one block of one kernel: its sums complete in the block, so one
native call replaces a kernel per stage (batch norm's three passes over its input were 1.4-1.8x the
static kernel's one at a few rows).  Past ``BLOCK`` rows it runs its stages.  Every size reads and
writes the given rows only (NaN past the inputs, a sentinel past the outputs), and equals NumPy's
formula; a sum of terms that read no row, read in the block, keeps the stages (its loop would run the
block's rows, not the call's)."""

import os
import sys

import numpy as np
import pytest

import tensorad as ta
from tensorad.symbolic import BLOCK

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzz.cheap import pinned  # noqa: E402

SIZES = (1, 2, 7, 17, BLOCK, BLOCK + 1, 200)


def _centered(n):
    """``Y = (X - mean) / n`` and the column sums of ``X``: a sum over the rows read by every row."""
    X = ta.placeholder((n, 5), name="X")
    k = ta.reduce_axis((0, n), "k")
    S = ta.compute((5,), lambda j: ta.sum(X[k, j], axis=k), name="S")
    inv = ta.cast("float32", ta.const(1.0, "float64") / ta.cast("float64", n))
    Y = ta.compute((n, 5), lambda i, j: (X[i, j] - S[j] * inv) * inv, name="Y")
    return X, S, Y


def _reference(x):
    x = x.astype(np.float64)
    return (x - x.mean(0)) / len(x), x.sum(0)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_staged_program_runs_one_block_up_to_its_rows(threads):
    X, S, Y = _centered(ta.size_var("n"))
    kernel = ta.build([Y, S], [X], num_threads=threads)
    assert kernel.generic
    rng = np.random.default_rng(threads)
    for size in SIZES:
        assert (len(kernel.stages(size)) == 1) == (size <= BLOCK)
        x = np.full((size + 3, 5), np.nan, np.float32)
        x[:size] = rng.standard_normal((size, 5))
        y, s = np.full((size + 3, 5), 7.0, np.float32), np.empty(5, np.float32)
        kernel(x[:size], out=(y[:size], s))
        assert (y[size:] == 7.0).all()
        want_y, want_s = _reference(x[:size])
        np.testing.assert_allclose(y[:size], want_y, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-5)


def test_a_checked_staged_kernel_runs_every_size():
    X, S, Y = _centered(ta.size_var("n"))
    kernel = ta.build(Y, [X], checked=True)
    for size in (1, 7, BLOCK + 1):
        x = np.random.default_rng(size).standard_normal((size, 5)).astype(np.float32)
        np.testing.assert_allclose(kernel(x), _reference(x)[0], rtol=1e-5, atol=1e-6)


def test_a_sum_of_terms_that_read_no_row_keeps_the_stages():
    n = ta.size_var("n")
    X, W = ta.placeholder((n, 3), name="X"), ta.placeholder((3,), name="W")
    k = ta.reduce_axis((0, n), "k")
    S = ta.compute((3,), lambda j: ta.sum(W[j], axis=k), name="S")
    Y = ta.compute((n, 3), lambda i, j: X[i, j] * S[j], name="Y")
    T = ta.compute((n, 3), lambda i, j: X[i, j] * 2.0, name="T")
    kernel = ta.build([Y, T], [X, W])
    assert kernel.generic
    w = np.array([1.0, 2.0, 3.0], np.float32)
    for size in (1, 3, 7, BLOCK + 1):
        x = np.ones((size, 3), np.float32)
        y, t = kernel(x, w)
        np.testing.assert_allclose(y, x * w * size)
        np.testing.assert_allclose(t, 2 * x)


def test_a_call_of_the_last_calls_size_checks_its_arrays_and_picks_its_outputs():
    """A call of the last call's size takes the plan made for it without reading its arrays again: it
    still refuses arrays that disagree on the size, and returns the program's outputs only (a one-block
    kernel's sums are outputs of its own), as a new size does."""
    n = ta.size_var("n")
    X, T = ta.placeholder((n, 4), name="X"), ta.placeholder((n, 4), name="T")
    k = ta.reduce_axis((0, n), "k")
    S = ta.compute((4,), lambda j: ta.sum(X[k, j] * T[k, j], axis=k), name="S")
    Y = ta.compute((n, 4), lambda i, j: X[i, j] - S[j], name="Y")
    kernel = ta.build(Y, [X, T])
    rng = np.random.default_rng(0)
    for size in (1, 7, 7, BLOCK + 1, BLOCK + 1, 7, 1):
        x, t = rng.standard_normal((2, size, 4)).astype(np.float32)
        np.testing.assert_allclose(kernel(x, t), x - (x.astype(np.float64) * t).sum(0), rtol=1e-5, atol=1e-5)
        with pytest.raises(ValueError, match=f"disagree on size n: X gives {size}, T gives {size + 1}"):
            kernel(x, np.zeros((size + 1, 4), np.float32))
        with pytest.raises(ValueError, match=f"disagree on size n: X gives {size}, T gives {size + 1}"):
            kernel(x, np.zeros((size + 1, 4), np.float32))


def test_a_call_of_a_few_rows_runs_a_block_made_for_a_few_rows():
    """A call of at most 8 rows runs one block of a kernel made for 8 rows, whose work is near the static
    program's there: the 64-row block, run short, kept code chosen for 64 rows (a Transformer block's
    mean loss at 7 rows took 1.6x the static kernel's time)."""
    X, S, Y = _centered(ta.size_var("n"))
    kernel = ta.build([Y, S], [X])
    for size in (2, 7, 8):
        assert kernel.work_at(size) <= 2 * ta.lower([Y, S], [X], sizes={"n": 8}).work
        assert [rows for rows, _ in kernel.stages(size)[0][0].parts] == [8]
    assert [rows for rows, _ in kernel.stages(9)[0][0].parts] == [BLOCK]


def _classifier(n):
    """The gradient of a mean cross-entropy over ``n`` rows with respect to a linear layer's weights:
    its logits' gradient, ``n x 256``, is larger than the weights past 16 rows."""
    X, W = ta.placeholder((n, 8), name="X"), ta.placeholder((8, 256), name="W")
    labels, H = ta.placeholder((n,), "int32", name="labels"), ta.placeholder((), name="H")
    loss = ta.topi.nn.cross_entropy(ta.topi.matmul(X, W), labels)
    return ta.JacobianRecursive(ta.topi.sum(loss * H), [W]), [X, W, labels, H]


@pytest.mark.slow
def test_a_call_of_a_few_rows_runs_code_lowered_for_a_few_rows():
    """A staged program whose buffers depend on its rows (a logits gradient inlined into the weights'
    gradient at 64 rows, where it is larger than the weights, stored at 16) runs a call of 9-16 rows as
    a block lowered for 16 rows, which the cost model prices below the 64-row block's code per row: at 16
    rows its work is the static program's.  Each size equals NumPy's formula."""
    target = pinned("llvm -mcpu=haswell")
    grads, inputs = _classifier(ta.size_var("n"))
    kernel = ta.build(grads, inputs, target=target)
    static = _classifier(16)
    assert kernel.work_at(16) == ta.lower(*static, target=target).work
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 256)).astype(np.float32)
    for size in (7, 16, 40):
        x = rng.standard_normal((size, 8)).astype(np.float32)
        labels = rng.integers(0, 256, size).astype(np.int32)
        logits = x.astype(np.float64) @ w
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(size), labels] -= 1
        np.testing.assert_allclose(kernel(x, w, labels, np.float32(0.5)), x.T @ p * 0.5 / size, atol=1e-5)
