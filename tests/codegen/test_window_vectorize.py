"""The loop over a max pool's windows is vectorized (codegen/llvm/unrolled_chains.window_vector_width).

LLVM's cost model declined the loop around a small selecting reduction (the winner's value,
first index and tie count over a 2 x 2 window), which then ran as scalar code with
unpredictable branches.  The emitter now asks for a width from the target's lanes.  Oracles:
``ta.evaluate`` (NumPy) and the same kernel built without LLVM's optimizations, on data with
ties, NaN and infinities.
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.codegen.llvm.unrolled_chains import window_vector_width
from tensorad.codegen.program import Assign, If, Loop

import tensorad as ta
from tensorad.ir.expr import Expr, Op, const, var

nn = ta.topi.nn


def _pool_program(shape, kernel, stride, padding):
    X = ta.placeholder(shape, "float32", "X")
    B = ta.placeholder((shape[1],), "float32", "B")
    Z = X + ta.topi.reshape(B, (shape[1], 1, 1))
    return X, B, nn.pool(nn.relu(Z), kernel, stride, [padding] * 4, "max")


def test_the_window_loop_asks_for_the_targets_lanes():
    """14 windows in a row on an 8-lane target: 4 lanes (3 vector iterations and 2 left over
    beat 1 and 6).  (The pool of ``X * X + B``, two roundings: a source that does not
    recompute exactly keeps the winner reduction; an exact one is a maximum and a sum.)"""
    X = ta.placeholder((2, 3, 28, 28), "float32", "X")
    B = ta.placeholder((3,), "float32", "B")
    Y = nn.pool(X * X + ta.topi.reshape(B, (3, 1, 1)), 2, 2, [0] * 4, "max")
    f = ta.function(Y, [X, B], target="llvm -mcpu=haswell")
    text = f.residual_kernel.llvm_ir_unoptimized
    assert '!"llvm.loop.vectorize.width", i32 4' in text


def _loop(v, body):
    return Loop(v, const(0, v.dtype), const(v.arg.hi, v.dtype), body)


def _window(trips: int, window: int, combine) -> Loop:
    """``for x in range(trips): acc = start; for r in range(window): acc = combine(acc, r)``."""
    x, r = var("x", 0, trips), var("r", 0, window)
    acc, idx = var("acc", dtype="float32"), var("idx", dtype="int32")
    values = combine(acc, idx, r + x)  # the window moves with ``x``
    targets = (acc, idx)[:len(values)]
    start = Assign(targets, (const(0.0, "float32"), const(0, "int32"))[:len(values)])
    return _loop(x, (start, _loop(r, (Assign(targets, values),))))


DATA = ta.placeholder((64,), "float32", "data")


def _argmax(acc, idx, r):
    v = DATA[r]
    keep = acc >= v
    k = Expr(Op.CAST, "int32", (r,))
    return Expr(Op.SELECT, "float32", (keep, acc, v)), Expr(Op.SELECT, "int32", (keep, idx, k))


def _sum(acc, idx, r):
    return (acc + Expr(Op.CAST, "float32", (r,)),)


@pytest.mark.parametrize("trips,lanes,want", [(14, 8, 4), (56, 8, 8), (3, 8, 2), (7, 16, 4), (1, 8, None)])
def test_width_leaves_the_fewest_iterations(trips, lanes, want):
    assert window_vector_width(_window(trips, 4, _argmax), lambda dtype: lanes) == want


def test_only_selecting_windows_of_constant_trips():
    assert window_vector_width(_window(14, 4, _sum), lambda dtype: 8) is None  # (LLVM vectorizes sums)
    assert window_vector_width(_window(14, 100, _argmax), lambda dtype: 8) is None  # not a window
    x, n = var("x", 0, 14), var("n", 0, 9)
    inner = _window(4, 4, _argmax).body[1]
    ragged = Loop(x, const(0, "int64"), const(14, "int64"),
                  (Loop(inner.var, const(0, "int64"), n, inner.body),))
    assert window_vector_width(ragged, lambda dtype: 8) is None  # an inner loop stays
    start, update = _window(4, 1, _argmax).body[0], _window(4, 1, _argmax).body[1].body[0]
    rows = _loop(x, (_loop(var("y", 0, 7), (start, update)),))
    assert window_vector_width(rows, lambda dtype: 8) is None  # a loop of rows: no window
    w = _window(14, 4, _argmax)
    inner = w.body[1]
    data = Expr(Op.GT, "bool", (var("m", dtype="float32"), const(0.0, "float32")))
    mask = If(data, inner.body, (), affine=False)
    masked = Loop(w.var, w.lo, w.hi, (w.body[0], Loop(inner.var, inner.lo, inner.hi, (mask,))))
    assert window_vector_width(masked, lambda dtype: 8) is None  # a where-mask of data
    around = _loop(var("o", 0, 15), (_window(2, 3, _argmax),))
    assert window_vector_width(_window(2, 3, _argmax), lambda dtype: 8) == 2
    assert window_vector_width(around, lambda dtype: 8) is None  # only the loop that starts them (90792)
    fixed = _window(2, 3, _argmax)
    r = fixed.body[1].var
    acc, idx = fixed.body[0].targets
    update = Assign((acc, idx), _argmax(acc, idx, r + var("o", 0, 15)))  # an outer loop's column
    still = Loop(fixed.var, fixed.lo, fixed.hi, (fixed.body[0], _loop(r, (update,))))
    assert window_vector_width(still, lambda dtype: 8) is None  # reads that do not move with it (90780)
    x = fixed.var
    first = Expr(Op.EQ, "bool", (x, const(1, x.dtype)))
    picked = Expr(Op.SELECT, "float32", (first, DATA[r], const(0.0, "float32")))
    update = Assign((acc,), (Expr(Op.SELECT, "float32", (acc >= picked, acc, picked)),))
    chosen = Loop(x, fixed.lo, fixed.hi, (Assign((acc,), (const(0.0, "float32"),)), _loop(r, (update,))))
    assert window_vector_width(chosen, lambda dtype: 8) is None  # ``x`` only in a select (100286)


@pytest.mark.parametrize("config", [(2, 2, 0), (3, 2, 1), (2, 1, 0)], ids=["2x2/2", "3x3/2 pad 1", "2x2/1"])
def test_vectorized_windows_agree_with_evaluate_at_ties_nan_and_inf(config, rng):
    kernel, stride, padding = config
    X, B, Y = _pool_program((2, 3, 9, 21), kernel, stride, padding)
    f = ta.function(Y, [X, B], target="llvm -mcpu=haswell")
    x = rng.integers(-2, 3, X.shape).astype(np.float32)  # ties, and the ReLU's zeros
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, 24, replace=False)
    flat[picks[:8]] = np.nan
    flat[picks[8:16]] = np.inf
    flat[picks[16:]] = -np.inf
    b = np.array([0.0, 0.5, -1.0], np.float32)
    outs = f._residual_outputs()
    fast = ta.build(outs, [X, B], target="llvm -mcpu=haswell")(x, b)
    plain = ta.build(outs, [X, B], target="llvm -mcpu=haswell", opt_level=0)(x, b)
    want = ta.evaluate(outs, {X: x, B: b})
    for got, base, ref in zip(fast, plain, want):
        np.testing.assert_array_equal(got, base)
        np.testing.assert_array_equal(got, ref)
