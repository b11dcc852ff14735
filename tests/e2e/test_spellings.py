"""Layers written with ``ta.compute`` lower to the loops of the ``ta.topi`` layer of the same math.

* A layer norm whose mean is ``sum_k X[i, k] / width`` (``ta.topi`` multiplies by ``1 / width``): the
  division by a constant is no reason to give the mean a buffer, so the backward is topi's one pass over
  the rows (X's gradient, gamma's and beta's column sums in its loop), with no nest of its own for the
  mean and no more work.
* An LSTM cell whose gates are one ``[B, 4H]`` tensor read at ``gates[n, k * H + q]``: the gates'
  gradient is a sum of four guarded terms, each holding a sigmoid or a tanh; it runs as one loop per
  gate with its guards decided (:mod:`tensorad.codegen.loops.box_pieces`), no choice left in a store.

Counted on a pinned target; values against PyTorch's float64 autograd.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensorad.codegen.program import Nest, stores

import tensorad as ta
from benchmarks.spelled import lstm_hidden
from tensorad import topi
from tensorad.ir.expr import Op
from tensorad.ir.rewrite import walk

TARGET = "llvm -mcpu=haswell"
F64 = "float64"
ROWS, WIDTH = 32, 48


def _hand_layer_norm(X, g, b, eps=1e-5):
    rows, width = X.shape
    k, k2 = ta.reduce_axis((0, width), "k"), ta.reduce_axis((0, width), "k2")
    mean = ta.compute((rows,), lambda i: ta.sum(X[i, k], axis=k) / width, name="mean")
    var = ta.compute((rows,), lambda i: ta.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]), axis=k2) / width,
                     name="var")
    xhat = ta.compute(X.shape, lambda i, j: (X[i, j] - mean[i]) / ta.sqrt(var[i] + eps), name="xhat")
    return ta.compute(X.shape, lambda i, j: xhat[i, j] * g[j] + b[j], name="ln")


def _layer_norm_function(spelling: str, dtype: str = "float32", **options):
    X = ta.placeholder((ROWS, WIDTH), dtype, name="X")
    g = ta.placeholder((WIDTH,), dtype, name="gamma")
    b = ta.placeholder((WIDTH,), dtype, name="beta")
    Y = _hand_layer_norm(X, g, b) if spelling == "hand" else topi.nn.layer_norm(X, g, b)
    return ta.function(Y, [X, g, b], wrt=[X, g, b], num_threads=1, **options)


def _row_passes(lowered) -> int:
    """The nests that walk X's every element (the backward's passes over the rows)."""
    return sum(isinstance(s, Nest) and s.work >= ROWS * WIDTH for s in lowered.program.steps)


def test_a_hand_layer_norm_backward_is_topis_one_pass_over_the_rows():
    hand = _layer_norm_function("hand", target=TARGET).lower_backward()
    lib = _layer_norm_function("topi", target=TARGET).lower_backward()
    assert _row_passes(lib) == 1
    assert _row_passes(hand) == 1
    assert not any(isinstance(s, Nest) and s.name == "mean" for s in hand.program.steps)
    assert hand.work <= lib.work


def test_a_hand_layer_norm_backward_matches_torch():
    rng = np.random.default_rng(3)
    x, g, b = rng.normal(size=(ROWS, WIDTH)), rng.uniform(0.5, 1.5, WIDTH), rng.normal(size=WIDTH)
    head = rng.normal(size=(ROWS, WIDTH))
    f = _layer_norm_function("hand", F64)
    _, residuals = f.forward(x, g, b)
    got = f.backward(residuals, head)
    ts = [torch.tensor(a, requires_grad=True) for a in (x, g, b)]
    y = torch.nn.functional.layer_norm(ts[0], (WIDTH,), ts[1], ts[2], 1e-5)
    want = torch.autograd.grad(y, ts, torch.tensor(head))
    for a, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), w.numpy(), rtol=1e-9, atol=1e-9)


BATCH, INPUTS, HIDDEN = 3, 4, 5


def _hand_lstm_cell(dtype: str, **options):
    X = ta.placeholder((BATCH, INPUTS), dtype, name="X")
    h0 = ta.placeholder((BATCH, HIDDEN), dtype, name="h0")
    c0 = ta.placeholder((BATCH, HIDDEN), dtype, name="c0")
    Wih = ta.placeholder((4 * HIDDEN, INPUTS), dtype, name="Wih")
    Whh = ta.placeholder((4 * HIDDEN, HIDDEN), dtype, name="Whh")
    b = ta.placeholder((4 * HIDDEN,), dtype, name="b")
    h = lstm_hidden(ta, X, h0, c0, Wih, Whh, b)
    inputs = [X, h0, c0, Wih, Whh, b]
    return inputs, ta.function(h, inputs, wrt=inputs[3:], num_threads=1, **options)


def test_a_hand_lstm_cells_gate_gradient_runs_one_loop_per_gate_without_choices():
    _, f = _hand_lstm_cell("float32", target=TARGET)
    low = f.lower_backward()
    (gates,) = [s for s in low.program.steps if isinstance(s, Nest) and "gates.grad" in s.name.split("+")]
    written = [s for s in stores(gates.body) if s.buffer.name == "gates.grad"]
    assert len(written) == 4  # (one store per gate's piece of [0, 4 * HIDDEN))
    assert not any(n.op in (Op.IF_THEN_ELSE, Op.SELECT) for s in written for n in walk(s.value))


@pytest.mark.parametrize("seed", [0, 1])
def test_a_hand_lstm_cell_backward_matches_torch(seed):
    inputs, f = _hand_lstm_cell(F64)
    rng = np.random.default_rng(seed)
    arrays = [rng.normal(size=t.shape) * 0.5 for t in inputs]
    head = rng.normal(size=(BATCH, HIDDEN))
    _, residuals = f.forward(*arrays)
    got = f.backward(residuals, head)
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    x, h0, c0, Wih, Whh, b = ts
    i, fg, g, o = (x @ Wih.T + h0 @ Whh.T + b).chunk(4, dim=1)
    c = torch.sigmoid(fg) * c0 + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    want = torch.autograd.grad(h, ts[3:], torch.tensor(head))
    for a, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), w.numpy(), rtol=1e-9, atol=1e-9)
