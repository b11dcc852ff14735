"""The library's transposing packers emit their unrolled register transposes once.

A run of ``k`` is transposed in ``bs x bs`` blocks; its rest, when the run is at least a block
long, is its last block transposed again (overlapping).  That last block is one more trip of
the block loop, not a second copy of the unrolled blocks: LLVM's time on a piece grows with its
size (counted here in vector loads, never timed; ``python -m benchmarks.compile_time`` measures).
The products check each kind of run against NumPy: whole blocks, whole blocks and a rest, a run
shorter than a block.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from tensorad.codegen.gemm import descriptor as gd
from tensorad.codegen.gemm import library as gemmlib
from tensorad.codegen.target import parse_target

import tensorad as ta
from tensorad import topi

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("spec", ["llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"])
@pytest.mark.parametrize("dtype,mr,nr", [("float32", 4, 24), ("float64", 4, 12)])
@pytest.mark.parametrize("side", ["A", "B"])
@pytest.mark.parametrize("mode,kstride", [(gd.TRANSPOSE, 1), (gd.TRANSPOSE2, 2)])
def test_transposer_emits_each_panel_row_load_once(spec, dtype, mr, nr, side, mode, kstride):
    text = gemmlib.piece_ir(dtype, mr, nr, (side, mode), parse_target(spec))
    main = re.split(r"^define ", text, flags=re.M)[1].split("\n}\n")[0]  # the packer (not its masked block)
    loads = re.findall(r"= load <\d+ x (?:float|double)>", main)
    width = mr if side == "A" else nr
    assert len(loads) == width * kstride  # each row of a block read once: no second copy for the rest


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kext", [3, 13, 16, 21])
def test_transposed_products_on_every_run_length(dtype, kext):
    A = ta.placeholder((13, kext), dtype, "A")
    B = ta.placeholder((29, kext), dtype, "B")
    k = ta.reduce_axis((0, kext), "k")
    C = ta.compute((13, 29), lambda i, j: ta.sum(A[i, k] * B[j, k], k), name="C")
    kern = ta.build([C], [A, B], microkernel=True, parallel_min_work=0)
    text = kern.compiled.llvm_ir_unoptimized
    if kext >= 13:  # (a run of a quarter of a block or more is transposed, a short one masked)
        assert "packA_transpose" in text and "packB_transpose" in text
    a, b = RNG.standard_normal((13, kext)).astype(dtype), RNG.standard_normal((29, kext)).astype(dtype)
    tol = 1e-4 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(kern(a, b), a.astype(np.float64) @ b.astype(np.float64).T, rtol=tol, atol=tol)


def test_a_side_without_runs_along_k_is_gathered():
    """A 1x1 stride-2 convolution reads ``X[n, c, 2 y + ry, 2 x + rx]`` over ``k = (c, ry, rx)``
    with ``ry``, ``rx`` of one value: runs of one along ``k``.  The transposing packer did each
    element through its rows' ranges (20% of the layer's forward); the gather takes it from the
    tables.  Oracle: the strided product in NumPy."""
    X = ta.placeholder((2, 16, 28, 28), "float32", "X")
    W = ta.placeholder((64, 16, 1, 1), "float32", "W")
    Y = topi.nn.conv2d(X, W, 2, 0)
    for target in ("llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"):  # (compiled, not run)
        text = ta.build([Y], [X, W], microkernel=True, target=target).compiled.llvm_ir_unoptimized
        assert "packB_transpose" not in text  # (AVX2's 24-wide panels copy rows of stride 2)
        assert ("packB_gather" in text) is (target.endswith("avx512"))
    kern = ta.build([Y], [X, W], microkernel=True)
    x, w = RNG.standard_normal(X.shape).astype(np.float32), RNG.standard_normal(W.shape).astype(np.float32)
    want = np.einsum("fc,ncyx->nfyx", w[:, :, 0, 0].astype(np.float64), x[:, :, ::2, ::2].astype(np.float64))
    np.testing.assert_allclose(kern(x, w), want, rtol=1e-4, atol=1e-4)
