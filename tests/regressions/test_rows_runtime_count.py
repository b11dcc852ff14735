"""A generic kernel's blocks run exactly the rows they are given: a call of ``n`` rows reads and writes
rows ``[0, n)`` of its arrays only, with no padded block (``kernel.why`` is empty), at every size, its
outputs written into views of larger arrays whose rows past ``n`` must keep their sentinel values.
A parallel loop over rows once ran the whole block's rows past the count, writing beyond the arrays,
and a call of whole blocks only (512 rows) once ran them without writing their count."""

import numpy as np
import pytest

import tensorad as ta


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_rows_past_the_count_are_neither_read_nor_written(threads):
    n = ta.size_var("n")
    X = ta.placeholder((n, 24), name="X")
    Y = ta.topi.nn.softmax(X)
    H = ta.placeholder(Y.shape, name="H")
    (dX,) = ta.JacobianRecursive(ta.topi.sum(Y * H), [X])
    forward, backward = ta.build(Y, [X], num_threads=threads), ta.build(dX, [X, H], num_threads=threads)
    assert forward.why == "" and backward.why == ""  # (every block takes a runtime count of rows)
    rng = np.random.default_rng(0)
    for size in (1, 2, 7, 17, 64, 512, 1000):
        big_x = np.full((size + 8, 24), np.nan, np.float32)
        big_x[:size] = rng.standard_normal((size, 24))
        big_h = np.full((size + 8, 24), np.nan, np.float32)
        big_h[:size] = rng.standard_normal((size, 24))
        x, h = big_x[:size], big_h[:size]  # (rows past n are NaN: reading one shows in no result)
        y_out = np.full((size + 8, 24), 7.0, np.float32)
        g_out = np.full((size + 8, 24), 7.0, np.float32)
        forward(x, out=y_out[:size])
        backward(x, h, out=g_out[:size])
        y = _softmax(x.astype(np.float64))
        want = y * (h - (y * h).sum(1, keepdims=True))
        np.testing.assert_allclose(y_out[:size], y, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g_out[:size], want, rtol=1e-4, atol=1e-5)
        assert (y_out[size:] == 7.0).all() and (g_out[size:] == 7.0).all()


@pytest.mark.slow
def test_a_temporary_stored_through_rows_and_another_axis_scanned_as_one_takes_the_count():
    """A block of few rows scans rows and the next axis as one loop (``v // c``, ``v % c``); the max
    pool's gradient stores a temporary so, along its rows and its second axis: it is a buffer of rows
    whose loop takes the count, and the kernel has no padded block."""
    n = ta.size_var("n")
    X = ta.placeholder((n, 3, 7, 7), name="X")
    Y = ta.topi.nn.pool(X, [3, 3], [2, 2], [1, 1, 1, 1], "max")
    H = ta.placeholder(Y.shape, name="H")
    (dX,) = ta.JacobianRecursive(ta.topi.sum(Y * H), [X])
    kernel = ta.build(dX, [X, H])
    assert kernel.why == ""
    rng = np.random.default_rng(3)
    for size in (1, 2, 7, 17):
        x = rng.standard_normal((size, 3, 7, 7)).astype(np.float32)
        h = rng.standard_normal((size, 3, 4, 4)).astype(np.float32)
        out = np.full((size + 4, 3, 7, 7), 7.0, np.float32)
        kernel(x, h, out=out[:size])
        np.testing.assert_allclose(out[:size], ta.evaluate(dX, {X: x, H: h}), rtol=1e-5, atol=1e-6)
        assert (out[size:] == 7.0).all()


@pytest.mark.parametrize("threads", [1, 2])
def test_a_sum_over_rows_whose_terms_read_no_row_counts_the_given_rows(threads):
    """A sum over the rows whose terms read no array of rows (``sum_{i < n} W[j]``, ``n W[j]``) has no
    loop that a row count bounds: a block called on fewer rows than its own added all of its rows, so a
    call of one row returned 256 W.  It is its term times ``n``, the count of rows each block is given."""
    n = ta.size_var("n")
    X = ta.placeholder((n, 4), name="X")
    W = ta.placeholder((4,), name="W")
    k = ta.reduce_axis((0, n), "k")
    S = ta.compute((4,), lambda j: ta.sum(W[j] * 2.0, axis=k), name="S")
    kernel = ta.build(S, [X, W], num_threads=threads)
    assert kernel.generic and kernel.why == "" and all(kernel.bounded)
    w = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    for size in (1, 2, 3, 7, 17, 70, 300, 1000):
        np.testing.assert_allclose(kernel(np.zeros((size, 4), np.float32), w), 2.0 * size * w, rtol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_blocks_whose_sums_count_their_own_rows_run_whole(threads):
    """A sum over the rows and another axis whose terms read no row (``sum_{i < n, c < 3} W[j, c]``) is
    counted at each block's static rows: such blocks run whole, down to the unit's, and ``kernel.why``
    says why, as ``ta.lower(...).why`` does before anything compiles (it once said nothing)."""
    n = ta.size_var("n")
    X = ta.placeholder((n, 4), name="X")
    W = ta.placeholder((4, 3), name="W")
    k, c = ta.reduce_axis((0, n), "k"), ta.reduce_axis((0, 3), "c")
    S = ta.compute((4,), lambda j: ta.sum(W[j, c], axis=[k, c]), name="S")
    kernel = ta.build(S, [X, W], num_threads=threads)
    assert kernel.generic and "read no row buffer" in kernel.why and kernel.why == ta.lower(S, [X, W]).why
    assert not any(kernel.bounded[:-1])
    w = np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0
    for size in (1, 2, 3, 7, 17, 70, 300, 1000):
        np.testing.assert_allclose(kernel(np.zeros((size, 4), np.float32), w), size * w.sum(1), rtol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_sum_over_rows_with_a_term_that_reads_no_row_counts_the_given_rows(threads):
    """A sum over the rows with one term that reads rows and one that does not (the gradient of
    ``sum_i X[i, j] * W[j] + W[j]`` for ``W``, ``sum_i H[j] * (X[i, j] + 1)``) is factored at a block's
    static rows into ``H[j] * rows + H[j] * sum_i X[i, j]``: the count term, outside every loop over rows,
    counted the block's rows, not the call's (a call of 9 rows added 55 H too many).  Optimized over the
    size, the term is ``H[j] * n``, and a block's ``n`` is the count of rows it is given: every block
    takes the count."""
    n = ta.size_var("n")
    X, W = ta.placeholder((n, 6), "float64", name="X"), ta.placeholder((6,), "float64", name="W")
    i = ta.reduce_axis((0, n), "i")
    S = ta.compute((6,), lambda j: ta.sum(X[i, j] * W[j] + W[j], axis=i), name="S")
    H = ta.placeholder((6,), "float64", name="H")
    kernel = ta.build(ta.JacobianRecursive(ta.topi.sum(S * H), [W]), [X, W, H], num_threads=threads)
    rng = np.random.default_rng(0)
    w, h = rng.standard_normal(6), rng.standard_normal(6)
    for size in (1, 2, 3, 7, 9, 65, 257):
        x = rng.standard_normal((size, 6))
        np.testing.assert_allclose(kernel(x, w, h), h * (x.sum(0) + size), rtol=1e-12, atol=1e-12)
    assert kernel.generic and kernel.why == "" and all(kernel.bounded)



def test_the_bias_gradient_of_a_squared_error_over_rows_counts_the_given_rows():
    """``sum_i (X[i, j] + B[j])^2``'s gradient for ``B``, ``2 H[j] sum_i (X[i, j] + B[j])``, factors
    into ``2 H[j] rows B[j] + 2 H[j] sum_i X[i, j]`` at a block's static rows: on two threads a call of
    9 rows counted 64."""
    n = ta.size_var("n")
    X, B = ta.placeholder((n, 6), "float64", name="X"), ta.placeholder((6,), "float64", name="B")
    i = ta.reduce_axis((0, n), "i")
    S = ta.compute((6,), lambda j: ta.sum((X[i, j] + B[j]) * (X[i, j] + B[j]), axis=i), name="S")
    H = ta.placeholder((6,), "float64", name="H")
    (dB,) = ta.JacobianRecursive(ta.topi.sum(S * H), [B])
    kernel = ta.build(dB, [X, B, H], num_threads=2)
    rng = np.random.default_rng(1)
    b, h = rng.standard_normal(6), rng.standard_normal(6)
    for size in (1, 3, 7, 9, 17, 65, 1000):
        x = rng.standard_normal((size, 6))
        np.testing.assert_allclose(kernel(x, b, h), 2 * h * (x + b).sum(0), rtol=1e-12, atol=1e-12)
