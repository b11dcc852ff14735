"""The residue classes of a strided convolution's input gradient are built once per lowering.

Two strategies decompose such a sum into one reduction per residue class of its output (one
product per class, :class:`tensorad.codegen.strategies.products.Parity`; loops per class,
``ParityLoops``).  Each class is the same reduction for both, so the planning call's memo keeps
it: the classes are narrowed to their taps (``parity._tighten``, isl on each class) once each.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tensorad.codegen.program import Nest
from tensorad.codegen.strategies import parity
from tensorad.codegen.target import parse_target

import tensorad as ta


def test_stride2_input_gradient_classes_are_built_once(monkeypatch):
    calls = []
    real = parity._tighten
    monkeypatch.setattr(parity, "_tighten", lambda *a: calls.append(1) or real(*a))
    X = ta.placeholder((2, 32, 16, 16), "float32", name="X")
    W = ta.placeholder((32, 32, 3, 3), "float32", name="W")
    Y = ta.topi.nn.conv2d(X, W, 2, 1)
    H = ta.placeholder(Y.shape, "float32", name="H")
    (gx,) = ta.JacobianRecursive(Y, [X], H)
    # (AVX2's 8-lane rows: with 16 lanes, 8-wide outputs keep to strips and nothing is decomposed)
    low = ta.lower([gx], [X, W, H], target="llvm -mcpu=haswell")
    decomposed = [labels for point, labels, _ in low.offered if "parity-loops" in labels]
    assert decomposed  # (the gradient is offered per residue class)
    assert len(calls) == 4  # 2 x 2 residue classes, each built once (5 when each strategy built its own)


def _pinned(target: str, l2: int):
    return replace(parse_target(target), l1d=32 << 10, l2=l2, l3=32 << 20, line=64, page=4096)


# AVX-512 with 1 MiB of L2 (Intel), AVX2 with 512 KiB (AMD Zen 3), AVX-512 with 1 MiB (Zen 4)
PINNED = [("llvm -mcpu=skylake-avx512", 1 << 20), ("llvm -mcpu=haswell", 512 << 10),
          ("llvm -mcpu=znver4", 1 << 20)]


def _input_gradient_f64(h: np.ndarray, w: np.ndarray, x_shape: tuple, stride: int, pad: int) -> np.ndarray:
    """A strided convolution's input gradient in float64: each tap adds ``H @ W[:, :, ry, rx]`` at its
    strided places of the padded input."""
    n, c, hi, wi = x_shape
    out = np.zeros((n, c, hi + 2 * pad, wi + 2 * pad))
    ho, wo = h.shape[2:]
    for ry in range(w.shape[2]):
        for rx in range(w.shape[3]):
            out[:, :, ry:ry + stride * ho:stride, rx:rx + stride * wo:stride] += np.einsum(
                "nfyx,fc->ncyx", h.astype(np.float64), w[:, :, ry, rx].astype(np.float64))
    return out[:, :, pad:pad + hi, pad:pad + wi]


def _stride2_input_gradient():
    X = ta.placeholder((2, 64, 28, 28), "float32", name="X")
    W = ta.placeholder((64, 64, 3, 3), "float32", name="W")
    Y = ta.topi.nn.conv2d(X, W, 2, 1)
    H = ta.placeholder(Y.shape, "float32", name="H")
    (gx,) = ta.JacobianRecursive(Y, [X], H)
    return gx, [X, W, H]


@pytest.mark.parametrize("target, l2", PINNED)
def test_stride2_input_gradient_classes_read_one_padded_head(target, l2):
    """The residue classes whose taps read past the head's edges (three of a 3x3 stride-2 convolution's
    four) read one zero-padded copy of the head, padded as the widest class needs: one pass over the
    head where each class's product made a copy of its own."""
    gx, inputs = _stride2_input_gradient()
    low = ta.lower([gx], inputs, target=_pinned(target, l2))
    assert dict((p, c) for p, _, c in low.offered)["X.grad#0"] == "parity"
    nests = [s for s in low.program.steps if isinstance(s, Nest)]
    products = [s.attrs.gemm for s in nests if s.attrs.gemm is not None]
    copies = [s for s in nests if s.attrs.gemm is None and s.outputs[0].kind == "temp"]
    assert len(products) == 4 and len(copies) == 1
    copy = copies[0].outputs[0].tensor
    assert copy.shape == (2, 64, 15, 15)  # (the head, 14x14, and a row and a column of zeros past it)
    assert sorted(s.b.arg.op is copy.op for s in products) == [False, True, True, True]


@pytest.mark.slow  # (a build: about 5 CPU-s)
def test_stride2_input_gradient_from_one_padded_head_against_numpy():
    gx, inputs = _stride2_input_gradient()
    rng = np.random.default_rng(0)
    x, w, h = (rng.standard_normal(t.shape).astype(np.float32) for t in inputs)
    got = ta.build([gx], inputs, target="llvm -mcpu=haswell")(x, w, h)
    np.testing.assert_allclose(got, _input_gradient_f64(h, w, x.shape, 2, 1), rtol=1e-4, atol=1e-4)
