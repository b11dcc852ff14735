"""The gradient of a running max or min (``Y[j] = max_{k <= j} A[k]``, a suffix ``k >= j``, an
exclusive ``k < j``, a data mask beside the bound) splits each head among the points tied with its
output in linear work, however many points tie.  A point ``k`` that ties the first output reading it
ties every later output while ``Y`` keeps its value and no other (``Y`` is monotone), so its share is
a suffix recurrence over runs of equal values.  Routing the ties of each output over its whole
prefix was quadratic when every point ties (1152 work for a 4 x 16 cumulative max, 3 passes now).

Oracles: PyTorch float64 (``torch.max``/``torch.min`` of each window, whose backward splits ties
evenly and gives the NaNs of a window the head, ``docs/conventions.md``), float64 central
differences without ties, ``ta.evaluate``."""

import numpy as np
import pytest
import torch

import tensorad as ta

AVX512 = "llvm -mcpu=skylake-avx512"
R, N = 3, 9


def _window(j, n, suffix, shift, mask):
    return [k for k in range(n) if (k >= j + shift if suffix else k <= j - shift) and mask[k] > 0]


def _running(kind, suffix, shift, masked, inexact=False, shape=(R, N), dtype="float64"):
    """``Y[i, j] = kind_{k in window(j)} A[i, k]`` with ``A = X`` or ``2 X + 1`` (``inexact``: two
    roundings, compared from saved values), and its gradient for the head ``H``."""
    n = shape[1]
    X, H = ta.placeholder(shape, dtype, "X"), ta.placeholder(shape, dtype, "H")
    M = ta.placeholder((n,), dtype, "M")
    k = ta.reduce_axis((0, n), "k")

    def body(i, j):
        cond = (k >= j + shift) if suffix else (k <= j - shift)
        if masked:
            cond = cond & (M[k] > 0)
        a = X[i, k] * 2.0 + 1.0 if inexact else X[i, k]
        return (ta.max if kind == "max" else ta.min)(a, k, where=cond)

    Y = ta.compute(shape, body, "Y")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    return X, M, H, dX


def _torch_gradient(kind, suffix, shift, inexact, x, m, h):
    xt = torch.tensor(x, requires_grad=True)
    pick = torch.max if kind == "max" else torch.min
    total = torch.zeros((), dtype=torch.float64)
    for j in range(x.shape[1]):
        span = _window(j, x.shape[1], suffix, shift, m)
        for i in range(x.shape[0]) if span else ():
            a = xt[i, span] * 2.0 + 1.0 if inexact else xt[i, span]
            total = total + float(h[i, j]) * pick(a)
    if total.requires_grad:
        total.backward()
    return np.zeros_like(x) if xt.grad is None else xt.grad.numpy()


def _inputs(case, rng):
    x = rng.integers(-2, 3, (R, N)).astype(np.float64)  # many ties
    h = rng.integers(-3, 4, (R, N)).astype(np.float64)
    if case == "distinct":
        x = rng.permutation(np.arange(R * N)).reshape(R, N) / 4.0
    elif case == "nan":
        x[0, 3] = x[1, 5] = x[1, 7] = np.nan
    elif case == "inf":
        x[0, 2], x[1, 4], x[2, 0], x[2, 8] = np.inf, -np.inf, np.inf, -np.inf
    elif case == "infinite_head":
        h[0, 4], h[1, 6] = np.inf, np.nan
    return x, h


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("suffix", [False, True], ids=["prefix", "suffix"])
@pytest.mark.parametrize("shift,masked,inexact", [(0, False, False), (1, False, True), (2, True, False),
                                                  (0, True, True)])
def test_a_running_max_or_min_splits_ties_as_pytorch(kind, suffix, shift, masked, inexact):
    X, M, H, dX = _running(kind, suffix, shift, masked, inexact)
    build = ta.build([dX], [X, M, H])
    rng = np.random.default_rng(7)
    m = rng.integers(0, 2, N).astype(np.float64) if masked else np.ones(N)
    for case in ["ties", "distinct", "nan", "inf", "infinite_head"]:
        x, h = _inputs(case, rng)
        want = _torch_gradient(kind, suffix, shift, inexact, x, m, h)
        np.testing.assert_allclose(build(x, m, h), want, rtol=1e-12, atol=1e-12, err_msg=case)
        np.testing.assert_allclose(ta.evaluate(dX, {X: x, M: m, H: h}), want, rtol=1e-12, atol=1e-12,
                                   err_msg=case)


@pytest.mark.parametrize("suffix", [False, True], ids=["prefix", "suffix"])
def test_a_running_max_gradient_without_ties_equals_differences(suffix, numeric_grad):
    X, M, H, dX = _running("max", suffix, 1, False, inexact=True)
    rng = np.random.default_rng(3)
    x, h, m = rng.permutation(np.arange(R * N)).reshape(R, N) / 4.0, rng.standard_normal((R, N)), np.ones(N)

    def forward(a):
        out = np.zeros((R, N))  # (an empty window: a constant)
        for j in range(N):
            span = _window(j, N, suffix, 1, m)
            if span:
                out[:, j] = (a[:, span] * 2.0 + 1.0).max(axis=1)
        return out

    want = numeric_grad(forward, [x], h)[0]
    np.testing.assert_allclose(ta.build([dX], [X, M, H])(x, m, h), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("suffix", [False, True], ids=["prefix", "suffix"])
@pytest.mark.parametrize("inexact", [False, True])
def test_a_running_max_or_min_gradient_is_linear_when_every_point_ties(kind, suffix, inexact):
    """``.work`` is the worst case over inputs: the winner's scan (value and tie count), the shares'
    suffix scan and the routing, one pass each over 4 x n, and one copy of the terms compared from
    saved values (``inexact``), never one per output."""
    for n in (64, 256):
        X, M, H, dX = _running(kind, suffix, 0, False, inexact, shape=(4, n), dtype="float32")
        work = ta.lower([dX], [X, M, H], target=AVX512).work
        assert work == (4 if inexact else 3) * 4 * n, str(ta.lower([dX], [X, M, H], target=AVX512))


def test_a_running_max_hessian_vector_product_equals_pytorch_with_ties():
    """Forward over the routed gradient: the shares' scan differentiates as a recurrence."""
    n = 7
    X, V = ta.placeholder((2, n), "float64", "X"), ta.placeholder((2, n), "float64", "V")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((2, n), lambda i, j: ta.max(X[i, k] * X[i, k], k, where=k <= j), name="Y")
    r, q = ta.reduce_axis((0, 2), "r"), ta.reduce_axis((0, n), "q")
    L = ta.compute((), lambda: ta.sum(Y[r, q] * Y[r, q] * (q + 1.0), [r, q]), name="L")
    (hv,) = ta.hessian_vector_product(L, [X], [V])
    rng = np.random.default_rng(1)
    x, v = rng.integers(-2, 3, (2, n)).astype(np.float64), rng.standard_normal((2, n))
    xt = torch.tensor(x, requires_grad=True)
    loss = sum((torch.stack([torch.max(xt[i, :j + 1] ** 2) for i in range(2)]) ** 2).sum() * (j + 1.0)
               for j in range(n))
    (g,) = torch.autograd.grad(loss, xt, create_graph=True)
    (want,) = torch.autograd.grad((g * torch.tensor(v)).sum(), xt)
    np.testing.assert_allclose(ta.build([hv], [X, V])(x, v), want.numpy(), rtol=1e-12, atol=1e-12)
