"""Convolutions on the packed library: the weight gradient reads its input's windows with range
checks (no padded copy), packed by masked register transposes, or padded copies of chunks of its
images; a stride-2 forward packs every other element of its input's rows run by run.

Oracles: NumPy formulas of the convolution's gradients written here (float64) and
``ta.evaluate``; odd shapes (prime sizes, a batch of 1, stride 3, dilation 2, padding larger
than the kernel) and both thread counts.
"""

import numpy as np
import pytest

import tensorad as ta

RNG = np.random.default_rng(11)


def _pad(x, p):
    return np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))


def _conv_grads(x, w, h, stride, pad, dil):
    """dX, dW of Y[n, f, y, x] = sum_{c, ry, rx} Xp[n, c, y*s + ry*d, x*s + rx*d] W[f, c, ry, rx]."""
    xp = _pad(x, pad)
    gxp = np.zeros_like(xp)
    gw = np.zeros_like(w)
    oh, ow = h.shape[2:]
    for ry in range(w.shape[2]):
        for rx in range(w.shape[3]):
            ys = slice(ry * dil, ry * dil + stride * (oh - 1) + 1, stride)
            xs = slice(rx * dil, rx * dil + stride * (ow - 1) + 1, stride)
            win = xp[:, :, ys, xs]
            gw[:, :, ry, rx] = np.einsum("nfyx,ncyx->fc", h, win)
            gxp[:, :, ys, xs] += np.einsum("nfyx,fc->ncyx", h, w[:, :, ry, rx])
    gx = gxp[:, :, pad:pad + x.shape[2], pad:pad + x.shape[3]]
    return gx, gw


@pytest.mark.parametrize("dtype,target", [("float32", "llvm"), ("float64", "llvm"),
                                          ("float32", "llvm -mcpu=x86-64")])  # (SSE: masked loads by lanes)
def test_weight_gradient_packs_unpadded_input_windows_by_masked_transposes(dtype, target):
    # dW[f, c, ry, rx] = sum_{n, y, x} H[n, f, y, x] * X[n, c, y + ry - 1, x + rx - 1] reads X
    # contiguously along the sum (x) under range checks: the library transposes it in
    # registers, masked at the borders, instead of copying runs of 3 taps (3x slower)
    X = ta.placeholder((2, 5, 11, 13), dtype, "X")
    W = ta.placeholder((7, 5, 3, 3), dtype, "W")
    Y = ta.topi.nn.conv2d(X, W, 1, 1)
    H = ta.placeholder(Y.shape, dtype, "H")
    (gw,) = ta.JacobianRecursive(Y, [W], H)
    kern = ta.build([gw], [X, H], microkernel=True, parallel_min_work=0, target=target)
    assert "matrix product" in str(kern.lowered) and ".padded" not in str(kern.lowered)
    assert "packB_transpose" in kern.compiled.llvm_ir_unoptimized
    x, h = RNG.standard_normal(X.shape).astype(dtype), RNG.standard_normal(H.shape).astype(dtype)
    w = RNG.standard_normal(W.shape).astype(dtype)
    want = _conv_grads(x.astype(np.float64), w.astype(np.float64), h.astype(np.float64), 1, 1, 1)[1]
    tol = 1e-4 if dtype == "float32" else 1e-11
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(x, h), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("n,c,f,size,k,stride,pad,dil", [
    (1, 3, 5, (17, 19), 3, 1, 1, 1),
    (2, 2, 3, (13, 11), 3, 1, 4, 1),   # padding larger than the kernel
    (2, 3, 4, (23, 17), 3, 1, 2, 2),   # dilation 2
    (1, 2, 3, (19, 13), 3, 3, 1, 1),   # stride 3
    (2, 3, 5, (23, 37), 3, 2, 1, 1),   # stride 2: dW packs every other element by transposes
    (1, 2, 3, (17, 41), 3, 2, 3, 2),   # stride 2, dilation 2, padding larger than the kernel
    (3, 1, 1, (7, 5), 1, 1, 0, 1),     # 1x1 kernel, one channel
    (2, 4, 6, (29, 31), 5, 1, 2, 1),
])
def test_convolution_gradients_on_odd_shapes(n, c, f, size, k, stride, pad, dil):
    X = ta.placeholder((n, c) + size, "float32", "X")
    W = ta.placeholder((f, c, k, k), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, stride, pad, dil)
    H = ta.placeholder(Y.shape, "float32", "H")
    gx, gw = ta.JacobianRecursive(Y, [X, W], H)
    kern = ta.build([gx, gw], [X, W, H], microkernel=True, parallel_min_work=0)
    if stride == 2 and dil == 1:
        assert "packB_transpose2" in kern.compiled.llvm_ir_unoptimized
    x, w = RNG.standard_normal(X.shape).astype(np.float32), RNG.standard_normal(W.shape).astype(np.float32)
    h = RNG.standard_normal(H.shape).astype(np.float32)
    want = _conv_grads(x.astype(np.float64), w.astype(np.float64), h.astype(np.float64), stride, pad, dil)
    for threads in (1, 2):
        kern.num_threads = threads
        for got, ref in zip(kern(x, w, h), want):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def _check_weight_gradient(size, stride: int, pad: int, target: str):
    """The micro-kernel build of a 3x3 convolution's weight gradient over 2 x 3 x ``size`` images,
    checked at 1 and 2 threads against the float64 NumPy formula."""
    X = ta.placeholder((2, 3) + size, "float32", "X")
    W = ta.placeholder((5, 3, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, stride, pad)
    H = ta.placeholder(Y.shape, "float32", "H")
    (gw,) = ta.JacobianRecursive(Y, [W], H)
    kern = ta.build([gw], [X, H], microkernel=True, parallel_min_work=0, target=target)
    x, h = RNG.standard_normal(X.shape).astype(np.float32), RNG.standard_normal(H.shape).astype(np.float32)
    want = _conv_grads(x.astype(np.float64), np.zeros(W.shape), h.astype(np.float64), stride, pad, 1)[1]
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(x, h), want, rtol=1e-4, atol=1e-4)
    return kern


@pytest.mark.parametrize("size,pad", [((13, 25), 1), ((16, 28), 0), ((11, 21), 1)])
def test_stride_2_weight_gradient_with_short_rows_packs_by_transposes(size, pad):
    # output rows of 13, 13 and 11 (a ResNet stage's 14 x 14): one register transpose of 8
    # every-other elements per row and the rest element by element -- not run-wise copies
    # of the kernel's 3-wide rows (8 x 128 x 28 x 28 -> 256 channels: 26 ms against 43)
    kern = _check_weight_gradient(size, 2, pad, "llvm -mcpu=haswell")
    assert "packB_transpose2" in kern.compiled.llvm_ir_unoptimized


def _descriptor_fields(kern) -> list[list[int]]:
    import re

    text = kern.compiled.llvm_ir_unoptimized
    return [[int(v) for v in re.findall(r"i64 (-?\d+)", m)]
            for m in re.findall(r"_desc\" = private constant \[\d+ x i64\] \[([^\]]*)\]", text)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_side_without_batch_axes_is_packed_once_per_call(dtype):
    # C[b, i, j] = sum_k A[i, k] * B[b, k, j]: A is the same at every batch point (a
    # convolution's weights), so the driver packs it once per call, in blocks of KC x MC
    # (small blocks here: several of each), instead of once per batch point and column block
    from tensorad.codegen.gemm import descriptor as gd

    A = ta.placeholder((37, 45), dtype, "A")
    B = ta.placeholder((5, 45, 53), dtype, "B")
    k = ta.reduce_axis((0, 45), "k")
    C = ta.compute((5, 37, 53), lambda b, i, j: ta.sum(A[i, k] * B[b, k, j], k), name="C")
    kern = ta.build([C], [A, B], microkernel=True, parallel_min_work=0, tile=(None, None, 16, 8))
    assert [f[gd.H_APRE] for f in _descriptor_fields(kern)] == [1]
    a, bb = RNG.standard_normal((37, 45)).astype(dtype), RNG.standard_normal((5, 45, 53)).astype(dtype)
    tol = 1e-4 if dtype == "float32" else 1e-11
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(a, bb), np.einsum("ik,bkj->bij", a, bb), rtol=tol, atol=tol)
    # B's side reads the batch axis: not marked
    Cb = ta.compute((5, 53, 37), lambda b, j, i: ta.sum(B[b, k, j] * A[i, k], k), name="Cb")
    kb = ta.build([Cb], [A, B], microkernel=True, parallel_min_work=0, tile=(None, None, 16, 8))
    assert [f[gd.H_APRE] for f in _descriptor_fields(kb)] == [0]
    np.testing.assert_allclose(kb(a, bb), np.einsum("ik,bkj->bji", a, bb), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batches", [2, 3])
def test_side_b_without_batch_axes_is_packed_once_per_call(dtype, batches):
    # C[b, i, j] = sum_k A[b, i, k] * B[k, j]: shared weights on the right (a channels-last
    # convolution batched over (n, y), dX of one), so the driver packs B once per call, in
    # blocks of KC (several here) by column blocks (several: few batch points), instead of once
    # per batch point and column block; with 2 threads a thread's blocks may read each column
    # block once, and then B is packed per block as before.  Side A (12001 rows a batch point) is past
    # what the library packs once per call, so the batch points stay batch points, not rows
    from tensorad.codegen.gemm import descriptor as gd

    A = ta.placeholder((batches, 12001, 45), dtype, "A")
    B = ta.placeholder((45, 53), dtype, "B")
    k = ta.reduce_axis((0, 45), "k")
    C = ta.compute((batches, 12001, 53), lambda b, i, j: ta.sum(A[b, i, k] * B[k, j], k), name="C")
    kern = ta.build([C], [A, B], microkernel=True, parallel_min_work=0, tile=(None, None, 16, 8))
    assert [(f[gd.H_APRE], f[gd.H_BPRE]) for f in _descriptor_fields(kern)] == [(0, 1)]
    a = RNG.standard_normal((batches, 12001, 45)).astype(dtype)
    bb = RNG.standard_normal((45, 53)).astype(dtype)
    tol = 1e-4 if dtype == "float32" else 1e-11
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(a, bb), np.einsum("bik,kj->bij", a, bb), rtol=tol, atol=tol)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("size,pad", [
    ((7, 15), 0),   # no padding, no range checks: rows of 13 in 15-wide input rows
    ((7, 7), 0),    # rows of 5: a third of AVX-512's 16-row block
    ((14, 14), 1),  # range-checked: a ResNet stage's 14 x 14
    ((7, 7), 1),
    ((9, 6), 2),    # padding 2: two masked lanes at each end of a row
])
def test_weight_gradient_with_rows_shorter_than_a_transpose_block(target, size, pad):
    """dW sums over ``k = (n, y, x)``: its input's windows run along ``x`` for one output row,
    shorter than a register-transpose block here; each run is one masked block whose positions
    past the run are not stored, with or without range checks, in panels whose last one is
    partly empty (3 channels x 9 taps = 27 columns).  Oracle: the NumPy formula, float64."""
    kern = _check_weight_gradient(size, 1, pad, target)
    assert ".padded" not in str(kern.lowered)
    assert "packB_transpose" in kern.compiled.llvm_ir_unoptimized


def _conv_forward(x, w, stride, pad):
    """Y[n, f, y, x] = sum_{c, ry, rx} Xp[n, c, y*s + ry, x*s + rx] W[f, c, ry, rx] (float64)."""
    xp = _pad(x.astype(np.float64), pad)
    k = w.shape[2]
    oh, ow = ((s + 2 * pad - k) // stride + 1 for s in x.shape[2:])
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for ry in range(k):
        for rx in range(k):
            win = xp[:, :, ry:ry + stride * (oh - 1) + 1:stride, rx:rx + stride * (ow - 1) + 1:stride]
            y += np.einsum("ncyx,fc->nfyx", win, w[:, :, ry, rx].astype(np.float64))
    return y


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell", "llvm -mcpu=x86-64"])
@pytest.mark.parametrize("n,c,f,size,pad,stride", [
    (1, 5, 9, (33, 33), 2, 1),     # output rows of 35, a padded copy's
    (1, 5, 9, (33, 33), 2, 2),     # rows of 18: pieces of panels shorter than a vector
    (2, 2, 33, (30, 70), 0, 1),    # rows of 68, unpadded: no range checks
    (2, 2, 33, (30, 70), 0, 2),    # rows of 34
    (1, 7, 3, (9, 999), 1, 1),     # rows of 999, fewer rows than a register tile
    (1, 7, 3, (9, 999), 1, 2),     # rows of 500
    (1, 16, 8, (30, 60), 1, 1),    # rows of 60, under range checks
    (1, 16, 8, (30, 60), 1, 2),    # rows of 30
    (2, 8, 16, (21, 21), 1, 1),    # rows of 21
    (1, 4, 8, (17, 7), 1, 1),      # rows of 7: every vector across runs
])
def test_forward_packs_windows_run_by_run(target, n, c, f, size, pad, stride):
    # the forward reads its input's rows along the outputs' columns, at the stride: whole vectors of a
    # run or of two (masked loads of each one's lanes), at stride 2 the even lanes of two loads, a
    # run's rest as one overlapping vector and a piece shorter than a vector by masked loads
    X = ta.placeholder((n, c) + size, "float32", "X")
    W = ta.placeholder((f, c, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, stride, pad)
    kern = ta.build(Y, [X, W], microkernel=True, parallel_min_work=0, target=target)
    assert f"packB_copy{'2' * (stride == 2)}\"" in kern.compiled.llvm_ir_unoptimized
    x, w = RNG.standard_normal(X.shape).astype(np.float32), RNG.standard_normal(W.shape).astype(np.float32)
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(x, w), _conv_forward(x, w, stride, pad), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype,n", [("float32", 4), ("float64", 5)])
def test_weight_gradient_pads_its_input_chunk_by_chunk_of_the_sum(dtype, n):
    """dW sums over ``k = (n, y, x)`` and has no batch axis, and a zero-padded copy of the whole
    input would outgrow the kernel's largest argument (the input itself): the product was then
    only ever packed through masked loads.  It now runs in pieces along ``n``, each reading a
    padded copy of its images, the pieces after the first adding to the gradient the earlier
    ones stored (an odd batch: pieces of unequal size).  Oracle: the NumPy formula, float64, at 1
    and 2 threads."""
    X = ta.placeholder((n, 32, 14, 14), dtype, "X")
    W = ta.placeholder((16, 32, 3, 3), dtype, "W")
    Y = ta.topi.nn.conv2d(X, W, 1, 1)
    H = ta.placeholder(Y.shape, dtype, "H")
    (gw,) = ta.JacobianRecursive(Y, [W], H)
    offered = ta.lower([gw], [X, H], parallel_min_work=0, variants=True).offered
    choices = {point: "padded" for point, labels, _ in offered if "padded" in labels}
    assert choices, offered
    kern = ta.build([gw], [X, H], parallel_min_work=0, choices=choices)
    loops = str(kern.lowered)
    assert loops.count("emitted as a matrix product") >= 2 and ".padded" in loops, loops
    x, h = RNG.standard_normal(X.shape).astype(dtype), RNG.standard_normal(H.shape).astype(dtype)
    want = _conv_grads(x.astype(np.float64), np.zeros(W.shape), h.astype(np.float64), 1, 1, 1)[1]
    tol = 1e-4 if dtype == "float32" else 1e-11
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(x, h), want, rtol=tol, atol=tol)
