"""A compound operand read through windows is computed once (codegen/passes/shared_windows.py).

Oracles: NumPy formulas written here and ``ta.evaluate``; the structure is read from
``ta.lower``'s text (which ops are allocated), never from timings.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorad.codegen.passes.shared_windows import _narrowed

import tensorad as ta
from tensorad.ir.expr import const, var

RNG = np.random.default_rng(11)


def _operands(f) -> list[str]:
    return [line for line in str(f).splitlines()
            if line.strip().startswith("allocate") and ".operand" in line]


def _conv_bias_relu(dtype):
    X = ta.placeholder((2, 6, 9, 8), dtype, "X")
    W = ta.placeholder((5, 6, 3, 3), dtype, "W")
    B = ta.placeholder((5,), dtype, "B")
    C = ta.topi.nn.conv2d(X, W, 1, 1)
    Z = ta.compute(C.shape, lambda n, f, y, x: C[n, f, y, x] + B[f], name="Z")
    Y = ta.topi.nn.relu(Z)
    H = ta.placeholder(Y.shape, dtype, "H")
    return X, W, B, C, Y, H


def _numpy_conv_bias_relu_grads(x, w, b, h):
    """Gradients of sum(h * relu(conv2d(x, w, pad 1) + b)) written out in NumPy (relu'(0) = 0)."""
    n, ci, hh, ww = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, r:r + hh, s:s + ww] for r in range(3) for s in range(3)], axis=2)
    z = np.einsum("ncryx,fcr->nfyx", cols.reshape(n, ci, 9, hh, ww), w.reshape(w.shape[0], ci, 9)) \
        + b[None, :, None, None]
    g = h * (z > 0)
    gw = np.einsum("nfyx,ncryx->fcr", g, cols.reshape(n, ci, 9, hh, ww)).reshape(w.shape)
    gb = g.sum(axis=(0, 2, 3))
    gxp = np.zeros_like(xp)
    for r in range(3):
        for s in range(3):
            gxp[:, :, r:r + hh, s:s + ww] += np.einsum("nfyx,fc->ncyx", g, w[:, :, r, s])
    return gxp[:, :, 1:-1, 1:-1], gw, gb, z


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-10), ("float32", 2e-4)])
def test_conv_bias_relu_masked_head_is_computed_once(dtype, tol):
    # select(C + B <= 0, 0, H) is read by nine windows of X's gradient and once by W's and B's:
    # it becomes one tensor, and every gradient reads it
    X, W, B, C, Y, H = _conv_bias_relu(dtype)
    grads = ta.JacobianRecursive(Y, [X, W, B], H)
    inputs = [X, W, B, H, C]
    f = ta.lower(grads, inputs, microkernel=True)
    ops = _operands(f)
    assert len(ops) == 1, str(f)
    name = ops[0].split()[1].split(":")[0]
    reads = [line for line in str(f).splitlines() if "] = " in line and f"{name}[" in line.split("=", 1)[1]]
    assert reads, str(f)  # (its readers: the padded copy and the weight and bias gradients)
    x, w = RNG.standard_normal(X.shape), RNG.standard_normal(W.shape)
    b, h = RNG.standard_normal(B.shape), RNG.standard_normal(Y.shape)
    x[0, :, :4, :4] = 0.0  # the convolution is exactly the bias there: ties at the kink with b = 0
    b[0] = 0.0
    want = _numpy_conv_bias_relu_grads(x, w, b, h)
    args = [a.astype(dtype) for a in (x, w, b, h, want[3] - b[None, :, None, None])]
    kern = ta.build(grads, inputs, microkernel=True, parallel_min_work=0)
    for threads in (1, 2):
        kern.num_threads = threads
        for got, ref in zip(kern(*args), want[:3]):
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


def _numpy_strided_conv_relu_grads(x, w, h, stride):
    """dX, dW of sum(h * relu(conv2d(x, w, stride, pad 1))) written out in NumPy (relu'(0) = 0)."""
    n, ci, hh, ww = x.shape
    oh, ow = h.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))

    def window(r, s):
        return xp[:, :, r:r + stride * (oh - 1) + 1:stride, s:s + stride * (ow - 1) + 1:stride]
    z = sum(np.einsum("ncyx,fc->nfyx", window(r, s), w[:, :, r, s]) for r in range(3) for s in range(3))
    g = h * (z > 0)
    gw = np.stack([np.stack([np.einsum("nfyx,ncyx->fc", g, window(r, s)) for s in range(3)], -1)
                   for r in range(3)], -2)
    gxp = np.zeros_like(xp)
    for r in range(3):
        for s in range(3):
            gxp[:, :, r:r + stride * (oh - 1) + 1:stride, s:s + stride * (ow - 1) + 1:stride] += \
                np.einsum("nfyx,fc->ncyx", g, w[:, :, r, s])
    return gxp[:, :, 1:-1, 1:-1], gw


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-10), ("float32", 2e-4)])
def test_strided_conv_relu_masked_head_is_computed_once(dtype, tol):
    # a stride-2 convolution's input gradient reads select(C <= 0, 0, H) at (y + 1 - ry) // 2:
    # each point through a window of taps, so it is computed once and every residue class's
    # product, and the weight gradient, read that one tensor (not a masked copy each); the classes
    # that read past its edges share one zero-padded copy of it, written in the pass that masks it
    X = ta.placeholder((2, 6, 11, 10), dtype, "X")
    W = ta.placeholder((5, 6, 3, 3), dtype, "W")
    C = ta.topi.nn.conv2d(X, W, 2, 1)
    Y = ta.topi.nn.relu(C)
    H = ta.placeholder(Y.shape, dtype, "H")
    grads = ta.JacobianRecursive(Y, [X, W], H)
    inputs = [X, W, H, C]
    f = ta.lower(grads, inputs, microkernel=True)
    operands = _operands(f)
    assert len([a for a in operands if ".padded" not in a]) == 1, str(f)
    assert len(operands) <= 2 and all(".operand.padded:" in a for a in operands[1:]), str(f)
    if len(operands) == 2:  # (the padded copy in the masking pass)
        assert "# nest X.grad.operand+X.grad.operand.padded:" in str(f), str(f)
    assert str(f).count("<= 0.0") == 1, str(f)  # (the mask, evaluated in one nest)
    x, w, h = RNG.standard_normal(X.shape), RNG.standard_normal(W.shape), RNG.standard_normal(Y.shape)
    want = _numpy_strided_conv_relu_grads(x, w, h, 2)
    c = ta.evaluate([C], {X: x, W: w})[0]
    kern = ta.build(grads, inputs, microkernel=True, parallel_min_work=0)
    for threads in (1, 2):
        kern.num_threads = threads
        for got, ref in zip(kern(*(a.astype(dtype) for a in (x, w, h, c))), want):
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


def test_a_dense_layers_masked_head_stays_inline():
    # dY * relu'(z) of a dense layer is read once per point by each gradient: no window
    # re-reads it, so an extra pass over it would not be repaid
    X = ta.placeholder((16, 24), "float64", "X")
    W = ta.placeholder((12, 24), "float64", "W")
    B = ta.placeholder((12,), "float64", "B")
    Y = ta.topi.nn.relu(ta.topi.nn.dense(X, W, B))
    H = ta.placeholder(Y.shape, "float64", "H")
    grads = ta.JacobianRecursive(Y, [X, W, B], H)
    assert _operands(ta.lower(grads, [X, W, B, H])) == []


def test_an_operand_under_an_index_guard_counts_only_the_guarded_range():
    # j runs over three times A's columns, but the operand is read only where j < n: each
    # point once (a concatenation's piece, as in a fused projection's gradient), so it stays
    n = 8
    A = ta.placeholder((5, n), "float64", "A")
    B = ta.placeholder((5, n), "float64", "B")
    Y = ta.compute((5, 3 * n), lambda i, j: ta.if_then_else(j < n, A[i, j] * B[i, j] + A[i, j], 0.0),
                   name="Y")
    f = ta.lower([Y], [A, B])
    assert _operands(f) == [], str(f)
    a, b = RNG.standard_normal((5, n)), RNG.standard_normal((5, n))
    want = np.concatenate([a * b + a, np.zeros((5, 2 * n))], axis=1)
    np.testing.assert_allclose(ta.build([Y], [A, B])(a, b), want, rtol=1e-12)


def _stencil(n, taps, op):
    A = ta.placeholder((n,), "float64", "A")
    Bt = ta.placeholder((n,), "float64", "B")
    K = ta.placeholder((taps,), "float64", "K")
    r = ta.reduce_axis((0, taps), "r")
    m = n - taps + 1
    Y = ta.compute((m,), lambda i: ta.sum(op(A[i + r], Bt[i + r]) * K[r], r), name="Y")
    return A, Bt, K, Y


@pytest.mark.parametrize("n,taps,shared", [(40, 5, 1), (64, 16, 1),
                                            (9, 2, 0),  # (each point read twice: not repaid)
                                            (7, 7, 0)])  # (one window: each point read once)
def test_a_windowed_sum_reads_its_operand_once_computed(n, taps, shared):
    A, B, K, Y = _stencil(n, taps, lambda a, b: ta.exp(a) * b + a)
    f = ta.lower([Y], [A, B, K])
    assert len(_operands(f)) == shared, str(f)
    a, b, k = RNG.standard_normal(n), RNG.standard_normal(n), RNG.standard_normal(taps)
    u = np.exp(a) * b + a
    want = np.array([u[i:i + taps] @ k for i in range(n - taps + 1)])
    np.testing.assert_allclose(ta.build([Y], [A, B, K])(a, b, k), want, rtol=1e-12, atol=1e-12)


def test_an_operand_with_integer_division_is_not_moved():
    # A[(i + r) // 2] could be computed at points no reader reads only if it never faults
    # there; integer division is kept with its readers
    n, taps = 20, 3
    A = ta.placeholder((n,), "float64", "A")
    B = ta.placeholder((n,), "float64", "B")
    r = ta.reduce_axis((0, taps), "r")
    Y = ta.compute((n - taps + 1,), lambda i: ta.sum(A[(i + r) // 2] * B[i + r] + B[i + r], r), name="Y")
    f = ta.lower([Y], [A, B])
    assert _operands(f) == []
    a, b = RNG.standard_normal(n), RNG.standard_normal(n)
    want = [sum(a[(i + s) // 2] * b[i + s] + b[i + s] for s in range(taps)) for i in range(n - taps + 1)]
    np.testing.assert_allclose(ta.build([Y], [A, B])(a, b), want, rtol=1e-12)


OPS = [lambda a, b: a * b + a, lambda a, b: ta.if_then_else(a > 0, b, a * 0.5),
       lambda a, b: ta.tanh(a - b), lambda a, b: ta.maximum(a, b) * ta.minimum(a, b)]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 30), taps=st.integers(1, 6), op=st.sampled_from(range(len(OPS))),
       seed=st.integers(0, 2**31))
def test_random_windowed_operands_agree_with_evaluate(n, taps, op, seed):
    taps = min(taps, n)
    A, B, K, Y = _stencil(n, taps, OPS[op])
    H = ta.placeholder(Y.shape, "float64", "H")
    grads = ta.JacobianRecursive(Y, [A, B, K], H)
    rng = np.random.default_rng(seed)
    feed = {A: rng.standard_normal(n), B: rng.standard_normal(n), K: rng.standard_normal(taps),
            H: rng.standard_normal(Y.shape)}
    outs = [Y, *grads]
    want = ta.evaluate(outs, feed)
    got = ta.build(outs, [A, B, K, H])(*(feed[t] for t in (A, B, K, H)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


CMP = ["<", "<=", ">", ">=", "==", "!="]


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(CMP), st.integers(-3, 13), st.booleans()),
                   min_size=1, max_size=3), negate=st.booleans())
def test_narrowed_ranges_keep_every_value_the_guard_admits(ops, negate):
    # brute force over the variable's range: the narrowed range is an over-estimate, never
    # missing a value the condition (or its negation) lets through
    v = var("v", 0, 10)
    cmp = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
           ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
    cond, tests = None, []
    for op, c, const_first in ops:
        e = cmp[op](const(c, "int64"), v) if const_first else cmp[op](v, const(c, "int64"))
        tests.append((lambda x, op=op, c=c, f=const_first: cmp[op](c, x) if f else cmp[op](x, c)))
        cond = e if cond is None else (cond & e)
    lo, hi = _narrowed(cond, {}, negate=negate).get(v, (0, 10))
    for x in range(10):
        admitted = all(t(x) for t in tests)
        if admitted != negate:
            assert lo <= x < hi, (x, lo, hi)
