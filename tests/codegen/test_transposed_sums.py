"""A sum spelled twice, once transposed (codegen/passes/transposed_sums.py), is computed once: the work
drops by one product and the values stay those of NumPy formulas written here; SwiGLU's
gradients (whose program spells ``dY W2`` both ways) against torch float64 autograd."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.ir.rewrite import simultaneous
from tensorad.ir.tensor import ComputeOp, Tensor

M, N, K = 5, 7, 3


def _sides():
    A = ta.placeholder((M, K), "float64", "A")
    B = ta.placeholder((K, N), "float64", "B")
    rng = np.random.default_rng(1)
    return A, B, rng.normal(size=(M, K)), rng.normal(size=(K, N))


def _two_spellings(A, B, other=None):
    r = ta.reduce_axis((0, K), "r")
    s = ta.reduce_axis((0, K), "s")
    P = ta.compute((M, N), lambda i, j: ta.sum(A[i, r] * B[r, j], r), "P")
    second = other if other is not None else A
    Q = ta.compute((N, M), lambda j, i: ta.sum(B[s, j] * second[i, s], s), "Q")  # P transposed
    return P, Q


def test_a_transposed_sum_is_computed_once():
    A, B, a, b = _sides()
    P, Q = _two_spellings(A, B)
    U = ta.compute((M, N), lambda i, j: ta.exp(P[i, j]) + Q[j, i], "U")
    V = ta.compute((N, M), lambda j, i: Q[j, i] * 3.0 - P[i, j], "V")
    # P (M N K), U (M N), V (M N); Q's M N K is gone
    assert ta.lower([U, V], [A, B]).work == M * N * K + 2 * M * N
    u, v = ta.build([U, V], [A, B])(a, b)
    p = a @ b
    np.testing.assert_allclose(u, np.exp(p) + p, rtol=1e-13)
    np.testing.assert_allclose(v, 2 * p.T, rtol=1e-13, atol=1e-14)


def test_different_sums_and_outputs_are_kept():
    A, B, a, b = _sides()
    A2 = ta.placeholder((M, K), "float64", "A2")
    P, Q = _two_spellings(A, B, other=A2)  # Q reads another tensor: not P transposed
    U = ta.compute((M, N), lambda i, j: P[i, j] + Q[j, i], "U")
    P1, Q1 = _two_spellings(A, B)
    U1 = ta.compute((M, N), lambda i, j: P1[i, j] + Q1[j, i], "U")
    assert ta.lower([U], [A, B, A2]).work - ta.lower([U1], [A, B, A2]).work == M * N * K
    a2 = np.random.default_rng(2).normal(size=(M, K))
    np.testing.assert_allclose(ta.build([U], [A, B, A2])(a, b, a2), a @ b + a2 @ b, rtol=1e-13)
    P, Q = _two_spellings(A, B)  # an output keeps its own buffer and nest
    p, q = ta.build([P, Q], [A, B])(a, b)
    np.testing.assert_allclose(q, (a @ b).T, rtol=1e-13)
    assert ta.lower([P, Q], [A, B]).work == 2 * M * N * K


def test_three_axes_permuted():
    X = ta.placeholder((2, 3, 5), "float64", "X")
    r = ta.reduce_axis((0, 5), "r")
    s = ta.reduce_axis((0, 5), "s")
    S = ta.compute((2, 3, 3), lambda b, i, j: ta.sum(X[b, i, r] * X[b, j, r], r), "S")
    T = ta.compute((3, 2, 3), lambda j, b, i: ta.sum(X[b, i, s] * X[b, j, s], s), "T")
    U = ta.compute((2, 3, 3), lambda b, i, j: S[b, i, j] - 2.0 * T[j, b, i], "U")
    x = np.random.default_rng(4).normal(size=(2, 3, 5))
    assert ta.lower([U], [X]).work == 2 * 3 * 3 * 5 + 2 * 3 * 3
    np.testing.assert_allclose(ta.build([U], [X])(x), -np.einsum("bir,bjr->bij", x, x), rtol=1e-13)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_swiglu_gradients_match_torch(target):
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    nn = ta.topi.nn
    rows, d, h = 5, 7, 11
    X = ta.placeholder((rows, d), "float64", "X")
    W1, W3 = (ta.placeholder((h, d), "float64", n) for n in ("W1", "W3"))
    W2 = ta.placeholder((d, h), "float64", "W2")
    Y = nn.dense(nn.silu(nn.dense(X, W1)) * nn.dense(X, W3), W2)
    H = ta.placeholder(Y.shape, "float64", "H")
    grads = ta.JacobianRecursive(Y, [X, W1, W3, W2], head=H)
    rng = np.random.default_rng(6)
    vals = [rng.normal(size=s) for s in ((rows, d), (h, d), (h, d), (d, h), (rows, d))]
    got = ta.build(list(grads), [X, W1, W3, W2, H], target=target)(*vals)
    ts = [torch.tensor(v, requires_grad=True) for v in vals[:4]]
    F = torch.nn.functional
    y = F.linear(F.silu(F.linear(ts[0], ts[1])) * F.linear(ts[0], ts[2]), ts[3])
    want = torch.autograd.grad(y, ts, torch.tensor(vals[4]))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-10, atol=1e-12)


def test_sums_that_share_their_axis_variables():
    """A hang: forward mode made two sums over the same axis variables, one
    the other transposed.  Matching them maps each shared axis to another shared axis, a cycle
    that replacing over and over never leaves; the substitution is simultaneous."""
    X = ta.placeholder((2, 3, 5), "float64", "X")
    r = ta.reduce_axis((0, 5), "r")
    s = ta.reduce_axis((0, 5), "s")
    S = ta.compute((2, 3, 3), lambda b, i, j: ta.sum(X[b, i, r] * X[b, j, r], r), "S")
    b, i, j = S.op.axes  # T[j, b, i] = S[b, i, j], written over S's own axis variables
    body = ta.sum(X[b, i, s] * X[b, j, s], s)
    T = Tensor(ComputeOp("T", "", (j, b, i), (body,)), 0)
    U = ta.compute((2, 3, 3), lambda b, i, j: S[b, i, j] - 2.0 * T[j, b, i], "U")
    x = np.random.default_rng(5).normal(size=(2, 3, 5))
    assert ta.lower([U], [X]).work == 2 * 3 * 3 * 5 + 2 * 3 * 3
    np.testing.assert_allclose(ta.build([U], [X])(x), -np.einsum("bir,bjr->bij", x, x), rtol=1e-13)
    assert simultaneous({b: i, i: b})(b + 2 * i) == i + 2 * b
