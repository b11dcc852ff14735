"""A grouped convolution's unrolled stencil ran the first and last columns of every row as scalar code:
its zero-padding guards cut the box into pieces, and the pieces along the last axis were one column
wide, so each of those points summed all of its taps (4 channels x 9) one lane at a time -- as much
time as the rest of the row.  The stencil now reads a zero-padded copy of the guarded input where the
model prices the copy below those scalar points (in chunks of the batch where a whole copy would
outgrow the kernel's arguments); values against a float64 convolution written here in NumPy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tensorad.codegen.target import parse_target

import tensorad as ta
from tensorad import topi

AVX512 = replace(parse_target("llvm -mcpu=skylake-avx512"), l1d=32 << 10, l2=1 << 20, l3=32 << 20)
AVX2 = replace(parse_target("llvm -mcpu=haswell"), l1d=32 << 10, l2=512 << 10, l3=32 << 20)


def _conv(x: np.ndarray, w: np.ndarray, stride: int, pad: int, dil: int, groups: int) -> np.ndarray:
    """``Y[n, f, y, x] = sum_{c, i, j} Xp[n, g(f) + c, y s + i d, x s + j d] W[f, c, i, j]`` in float64."""
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, f, oh, ow))
    fg = f // groups
    for g in range(groups):
        xs, ws = xp[:, g * cg:(g + 1) * cg], w[g * fg:(g + 1) * fg].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                win = xs[:, :, i * dil:i * dil + stride * (oh - 1) + 1:stride,
                         j * dil:j * dil + stride * (ow - 1) + 1:stride]
                out[:, g * fg:(g + 1) * fg] += np.einsum("nchw,fc->nfhw", win, ws[:, :, i, j])
    return out


def test_grouped_stencil_reads_a_padded_copy():
    """The benchmark's ResNeXt layer (32 groups of 4 channels, 28 x 28), planned for a pinned AVX-512
    target: the unrolled stencil, reading a padded copy in chunks, and no border pieces."""
    X = ta.placeholder((8, 128, 28, 28), "float32", name="X")
    W = ta.placeholder((128, 4, 3, 3), "float32", name="W")
    lowered = ta.lower([topi.nn.conv2d(X, W, 1, 1, groups=32)], [X, W], num_threads=1, target=AVX512)
    assert [c for _, _, c in lowered.offered] == ["stencil"]
    text = str(lowered)
    assert "X.padded0" in text and "pieces of decided guards" not in text


def test_avx2_grouped_layer_prices_the_stencils_scalar_remainders():
    """Without cheap masked memory (AVX2), each 26-column interior row of the grouped 28 x 28 layer
    runs its last 2 points as scalar code (all 36 taps a lane at a time), which AVX-512 folds into
    one masked vector.  The stencil was priced as if every row ran in vectors, and won against the
    micro-kernel over a padded copy, which computes its edge tiles whole and ran in 0.79x its time.
    Planned for a pinned AVX2 target: the padded product wins; values against NumPy in float64."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (8, 128, 28, 28)).astype(np.float32)
    w = rng.uniform(-1, 1, (128, 4, 3, 3)).astype(np.float32)
    X = ta.placeholder(x.shape, "float32", name="X")
    W = ta.placeholder(w.shape, "float32", name="W")
    Y = topi.nn.conv2d(X, W, 1, 1, groups=32)
    lowered = ta.lower([Y], [X, W], num_threads=1, target=AVX2)
    assert [c for _, _, c in lowered.offered] == ["padded"]
    kernel = ta.build([Y], [X, W], num_threads=1, target=AVX2)
    np.testing.assert_allclose(kernel(x, w), _conv(x, w, 1, 1, 1, 32), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, f, groups, stride, pad, dil", [
    ((2, 12, 9, 13), 12, 3, 1, 1, 1),  # 4 channels a group, odd rows and columns
    ((3, 6, 11, 7), 6, 6, 1, 1, 1),  # depthwise
    ((2, 10, 10, 9), 10, 5, 2, 1, 1),  # stride 2
    ((2, 8, 12, 11), 8, 4, 1, 2, 2),  # dilation 2
    ((2, 6, 7, 19), 9, 3, 1, 1, 1),  # 3 channels in, 3 out a group
])
@pytest.mark.parametrize("threads", [1, 2])
def test_grouped_and_depthwise_values(shape, f, groups, stride, pad, dil, threads):
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    w = rng.uniform(-1, 1, (f, shape[1] // groups, 3, 3)).astype(np.float32)
    X = ta.placeholder(x.shape, "float32", name="X")
    W = ta.placeholder(w.shape, "float32", name="W")
    Y = topi.nn.conv2d(X, W, stride, pad, dil, groups=groups)
    kernel = ta.build([Y], [X, W], num_threads=threads, checked=True)
    np.testing.assert_allclose(kernel(x, w), _conv(x, w, stride, pad, dil, groups), rtol=1e-5, atol=1e-5)
