"""Short innermost loops fold their remainder into masked vector iterations on AVX-512
(codegen/llvm/masked_tails.py).

Structure: which loops get the hint, read from the kernel's IR for a pinned target (compiled
only, so these hold on any x86 host).  Values: the host's kernels against NumPy formulas
written here, for rows of every length around the vector widths -- on an AVX-512 host they
run the masked tails, on an AVX2 one the plain remainders, and both must agree with NumPy.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorad.codegen.llvm.ir_loops import PREDICATE_HINT
from tensorad.codegen.target import host_target, parse_target

import tensorad as ta

AVX512, AVX2 = "llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"


def _shifted_sum(rows: int, width: int, dtype: str = "float32", stride: int = 1):
    """``Y[i, j] = X[i, s j] * 2 + X[i, s j + 1]``: a row of ``width`` outputs."""
    X = ta.placeholder((rows, stride * width + 1), dtype, "X")
    Y = ta.compute((rows, width), lambda i, j: X[i, stride * j] * 2.0 + X[i, stride * j + 1], name="Y")
    return X, Y


def _masked(kernel) -> bool:
    return PREDICATE_HINT in kernel.llvm_ir_unoptimized


def test_the_target_says_whether_masks_are_cheap():
    assert parse_target(AVX512).masked_memory
    assert not parse_target(AVX2).masked_memory


@pytest.mark.parametrize("width, dtype, expected", [
    (26, "float32", True),    # 16 + 10 lanes: the tail folded
    (20, "float64", True),    # 8 lanes of float64: 8 + 8 + 4
    (32, "float32", False),   # whole vectors: nothing to fold
    (80, "float32", False),   # five vectors: the remainder is a small part
    (12, "float32", False),   # under one vector: no vector iteration to share it with
])
def test_which_rows_fold_their_tail(width, dtype, expected):
    X, Y = _shifted_sum(4, width, dtype)
    assert _masked(ta.build([Y], [X], target=AVX512)) is expected
    assert not _masked(ta.build([Y], [X], target=AVX2))  # (AVX2's masked store is microcoded on AMD)


def test_a_strided_read_keeps_its_remainder():
    """Stride-2 reads would become masked gathers (a max pool's rows ran 4.6x slower)."""
    X, Y = _shifted_sum(4, 26, stride=2)
    assert not _masked(ta.build([Y], [X], target=AVX512))


def test_a_reduction_keeps_its_remainder():
    X = ta.placeholder((4, 26), "float32", "X")
    k = ta.reduce_axis((0, 26), "k")
    S = ta.compute((4,), lambda i: ta.sum(X[i, k] * X[i, k], axis=k), name="S")
    assert not _masked(ta.build([S], [X], target=AVX512))


def test_a_grouped_convolution_rows_fold_their_tail():
    """The layer this was measured on: 4 channels a group at 28 x 28, its 26-wide interior."""
    X = ta.placeholder((2, 8, 28, 28), "float32", "X")
    W = ta.placeholder((8, 4, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, 1, 1, 1, groups=2)
    assert _masked(ta.build([Y], [X, W], target=AVX512))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(width=st.integers(1, 70), dtype=st.sampled_from(["float32", "float64"]),
       threads=st.sampled_from([1, 2]), fastmath=st.booleans())
def test_short_rows_match_numpy(width, dtype, threads, fastmath):
    """Every row length from 1 to 70 around the lanes of both types, on the host's target."""
    X, Y = _shifted_sum(5, width, dtype)
    x = np.random.default_rng(width).standard_normal((5, width + 1)).astype(dtype)
    x[0, :3] = [np.inf, -0.0, np.nan][: min(3, width + 1)]
    got = ta.build([Y], [X], num_threads=threads, fastmath=fastmath)(x)
    want = x[:, :width] * 2.0 + x[:, 1:width + 1]
    np.testing.assert_array_equal(got, want.astype(dtype))


@pytest.mark.slow
@settings(max_examples=15, deadline=None, derandomize=True)
@given(size=st.integers(20, 40), groups=st.integers(1, 3), threads=st.sampled_from([1, 2]))
def test_grouped_convolutions_match_numpy(size, groups, threads):
    """A grouped 3x3 convolution with padding 1 (rows of ``size - 2`` interior points) on the
    host's target against a NumPy formula over the zero-padded input."""
    cg = 4
    X = ta.placeholder((2, groups * cg, size, size), "float32", "X")
    W = ta.placeholder((groups * cg, cg, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, 1, 1, 1, groups=groups)
    rng = np.random.default_rng(size)
    x = rng.standard_normal(X.shape).astype(np.float32)
    w = rng.standard_normal(W.shape).astype(np.float32)
    got = ta.build([Y], [X, W], num_threads=threads)(x, w)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros(Y.shape)
    for f in range(groups * cg):
        g = f // cg
        for c in range(cg):
            for ry in range(3):
                for rx in range(3):
                    want[:, f] += w[f, c, ry, rx] * xp[:, g * cg + c, ry:ry + size, rx:rx + size]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_host_runs_masked_tails_where_it_has_masks():
    """On an AVX-512 host the values above came from masked tails (else from remainders)."""
    X, Y = _shifted_sum(3, 26)
    assert _masked(ta.build([Y], [X])) is host_target().masked_memory


def _rolled_masked_loops(kernel) -> int:
    """How many loops carry the masked-tail hint and LLVM's unroll.disable together."""
    text = kernel.llvm_ir_unoptimized
    pred = re.search(r'^(!\d+) = !\{ !"' + re.escape(PREDICATE_HINT) + '"', text, re.M)
    unroll = re.search(r'^(!\d+) = !\{ !"llvm.loop.unroll.disable" \}', text, re.M)
    if pred is None or unroll is None:
        return 0
    both = rf"^!\d+ = distinct !\{{[^}}]*, {pred.group(1)}, {unroll.group(1)} \}}"
    return len(re.findall(both, text, re.M))


def _relu_mask(rows: int, width: int):
    """``G = select(Z <= 0, 0, H)``: a ReLU's mask applied to a head, read from rows 3 longer
    (as a padded map's interior: rows that are not one contiguous run, :mod:`.coalesce`)."""
    Z = ta.placeholder((rows, width + 3), "float32", "Z")
    H = ta.placeholder((rows, width + 3), "float32", "H")
    zero = ta.const(0.0, "float32")
    return Z, H, ta.compute((rows, width), lambda i, j: ta.select(Z[i, j] <= 0.0, zero, H[i, j]), name="G")


def test_a_pointwise_row_is_kept_from_the_unroller():
    """A ReLU mask applied along 26-wide rows (as a convolution's backward applies it to its
    head): the masked loop at once, not 26 copies that SLP packs again (compile time)."""
    Z, H, G = _relu_mask(4, 26)
    assert _rolled_masked_loops(ta.build([G], [Z, H], target=AVX512)) == 1


def test_a_stencil_row_stays_unrollable():
    """One tensor read at two offsets: unrolled rows share loads (a depthwise convolution's
    forward ran 1.4x slower with its rows kept rolled)."""
    X, Y = _shifted_sum(4, 26)
    k = ta.build([Y], [X], target=AVX512)
    assert _masked(k) and _rolled_masked_loops(k) == 0


def test_a_row_its_nest_reads_again_stays_unrollable():
    """A max pool's row of -inf, read by the window loops after it in the same nest: unrolled,
    its stores are forwarded into them (kept rolled: 1.3x slower)."""
    X = ta.placeholder((1, 4, 56, 56), "float32", "X")
    Y = ta.topi.nn.pool(X, (3, 3), (2, 2), (1, 1), "max")
    k = ta.build([Y], [X], target=AVX512)
    assert _masked(k) and _rolled_masked_loops(k) == 0


@pytest.mark.parametrize("width", [17, 26, 31, 47])
def test_pointwise_rows_match_numpy(width):
    Z, H, G = _relu_mask(3, width)
    rng = np.random.default_rng(width)
    z, h = rng.standard_normal((2, 3, width + 3)).astype(np.float32)
    want = np.where(z <= 0, np.float32(0), h)[:, :width]
    np.testing.assert_array_equal(ta.build([G], [Z, H])(z, h), want)


def test_a_pointwise_row_on_avx2_is_vectorized_rolled():
    """Without masked memory the same row gets the target's lanes, its remainder plain, and is
    kept from the unroller too; a stencil row gets nothing."""
    Z, H, G = _relu_mask(4, 26)
    text = ta.build([G], [Z, H], target=AVX2).llvm_ir_unoptimized
    assert PREDICATE_HINT not in text
    assert re.search(r'"llvm.loop.vectorize.width", i32 8 \}', text)
    assert '"llvm.loop.unroll.disable"' in text
    X, Y = _shifted_sum(4, 26)
    assert "llvm.loop.vectorize.width" not in ta.build([Y], [X], target=AVX2).llvm_ir_unoptimized


def _tile_rows(n: int, width: int, dtype: str = "float32"):
    """``Y[i, ty, tx] = X[i, 4 ty, tx] / 2 + 3 X[i, 4 ty + 1, tx] / 4 - X[i, 4 ty + 2, tx]``: rows of
    ``width`` points, four of them, read at rows ``4 ty + r`` (a Winograd data transform's shape)."""
    X = ta.placeholder((n, 18, width), dtype, "X")
    Y = ta.compute((n, 4, width), lambda i, ty, tx: X[i, 4 * ty, tx] * 0.5 + X[i, 4 * ty + 1, tx] * 0.75
                   - X[i, 4 * ty + 2, tx], name="Y")
    return X, Y


def test_a_row_narrower_than_a_vector_is_one_vector():
    """A Winograd transform's rows of 4 tiles on AVX2 (8 lanes) were unrolled with the loop around them
    and packed by SLP into 8-lane vectors element by element (a ResNet backward's data transforms took a
    third of its time); the row is one 4-lane vector of loads and multiply-adds, on AVX-512 too."""
    for target in (AVX2, AVX512):
        X, Y = _tile_rows(64, 4)
        kernel = ta.build([Y], [X], target=target)
        assert '"llvm.loop.vectorize.enable", i1 1' in kernel.llvm_ir_unoptimized
        text = kernel.llvm_ir
        assert "load <4 x float>" in text and "shufflevector" not in text and "insertelement" not in text


@pytest.mark.parametrize("width", [3, 6])
def test_a_narrow_row_of_other_widths_is_left_to_llvm(width):
    """Only a power of two of at least 4 lanes is forced (3 or 6 points would leave a remainder)."""
    X, Y = _tile_rows(8, width)
    assert '"llvm.loop.vectorize.enable", i1 1' not in ta.build([Y], [X], target=AVX2).llvm_ir_unoptimized


@pytest.mark.parametrize("width, dtype, threads", [(4, "float32", 1), (8, "float32", 2), (4, "float64", 2),
                                                   (2, "float32", 1), (6, "float64", 1)])
def test_narrow_rows_match_numpy(width, dtype, threads):
    """The host's kernels (checked and not) against the formula in float64, an odd count of rows."""
    X, Y = _tile_rows(7, width, dtype)
    x = np.random.default_rng(width).standard_normal((7, 18, width)).astype(dtype)
    want = x[:, 0:13:4] * 0.5 + x[:, 1:14:4] * 0.75 - x[:, 2:15:4]
    for checked in (False, True):
        got = ta.build([Y], [X], num_threads=threads, checked=checked)(x)
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-13)


def _overlapped_loops(text: str) -> int:
    """How many loops of a kernel's IR ask for one vector an iteration (the overlapped rows' two loops)."""
    node = re.search(r'^(!\d+) = !\{ !"llvm.loop.interleave.count", i32 1 \}', text, re.M)
    if node is None:
        return 0
    return len(re.findall(rf"^!\d+ = distinct !\{{[^}}]*{node.group(1)}\b", text, re.M))


@pytest.mark.parametrize("width", [9, 14, 15])
def test_a_short_row_on_avx2_is_two_overlapping_vectors(width):
    """A Winograd transform's row of 14 tiles on AVX2, under LLVM's 16 trips for a vector loop, ran as
    scalar code: it runs as its whole vectors, then one vector ending at its end; a row of 16 keeps LLVM's
    loop, a row of 6 its narrow forms, and AVX-512 its masked tail."""
    X, Y = _tile_rows(8, width)
    assert _overlapped_loops(ta.build([Y], [X], target=AVX2).llvm_ir_unoptimized) == 2
    assert _overlapped_loops(ta.build([Y], [X], target=AVX512).llvm_ir_unoptimized) == 0
    for other in (6, 16):
        X, Y = _tile_rows(8, other)
        assert _overlapped_loops(ta.build([Y], [X], target=AVX2).llvm_ir_unoptimized) == 0


def test_a_row_its_nest_reads_again_is_not_overlapped():
    """A max pool's row of -inf that the window loops after it read: stored twice, the second vector
    would store again over values the nest has moved on from."""
    X = ta.placeholder((1, 4, 28, 28), "float32", "X")
    Y = ta.topi.nn.pool(X, (3, 3), (2, 2), (1, 1), "max")
    assert _overlapped_loops(ta.build([Y], [X], target=AVX2).llvm_ir_unoptimized) == 0


@pytest.mark.parametrize("width, dtype, threads", [(9, "float32", 1), (13, "float32", 2), (14, "float32", 1),
                                                   (15, "float32", 2), (5, "float64", 1), (7, "float64", 2)])
def test_overlapped_rows_match_numpy(width, dtype, threads):
    """The host's kernels and AVX2's where the host runs it (checked and not) against the formula in
    float64: every point of a row between one vector and two, infinities and NaN among them."""
    X, Y = _tile_rows(7, width, dtype)
    x = np.random.default_rng(width).standard_normal((7, 18, width)).astype(dtype)
    x[0, 0, :3] = [np.inf, -np.inf, np.nan]
    want = x[:, 0:13:4] * 0.5 + x[:, 1:14:4] * 0.75 - x[:, 2:15:4]
    targets = ["llvm"] + [AVX2] * parse_target(AVX2).runs_here(host_target())
    for target in targets:
        for checked in (False, True):
            got = ta.build([Y], [X], target=target, num_threads=threads, checked=checked)(x)
            np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-13)
