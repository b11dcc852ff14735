"""A generic kernel's matrix products over its rows run exactly the rows a call gives: a product whose
rows (a dense layer's), sum (its weight gradient's) or batch (attention's scores, per row) is the
kernel's rows reads the count of rows when it runs, so no block is padded (``kernel.why`` is empty), no
row past ``n`` is read (those rows hold NaN here) or written (they hold sentinels), and the products'
finishers and sums stay exact at every size, with infinities and NaN in the real rows."""

import re

import numpy as np
import pytest

import tensorad as ta

SIZES = (1, 2, 7, 17, 64, 1000)


def _views(arrays, n):
    """Each array as the first ``n`` rows of a larger one whose other rows are NaN."""
    out = []
    for a in arrays:
        big = np.full((n + 3, *a.shape[1:]), np.nan, a.dtype)
        big[:n] = a
        out.append(big[:n])
    return out


def _poisoned(rng, shape, n):
    a = rng.standard_normal(shape)
    if n > 2:
        a[n - 1, 0] = np.inf
        a[n // 2, 1] = np.nan
    return a


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_dense_layer_products_run_the_given_rows(threads):
    n = ta.size_var("n")
    X, W = ta.placeholder((n, 32), "float64", name="X"), ta.placeholder((48, 32), "float64", name="W")
    k = ta.reduce_axis((0, 32), "k")
    Y = ta.compute((n, 48), lambda i, j: ta.sum(X[i, k] * W[j, k], axis=k), name="Y")
    Z = ta.compute((n, 48), lambda i, j: ta.tanh(Y[i, j]), name="Z")
    H = ta.placeholder(Z.shape, "float64", name="H")
    forward = ta.build(Z, [X, W], microkernel=True, num_threads=threads)
    backward = ta.build(ta.JacobianRecursive(ta.topi.sum(Z * H), [X, W]), [X, W, H], microkernel=True,
                        num_threads=threads)
    assert forward.why == "" and backward.why == ""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((48, 32))
    for size in SIZES:
        x, h = _views([_poisoned(rng, (size, 32), size), rng.standard_normal((size, 48))], size)
        z_out = np.full((size + 3, 48), 7.0)
        dx_out = np.full((size + 3, 32), 7.0)
        with np.errstate(invalid="ignore", over="ignore"):
            z = np.tanh(x @ w.T)
            dz = h * (1 - z * z)
            want_dx, want_dw = dz @ w, dz.T @ x
            forward(x, w, out=z_out[:size])
            dx, dw = backward(x, w, h, out=(dx_out[:size], np.empty((48, 32))))
        np.testing.assert_allclose(z_out[:size], z, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dx, want_dx, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(dw, want_dw, rtol=1e-10, atol=1e-10)
        assert (z_out[size:] == 7.0).all() and (dx_out[size:] == 7.0).all()


def test_batched_products_over_rows_run_the_given_rows():
    n = ta.size_var("n")
    Q, K = ta.placeholder((n, 16, 8), "float64", name="Q"), ta.placeholder((n, 16, 8), "float64", name="K")
    d = ta.reduce_axis((0, 8), "d")
    S = ta.compute((n, 16, 16), lambda b, i, j: ta.sum(Q[b, i, d] * K[b, j, d], axis=d), name="S")
    H = ta.placeholder(S.shape, "float64", name="H")
    forward = ta.build(S, [Q, K], microkernel=True)
    backward = ta.build(ta.JacobianRecursive(ta.topi.sum(S * H), [Q, K]), [Q, K, H], microkernel=True)
    assert forward.why == "" and backward.why == ""
    rng = np.random.default_rng(1)
    for size in SIZES:
        q, k, h = _views([_poisoned(rng, (size, 16, 8), size), rng.standard_normal((size, 16, 8)),
                          rng.standard_normal((size, 16, 16))], size)
        s_out = np.full((size + 3, 16, 16), 7.0)
        with np.errstate(invalid="ignore"):
            want = np.einsum("bid,bjd->bij", q, k)
            want_dq, want_dk = np.einsum("bij,bjd->bid", h, k), np.einsum("bij,bid->bjd", h, q)
            forward(q, k, out=s_out[:size])
            dq, dk = backward(q, k, h)
        np.testing.assert_allclose(s_out[:size], want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dq, want_dq, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(dk, want_dk, rtol=1e-10, atol=1e-10)
        assert (s_out[size:] == 7.0).all()


def test_masked_product_over_rows_repairs_the_given_rows():
    """A product whose condition excludes terms packs their side as zeros, and its fixer recomputes each
    NaN of a finished block from the terms as written: over a generic kernel's rows it scans and repairs
    the rows the call gives (an infinity in ``X`` makes ``inf * 0`` where the condition excludes it)."""
    n = ta.size_var("n")
    X, W = ta.placeholder((n, 32), "float64", name="X"), ta.placeholder((32, 32), "float64", name="W")
    r = ta.reduce_axis((0, 32), "r")
    Y = ta.compute((n, 32), lambda i, j: ta.sum(X[i, r] * W[r, j], axis=r, where=r >= j), name="Y")
    kernel = ta.build(Y, [X, W], microkernel=True)
    assert kernel.why == ""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((32, 32))
    keep = np.arange(32)[:, None] >= np.arange(32)[None, :]  # keep[r, j]
    for size in SIZES:
        (x,) = _views([rng.standard_normal((size, 32))], size)
        x[size - 1, 3] = np.inf
        out = np.full((size + 3, 32), 7.0)
        kernel(x, w, out=out[:size])
        with np.errstate(invalid="ignore"):
            want = np.stack([(x[:, keep[:, j]] * w[keep[:, j], j]).sum(1) for j in range(32)], axis=1)
        np.testing.assert_allclose(out[:size], want, rtol=1e-12, atol=1e-12)
        assert (out[size:] == 7.0).all()


def test_a_product_over_a_batch_of_rows_shares_the_given_rows_among_threads():
    """A parallel product whose batch is a block's rows hands its threads chunks of its blocks: each
    chunk was a share of the whole block's batch (256 rows), so a call of a few rows gave all of them
    to one thread.  The chunk is a share of the rows below the count, which the block reads before it
    starts its threads; every size is right on two threads."""
    n = ta.size_var("n")
    Q, K = ta.placeholder((n, 16, 8), "float64", name="Q"), ta.placeholder((n, 16, 8), "float64", name="K")
    d = ta.reduce_axis((0, 8), "d")
    S = ta.compute((n, 16, 16), lambda b, i, j: ta.sum(Q[b, i, d] * K[b, j, d], axis=d), name="S")
    kernel = ta.build(S, [Q, K], microkernel=True, num_threads=2)
    main = re.search(r"define void @\w+_main\(.*?\n}\n", kernel.parts[0][1].llvm_ir, re.S).group(0)
    slot = r"(%[.\w]+) = getelementptr inbounds nuw ptr, ptr %[.\w]+, i64 2\n\s+(%[.\w]+) = load ptr"
    count = re.search(slot, main).group(2)  # (the count: the block's last input, after Q and K)
    threads = main[main.index("entry.if:"):main.index("@GOMP_parallel")]
    assert re.search(rf"getelementptr inbounds nuw i64, ptr {re.escape(count)}, i64 0", threads)
    rng = np.random.default_rng(2)
    for size in (1, 2, 7, 17, 300):
        q, k = rng.standard_normal((size, 16, 8)), rng.standard_normal((size, 16, 8))
        np.testing.assert_allclose(kernel(q, k), np.einsum("bid,bjd->bij", q, k), rtol=1e-12, atol=1e-12)
