"""The padded micro-kernel's chunked copy wrote into another copy's buffer.  When a product's side is
copied zero-padded in chunks (the whole copy would outgrow the kernel's arguments) and the first chunk also
copies another side whole (a ReLU-masked head), the chunks were made to share the buffer of the first copy
of the first piece, the small masked head, instead of the first chunk's.  Each chunk's padded copy then
wrote past that buffer: a strided convolution's gradients (``relu(conv2d(X, W, 2, 1))`` on a 3x3 image,
128 filters) came out wrong by 1e37, and the heap was corrupted.  The kernels run in a child interpreter
(the old code crashes it); the oracle is the layer's gradients written in NumPy, in float64."""

from __future__ import annotations

import pytest

CHILD = r"""
import sys
import numpy as np
import tensorad as ta

def numpy_grads(x, w, h, stride, pad):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
    g = h * (np.einsum("ncyxij,ocij->noyx", win, w) > 0)
    ho, wo = g.shape[2:]
    dxp = np.zeros_like(xp)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride] += \
                np.einsum("noyx,oc->ncyx", g, w[:, :, i, j])
    return dxp[:, :, pad:pad + x.shape[2], pad:pad + x.shape[3]], np.einsum("noyx,ncyxij->ocij", g, win)

worst = 0.0
for n, c, hw, f, stride, pad, dtype, target, threads in CASES:
    X = ta.placeholder((n, c, hw, hw), name="X", dtype=dtype)
    W = ta.placeholder((f, c, 3, 3), name="W", dtype=dtype)
    Y = ta.topi.nn.relu(ta.topi.nn.conv2d(X, W, stride, pad))
    H = ta.placeholder(Y.shape, name="H", dtype=dtype)
    grads = ta.JacobianRecursive(ta.topi.sum(Y * H), [X, W])
    offered = ta.lower(grads, [X, W, H], num_threads=threads, target=target).offered
    pinned = {point: "padded" for point, labels, _ in offered if "padded" in labels}
    rng = np.random.default_rng(0)
    x, w, h = (rng.standard_normal(t.shape) for t in (X, W, H))
    got = ta.build(grads, [X, W, H], target=target, num_threads=threads, choices=pinned)(
        x.astype(dtype), w.astype(dtype), h.astype(dtype))
    for g, want in zip(got, numpy_grads(x, w, h, stride, pad)):
        worst = max(worst, float(np.abs(g - want).max() / max(1.0, np.abs(want).max())))
    print(n, c, hw, f, stride, pad, dtype, target, threads, sorted(pinned), worst, flush=True)
print("WORST", worst)
"""

HASWELL = "llvm -mcpu=haswell"


def _run(python_child, cases, cpu_seconds):
    proc = python_child(f"CASES = {cases!r}\n" + CHILD, cpu_seconds)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    worst = float(proc.stdout.split("WORST")[-1])
    assert worst < 1e-4, proc.stdout
    assert "'X.grad" in proc.stdout and "'W.grad" in proc.stdout, proc.stdout  # (both chunked, padded)


def test_strided_convolution_gradient_chunks(python_child):
    _run(python_child, [(2, 32, 3, 128, 2, 1, "float32", "llvm", 1)], 60)


@pytest.mark.slow
def test_strided_convolution_gradient_chunks_neighbours(python_child):
    cases = [(2, 32, 3, 128, 2, 1, "float64", HASWELL, 2), (2, 64, 3, 64, 2, 1, "float32", HASWELL, 1),
             (2, 32, 1, 128, 2, 1, "float32", "llvm", 2), (2, 32, 4, 128, 3, 1, "float64", "llvm", 1),
             (2, 32, 5, 64, 2, 1, "float32", "llvm", 2), (2, 32, 7, 128, 3, 2, "float32", HASWELL, 2),
             (2, 16, 7, 16, 3, 0, "float32", "llvm", 1), (4, 32, 4, 32, 2, 2, "float32", HASWELL, 2)]
    _run(python_child, cases, 300)
