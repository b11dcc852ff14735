"""The residue classes of a strided convolution's input gradient are built once per lowering.

Two strategies decompose such a sum into one reduction per residue class of its output (one
product per class, :class:`tensorad.codegen.strategies.products.Parity`; loops per class,
``ParityLoops``).  Each class is the same reduction for both, so the planning call's memo keeps
it: the classes are narrowed to their taps (``parity._tighten``, isl on each class) once each.
"""

from __future__ import annotations

from tensorad.codegen.strategies import parity

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
