"""Whole-gradient clean-up: merging, fusion, zero proofs, memoization, determinism."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
from tensorad.simplify.cse import OpTable
from tensorad.simplify.zeros.polynomial import provably_zero

import tensorad as ta
from tensorad.ir import Op, placeholders, tensor_graph

opt = ta.OptimizeAndLiftNonzeronessConditions


def _ops(ts):
    return [t.op for t in tensor_graph(ts) if not t.is_placeholder]


def test_softmax_gradient_drops_the_max_path():
    # d softmax / d max == 0: the winner tensor and the max's adjoint are proved zero
    X = ta.placeholder((3, 7), name="X")
    H = ta.placeholder((3, 7), name="H")
    (dX,) = ta.JacobianRecursive(ta.topi.nn.softmax(X), [X], H)
    names = [op.name for op in _ops([dX])]
    assert not any("winner" in n for n in names), names
    x, h = np.random.default_rng(0).standard_normal((2, 3, 7)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    y = e / e.sum(axis=1, keepdims=True)
    want = y * (h - (h * y).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(ta.evaluate(dX, {X: x, H: h}), want, rtol=1e-4, atol=1e-6)


def test_provably_zero_needs_real_cancellation():
    A = ta.placeholder((4, 5), name="A")
    k = ta.reduce_axis((0, 5), "k")
    S = ta.compute((4,), lambda i: ta.sum(A[i, k], k), name="S")
    j = ta.reduce_axis((0, 5), "j")
    zero = ta.sum(A[0, j] / S[0] - A[0, j] * (1.0 / S[0]), j)
    assert provably_zero(zero)
    j2 = ta.reduce_axis((0, 5), "j")
    not_zero = ta.sum(A[0, j2] - A[1, j2], j2)
    assert not provably_zero(not_zero)
    assert provably_zero(ta.sum(A[0, j2], j2) - S[0])  # a read of S is the same sum


def test_same_domain_sums_are_merged():
    X = ta.placeholder((3, 7), name="X")
    H = ta.placeholder((3, 7), name="H")
    (dX,) = ta.JacobianRecursive(ta.topi.nn.log_softmax(X), [X], H)
    reds = [op for op in _ops([dX]) if op.is_reduction]
    # the forward max and sum, and one reduction of the gradient (sum_j H, its per-row factor
    # moved out of the sum by simplify/sums/factor.py)
    names = sorted(op.name for op in reds)
    assert names[:2] == ["log_softmax.max", "log_softmax.sum"] and len(names) == 3
    assert names[2].startswith("log_softmax.sum.grad")


def test_padded_convolution_input_gradient_does_not_sum_over_the_padding():
    X, W = ta.placeholder((1, 2, 6, 6), name="X"), ta.placeholder((3, 2, 3, 3), name="W")
    Y = ta.topi.nn.conv2d(X, W, 1, 2)
    (dX,) = ta.JacobianRecursive(Y, [X], ta.placeholder(Y.shape, name="H"))
    assert dX.op.is_reduction and dX.shape == X.shape  # the padded tensor's adjoint is fused


def test_optimizing_twice_is_a_lookup_and_changes_nothing():
    X, W = ta.placeholder((4, 6), name="X"), ta.placeholder((5, 6), name="W")
    Y = ta.topi.nn.dense(X, W)
    (dW,) = ta.JacobianRecursive(Y, [W], ta.placeholder((4, 5), name="H"))
    assert opt(dW) is dW or opt(dW).op is dW.op
    P = ta.placeholder((3,), name="P")
    assert opt(P) is P


def test_structurally_equal_ops_are_merged():
    A = ta.placeholder((4, 4), name="A")
    k1, k2 = ta.reduce_axis((0, 4), "k"), ta.reduce_axis((0, 4), "k")
    T1 = ta.compute((4,), lambda i: ta.sum(A[i, k1], k1), name="T")
    T2 = ta.compute((4,), lambda i: ta.sum(A[i, k2], k2), name="T")
    table = OpTable()
    assert table.intern(T1.op) is T1.op and table.intern(T2.op) is T1.op
    T3 = ta.compute((4,), lambda i: ta.sum(A[k1, i], k1), name="T")
    assert table.intern(T3.op) is T3.op


def test_a_view_is_read_at_its_index_and_never_interned():
    """``T[i, 0]`` held as the tensor ``V[i] = sum_k A[i, k]``: an equal sum over other variables
    reads ``T`` there; interning an equal op does not hand ``T`` (of other axes) back."""
    A = ta.placeholder((4, 4), name="A")
    k1, k2, k3 = (ta.reduce_axis((0, 4), "k") for _ in range(3))
    T = ta.compute((4, 1), lambda i, u: ta.sum(A[i, k1 + u], k1), name="T")
    V = ta.compute((4,), lambda i: ta.sum(A[i, k2], k2), name="V")
    table = OpTable()
    table.register_view(T.op, V.op, (V.op.axes[0], ta.const(0, "int32")))
    W = ta.compute((4,), lambda i: ta.sum(A[i, k3], k3), name="W")
    j = W.op.axes[0]
    got = table.read(W.op, (j,))
    assert got.arg.op is T.op and got.src[0] is j and got.src[1].op is Op.CONST and got.src[1].arg == 0
    assert table.intern(W.op) is W.op


def test_constant_zero_tensors_are_inlined_away():
    B = ta.placeholder((4,), name="B")
    Z = ta.compute((4,), lambda i: ta.cast("float32", i) * 0.0, name="Z")
    Y = ta.compute((4,), lambda i: Z[i] + B[i], name="Y")
    out = opt(Y)
    assert out.op.body[0].op is Op.READ and out.op.body[0].arg.op.name == "B"


def test_a_literal_zero_times_a_tensor_keeps_its_nan():
    """``A[i] * 0.0`` is NaN where ``A`` is inf or NaN, optimized or not (a literal zero is an
    IEEE value)."""
    A, B = ta.placeholder((4,), name="A"), ta.placeholder((4,), name="B")
    Z = ta.compute((4,), lambda i: A[i] * 0.0, name="Z")
    Y = ta.compute((4,), lambda i: Z[i] + B[i], name="Y")
    feed = {A: np.array([1, np.inf, np.nan, -2], np.float32), B: np.ones(4, np.float32)}
    want = np.array([1, np.nan, np.nan, 1], np.float32)
    np.testing.assert_array_equal(ta.evaluate([opt(Y)], feed)[0], want)
    np.testing.assert_array_equal(ta.evaluate([Y], feed)[0], want)


_SCRIPT = textwrap.dedent("""
    import tensorad as ta
    X = ta.placeholder((2, 3, 7, 7), name="X")
    Wt = ta.placeholder((4, 3, 3, 3), name="W")
    Y = ta.topi.nn.pool(ta.topi.nn.conv2d(X, Wt, 2, 1), 3, 1, [1, 1, 1, 1], "max")
    Y = ta.topi.nn.softmax(ta.topi.nn.flatten(Y))
    for g in ta.JacobianRecursive(Y, [X, Wt], ta.placeholder(Y.shape, name="H")):
        print(ta.PrintTensorRecursively(g))
""")


def test_output_is_the_same_from_run_to_run():
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        run = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                             env=env, timeout=120, check=True)
        outs.append(run.stdout)
    assert outs[0] == outs[1] and "X.grad" in outs[0]


def test_chain_of_layers_is_correct_and_in_bounds():
    X = ta.placeholder((2, 3, 7, 7), name="X")
    Wt = ta.placeholder((4, 3, 3, 3), name="W")
    Y = ta.topi.nn.pool(ta.topi.nn.relu(ta.topi.nn.conv2d(X, Wt, 2, 1)), 3, 1, [1, 1, 1, 1], "max")
    Y = ta.topi.nn.log_softmax(ta.topi.nn.flatten(Y))
    H = ta.placeholder(Y.shape, name="H")
    grads = ta.JacobianRecursive(Y, [X, Wt], H)
    raw = ta.JacobianRecursive(Y, [X, Wt], H, optimize=False)
    rng = np.random.default_rng(3)
    feed = {p: rng.standard_normal(p.shape).astype(np.float32) for p in placeholders(raw)}
    for got, want in zip(ta.evaluate(grads, feed), ta.evaluate(raw, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert ta.lower(grads, placeholders(grads)).work < ta.lower(raw, placeholders(raw)).work
