"""The library's ``COPY`` packer copies a panel's runs row-block by row-block, the rows innermost.

A panel made of runs (a convolution's window rows: 16 of a transposed convolution's 17-wide
padded rows in 24-wide panels, 16 + 8 and 8 + 16) was packed row by row, each row's runs
between branches taken by the run's length: the 4x4 stride-2 transposed convolution's forward
spent half of its micro-kernel's time packing B.  Now a run is copied in every row of a block
by a loop with no division and no inner loop (``packlib._copy_rows``), and a short piece's
whole-vector store spills only within its row (the next row is packed already).

Oracles: the transposed and plain convolutions written here in NumPy (float64), at sizes whose
rows cross panel ends, end near a row's end with pieces shorter than a vector, and span
several row blocks (``K_BLOCK``), checked builds included, on the host and AVX2/SSE targets.
"""

import re

import numpy as np
import pytest
from tensorad.codegen.gemm import descriptor as gd
from tensorad.codegen.gemm import library as gemmlib
from tensorad.codegen.gemm.contraction import register_tile
from tensorad.codegen.jit import compile_job
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.jit.compile_job import Job, Machine
from tensorad.codegen.target import parse_target

import tensorad as ta

TARGETS = ("llvm", "llvm -mcpu=haswell", "llvm -mcpu=x86-64")
RNG = np.random.default_rng(20)


def _row_loop(spec: str, dtype: str, side: str) -> list[str]:
    """The instructions of the ``COPY`` packer's loop over a block's rows (its blocks ``rk.*``),
    as the library compiles it."""
    t = parse_target(spec)
    mr, nr = register_tile(t, dtype)
    job = Job(gemmlib.piece_ir(dtype, mr, nr, (side, gd.COPY), t), jit.Pipeline(0, light=True),
              Machine(t.triple, t.cpu, t.features), ir=True)
    text = compile_job.run(job, lambda _: jit.target_machine(t)).decode()
    blocks = re.findall(r"\n(rk\.[\w.]*):[^\n]*\n(.*?)(?=\n\n|\n[\w.]+:)", text, re.S)
    return [ln.strip() for _, body in blocks for ln in body.splitlines() if ln.strip()]


@pytest.mark.parametrize("spec", (*TARGETS, "llvm -mcpu=skylake-avx512"))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_run_is_copied_in_every_row_without_division_or_inner_loop(spec, dtype):
    ins = _row_loop(spec, dtype, "B")
    assert ins, spec  # before: rows outermost, no row loop inside a run
    ops = [i.split("=")[-1].split()[0] for i in ins]
    assert not {"sdiv", "udiv", "srem", "urem"} & set(ops), ops
    assert "phi" in ops  # the rows' induction variable; no other loop but the short piece's
    assert ops.count("phi") <= 2, ops
    # per row: up to three vectors and the run's rest, each a load and a store under its test
    assert len(ins) <= 50, (spec, dtype, len(ins))


def _conv_transpose(x, w, stride, pad):
    n, c, h, wd = x.shape
    _, f, kh, kw = w.shape
    full = np.zeros((n, f, (h - 1) * stride + kh, (wd - 1) * stride + kw))
    for ky in range(kh):
        for kx in range(kw):
            ys = slice(ky, ky + stride * (h - 1) + 1, stride)
            xs = slice(kx, kx + stride * (wd - 1) + 1, stride)
            full[:, :, ys, xs] += np.einsum("ncyx,cf->nfyx", x, w[:, :, ky, kx])
    return full[:, :, pad:full.shape[2] - pad, pad:full.shape[3] - pad]


@pytest.mark.parametrize("spec,dtype", list(zip(TARGETS, ["float32", "float64", "float32"])))
@pytest.mark.parametrize("size", [(5, 7), (6, 16)])
def test_transposed_convolution_4x4_stride_2(spec, dtype, size):
    # 12 channels x 4 taps per parity: 48 values of k, two row blocks; rows of 7 or 16
    X = ta.placeholder((2, 12, *size), dtype, "X")
    W = ta.placeholder((12, 5, 4, 4), dtype, "W")
    Y = ta.topi.nn.conv2d_transpose(X, W, 2, 1)
    x = RNG.standard_normal(X.shape).astype(dtype)
    w = RNG.standard_normal(W.shape).astype(dtype)
    want = _conv_transpose(x.astype(np.float64), w.astype(np.float64), 2, 1)
    tol = 1e-4 if dtype == "float32" else 1e-11
    for checked in (False, True):
        kern = ta.build([Y], [X, W], microkernel=True, parallel_min_work=0, target=spec, checked=checked)
        for threads in (1, 2):
            kern.num_threads = threads
            np.testing.assert_allclose(kern(x, w), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("spec,pad,wd", [(TARGETS[0], 0, 5), (TARGETS[2], 0, 9), (TARGETS[1], 1, 26)])
def test_runs_that_end_near_a_panel_row_end(spec, pad, wd):
    # rows of 3 or 7 (no checks: pieces shorter than a vector end at the panel row's end) and of
    # 26 with padding (a one-element zero piece at the end of a run that ends the panel row)
    dtype = "float32"
    X = ta.placeholder((2, 20, 5, wd), dtype, "X")
    W = ta.placeholder((6, 20, 3, 3), dtype, "W")
    Y = ta.topi.nn.conv2d(X, W, 1, pad)
    x = RNG.standard_normal(X.shape).astype(dtype)
    w = RNG.standard_normal(W.shape).astype(dtype)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = Y.shape[2:]
    w64 = w.astype(np.float64)
    want = sum(np.einsum("ncyx,fc->nfyx", xp[:, :, ry:ry + oh, rx:rx + ow], w64[:, :, ry, rx])
               for ry in range(3) for rx in range(3))
    for checked in (False, True):
        kern = ta.build([Y], [X, W], microkernel=True, parallel_min_work=0, target=spec, checked=checked,
                        choices={"conv2d#0": "microkernel"})
        np.testing.assert_allclose(kern(x, w), want, rtol=1e-4, atol=1e-4)
