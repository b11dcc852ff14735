"""A recurrence's state read by the next step and by a transcendental: computed once per step.

An LSTM's cell state ``c_t = sigmoid(f_t) * c_{t-1} + sigmoid(i_t) * tanh(g_t)`` is cheap in its own
body but gathers three transcendentals from its inlined producers; it is read twice per element
(by ``c_{t+1}`` and by ``tanh(c_t)``), so it gets a buffer instead of being recomputed, with its
whole history, inside every later step."""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.codegen.program import Assign, If, Loop, Nest, Store

import tensorad as ta
from tensorad.ir.expr import UNARY_MATH
from tensorad.ir.rewrite import walk

BATCH, INPUTS, HIDDEN = 3, 5, 4


def _lstm(steps: int):
    X = ta.placeholder((steps, BATCH, INPUTS), "float32", "X")
    h0 = ta.placeholder((BATCH, HIDDEN), "float32", "h0")
    c0 = ta.placeholder((BATCH, HIDDEN), "float32", "c0")
    Wih = ta.placeholder((4 * HIDDEN, INPUTS), "float32", "Wih")
    Whh = ta.placeholder((4 * HIDDEN, HIDDEN), "float32", "Whh")
    topi, nn = ta.topi, ta.topi.nn
    h, c = h0, c0
    for t in range(steps):
        i, f, g, o = topi.split(nn.dense(X[t], Wih) + nn.dense(h, Whh), 4, axis=1)
        c = topi.sigmoid(f) * c + topi.sigmoid(i) * topi.tanh(g)
        h = topi.sigmoid(o) * topi.tanh(c)
    return h, [X, h0, c0, Wih, Whh]


def _reference(X, h, c, Wih, Whh):
    def sig(z):
        return 1 / (1 + np.exp(-z))
    for x in X:
        i, f, g, o = np.split(x @ Wih.T + h @ Whh.T, 4, axis=1)
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
    return h


def _transcendentals(node) -> int:
    """Distinct transcendental operations in one nest's stored values."""
    if isinstance(node, Nest | Loop):
        return sum(_transcendentals(b) for b in node.body)
    if isinstance(node, If):
        return sum(_transcendentals(b) for b in node.then + node.orelse)
    values = (node.value,) if isinstance(node, Store) else node.values if isinstance(node, Assign) else ()
    return len({n for v in values for n in walk(v) if n.op in UNARY_MATH})


def test_lstm_state_matches_float64_numpy():
    h, inputs = _lstm(5)
    rng = np.random.default_rng(0)
    args = [rng.uniform(-0.5, 0.5, t.shape).astype("float32") for t in inputs]
    got = ta.build([h], inputs)(*args)
    want = _reference(*(a.astype("float64") for a in args))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_each_step_computes_its_transcendentals_once():
    """No nest of a 12-step LSTM recomputes earlier steps' gates: the most transcendentals one
    nest holds is the same as at 3 steps."""
    def most(steps: int) -> int:
        h, inputs = _lstm(steps)
        program = ta.lower([h], inputs, target="llvm -mcpu=haswell").program
        return max(_transcendentals(s) for s in program.steps if isinstance(s, Nest))
    assert most(12) == most(3) <= 8



def _backward(steps: int, **options):
    h, inputs = _lstm(steps)
    return ta.function(ta.topi.sum(h), inputs, wrt=inputs[3:], **options), inputs

def _numeric_grads(args: list[np.ndarray], wrt: tuple[int, ...], eps: float = 1e-6) -> list[np.ndarray]:
    """Central differences of ``sum(h)`` of the float64 reference."""
    out = []
    for k in wrt:
        g = np.zeros_like(args[k])
        for idx in np.ndindex(args[k].shape):
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[k][idx] += eps
            minus[k][idx] -= eps
            g[idx] = (_reference(*plus).sum() - _reference(*minus).sum()) / (2 * eps)
        out.append(g)
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_lstm_backward_matches_float64_central_differences(threads):
    """The backward reads the forward's saved gates; each gate's gradient that gathers the cell state
    from ``c0`` through the earlier steps' inlined products is computed once per element."""
    steps = 7
    f, inputs = _backward(steps, num_threads=threads, checked=True)
    rng = np.random.default_rng(1)
    args = [rng.uniform(-0.5, 0.5, t.shape).astype("float32") for t in inputs]
    _, residuals = f.forward(*args)
    got = f.backward(residuals, np.float32(1.0))
    want = _numeric_grads([a.astype("float64") for a in args], (3, 4))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
