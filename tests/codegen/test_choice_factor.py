"""Costly work shared by the branches of an eager choice, computed once (codegen/passes/choice_factoring.py):
bit for bit the same values, fewer divisions (counted in the lowered program, not timed)."""

import numpy as np
from tensorad.codegen.passes.choice_factoring import factor_choices

import tensorad as ta
from tensorad.ir.expr import Op
from tensorad.ir.rewrite import walk
from tensorad.ir.tensor import ComputeOp
from tensorad.reference.numpy_eval import evaluate_op

SPECIAL = np.array([-3, 3, -3.0000002, 2.9999998, 0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e38,
                    -3e38, 6, -6, 0.5], np.float32)


def _data(rng, shape):
    x = rng.uniform(-5, 5, shape).astype(np.float32)
    h = rng.uniform(-2, 2, shape).astype(np.float32)
    x.flat[:SPECIAL.size] = SPECIAL
    h.flat[SPECIAL.size:2 * SPECIAL.size] = SPECIAL
    x.flat[SPECIAL.size:2 * SPECIAL.size] = SPECIAL[::-1]
    return x, h


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return bool(np.all((a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))))


def _divisions(e):
    return sum(1 for n in walk(e) if n.op is Op.DIV)


def test_rewrite_is_exact_and_divides_once(rng):
    """A tree of choices among ``H * (u / 6)`` for several ``u``, a zero, and a choice under
    ``+`` (whose hole is not taken: a product there may become a fused multiply-add)."""
    X = ta.placeholder((8, 32), "float32", "X")
    H = ta.placeholder((8, 32), "float32", "H")

    def body(i, j):
        x, h = X[i, j], H[i, j]
        tree = ta.select(x > 0, h * (x / 6.0), ta.select(
            x < -1, 0.0, ta.select(x < -2, h * ((x * 0.5) / 6.0), h * ((x * 0.25) / 6.0))))
        added = ta.select(h > 0, x * h + 1.0, x * x + 1.0)
        return tree + ta.exp(ta.select(x > 1, x, h)) + added

    Y = ta.compute(X.shape, body, name="Y")
    new = factor_choices(Y.op.body[0])
    assert _divisions(Y.op.body[0]) == 3 and _divisions(new) == 1
    assert sum(1 for n in walk(new) if n.op is Op.ADD and n.src[1].op is Op.CONST) == 2  # (not factored)
    x, h = _data(rng, X.shape)
    values = {X: x, H: h}
    want = evaluate_op(Y.op, values)[0]
    got = evaluate_op(ComputeOp("Y", "", Y.op.axes, (new,)), values)[0]
    assert _same_bits(got, want)


def test_lazy_choices_and_cheap_contexts_are_left_alone():
    X = ta.placeholder((9,), "float32", "X")
    lazy = ta.compute((8,), lambda i: ta.if_then_else(X[i] > 0, X[i] / 3.0, (X[i] * 2.0) / 3.0), name="L")
    cheap = ta.compute((8,), lambda i: ta.select(X[i] > 0, X[i] * 3.0, (X[i] * 2.0) * 3.0), name="C")
    for t in (lazy, cheap):
        assert factor_choices(t.op.body[0]) is t.op.body[0]
    # reads at two indices: the division takes a choice of the two loads, never of the indices
    shifted = ta.compute((8,), lambda i: ta.select(X[i] > 0, 1.0 / X[i], 1.0 / X[i + 1]), name="S")
    new = factor_choices(shifted.op.body[0])
    assert _divisions(new) == 1 and all(n.dtype == "float32" for n in walk(new) if n.op is Op.SELECT)


def test_hardswish_gradient_divides_twice_not_four_times(rng):
    X = ta.placeholder((64, 256), "float32", "X")
    Y = ta.compute(X.shape, lambda i, j: X[i, j] * ta.minimum(ta.maximum(X[i, j] + 3.0, 0.0), 6.0) / 6.0,
                   name="hardswish")
    fn = ta.function(Y, [X], wrt=[X], num_threads=1)
    assert str(fn.lower_backward()).count("/ 6.0f") == 2  # one over each read of X
    x = rng.uniform(-5, 5, X.shape).astype(np.float32)
    h = rng.uniform(-2, 2, X.shape).astype(np.float32)
    _, saved = fn.forward(x)
    x64, h64 = x.astype(np.float64), h.astype(np.float64)
    want = np.where(x64 < -3, 0.0, np.where(x64 > 3, h64, h64 * (x64 / 3 + 0.5)))  # PyTorch's formula
    got = fn.backward(saved, h)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
