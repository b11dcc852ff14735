"""A product's rows over several output axes consecutive in C (codegen/gemm/contraction.py
``row_axes``): a channels-last convolution ``Y[b, y, x, o]`` is one product of ``H * W`` rows
per image, not ``H`` products of ``W`` rows -- fewer, fuller register tiles (counted, not timed)."""

import numpy as np
import pytest
from tensorad.codegen.gemm.contraction import match_contraction
from tensorad.codegen.target import parse_target

import tensorad as ta


def _conv_nhwc(n, h, w, c, o):
    X = ta.placeholder((n, h, w, c), "float32", "X")
    W = ta.placeholder((3, 3, c, o), "float32", "W")
    ry, rx, rc = ta.reduce_axis((0, 3), "ry"), ta.reduce_axis((0, 3), "rx"), ta.reduce_axis((0, c), "rc")
    Y = ta.compute((n, h, w, o), lambda b, y, x, f: ta.sum(
        ta.if_then_else((y + ry >= 1) & (y + ry <= h) & (x + rx >= 1) & (x + rx <= w),
                        X[b, y + ry - 1, x + rx - 1, rc], 0.0) * W[ry, rx, rc, f], axis=[ry, rx, rc]),
        name="Y")
    return X, W, Y


def _reference(x, w):
    n, h, wd, _ = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((n, h, wd, w.shape[3]))
    for ry in range(3):
        for rx in range(3):
            out += np.einsum("byxc,co->byxo", xp[:, ry:ry + h, rx:rx + wd], w[ry, rx].astype(np.float64))
    return out


def test_channels_last_conv_rows_are_one_axis_of_height_times_width():
    X, W, Y = _conv_nhwc(8, 28, 28, 64, 64)
    spec = match_contraction(Y.op, Y.op.body, target=parse_target("llvm -mcpu=skylake-avx512"))
    assert [a.extent for a in spec.m] == [28, 28] and [a.extent for a in spec.batch] == [8]
    # AVX-512's 8-row tiles: 98 per image over 784 rows, where 28 products of 28 rows took 4 each
    assert spec.mr == 8 and spec.batches * spec.k_steps == 8 * 98 * 576


@pytest.mark.parametrize("threads", [1, 2])
def test_channels_last_conv_values(rng, threads):
    X, W, Y = _conv_nhwc(4, 9, 7, 16, 24)  # 63 rows per image: partial tiles, rows across image lines
    x = rng.uniform(-1, 1, X.shape).astype(np.float32)
    w = rng.uniform(-1, 1, W.shape).astype(np.float32)
    x[1, 4, 6, 3] = np.inf  # unpadded, a guarded zero times it is NaN: the fixer walks the merged rows
    want = _reference(x, w)
    for strategy, shape in (("padded", "batch 2 of [63 x 144]"), ("microkernel", "batch 4 of [63 x 144]")):
        choices = {"Y#0": strategy}
        assert f"{shape} @ [144 x 24]" in str(ta.lower([Y], [X, W], choices=choices))
        for checked in (False, True):
            kern = ta.build([Y], [X, W], choices=choices, checked=checked, num_threads=threads,
                            parallel_min_work=0)
            np.testing.assert_allclose(kern(x, w), want, rtol=1e-4, atol=1e-4)


def test_rows_stay_batch_axes_where_the_columns_would_be_cut():
    """``X[b, y, x, c] W[c, o]`` with side A (8192 x 512) past what the library packs once per call:
    all of ``(b, y, x)`` as rows would leave one batch point, so the parallel loop would cut 128 columns
    into blocks that each pack A again: ``b`` stays a batch axis, ``(y, x)`` are the rows."""
    X = ta.placeholder((8, 32, 32, 512), "float32", "X")
    W = ta.placeholder((512, 128), "float32", "W")
    k = ta.reduce_axis((0, 512), "k")
    Y = ta.compute((8, 32, 32, 128), lambda b, y, x, o: ta.sum(X[b, y, x, k] * W[k, o], axis=k), name="Y")
    spec = match_contraction(Y.op, Y.op.body)
    assert [a.extent for a in spec.m] == [32, 32] and [a.extent for a in spec.batch] == [8]


def test_all_rows_merge_where_side_a_is_packed_once():
    """``X[b, y, x, c] W[c, o]`` with side A (512 x 64) packed once per call: more column blocks pack
    nothing again, so all of ``(b, y, x)`` are rows, one product whose B the column blocks share (before,
    ``b`` stayed a batch axis: each batch point's product packed B or its column blocks again)."""
    X = ta.placeholder((8, 8, 8, 64), "float32", "X")
    W = ta.placeholder((64, 128), "float32", "W")
    k = ta.reduce_axis((0, 64), "k")
    Y = ta.compute((8, 8, 8, 128), lambda b, y, x, o: ta.sum(X[b, y, x, k] * W[k, o], axis=k), name="Y")
    spec = match_contraction(Y.op, Y.op.body, target=parse_target("llvm -mcpu=haswell"))
    assert [a.extent for a in spec.m] == [8, 8, 8] and not spec.batch


@pytest.mark.parametrize("threads", [1, 2])
def test_merged_rows_values(rng, threads):
    """A Transformer's ``[b, n, d] @ [d, e]`` as one product of ``b * n`` rows (odd sizes: partial row
    tiles across batch points, an edge column panel), against NumPy in float64, bounds checked."""
    X = ta.placeholder((3, 21, 37), "float32", "X")
    W = ta.placeholder((37, 100), "float32", "W")
    Y = ta.topi.matmul(X, W)
    lowered = ta.lower([Y], [X, W], target="llvm -mcpu=haswell", microkernel=True)
    assert "[63 x 37] @ [37 x 100]" in str(lowered)
    x = rng.uniform(-1, 1, X.shape).astype(np.float32)
    w = rng.uniform(-1, 1, W.shape).astype(np.float32)
    want = x.astype(np.float64) @ w.astype(np.float64)
    for checked in (False, True):
        kern = ta.build([Y], [X, W], checked=checked, num_threads=threads, parallel_min_work=0,
                        microkernel=True)
        np.testing.assert_allclose(kern(x, w), want, rtol=1e-5, atol=1e-5)
