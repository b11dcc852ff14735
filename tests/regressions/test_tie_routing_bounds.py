"""A max or min whose ``where`` bounds its window by an output axis,
``Y[i, j] = max_{k < j} X[i, k] (j + 1)`` (the source reads ``j``, so this is no running scan): the
gradient's tie routing visited the whole box of ``k`` for every output, ``R N^2`` points, where the
window has ``N (N - 1) / 2`` per row (513 work for 3 x 9, a breach of the cheap-gradient bound; 378
now).  The routing keeps the ``where``'s linear bounds of the window by the outputs as bounds of its
loop over the window point.

Oracles: PyTorch float64 (``torch.max``/``torch.min`` of each window: ties share the head evenly,
NaNs take it, ``docs/conventions.md``), and its second derivatives; ``ta.evaluate``."""

import numpy as np
import pytest
import torch

import tensorad as ta

AVX512 = "llvm -mcpu=skylake-avx512"
R, N = 3, 9


def _triangle(kind, n=N, square=False):
    X, H = ta.placeholder((R, n), "float64", "X"), ta.placeholder((R, n), "float64", "H")
    k = ta.reduce_axis((0, n), "k")
    pick = ta.max if kind == "max" else ta.min

    def body(i, j):
        a = X[i, k] * X[i, k] if square else X[i, k]
        return pick(a * (j + 1.0), k, where=k < j)

    Y = ta.compute((R, n), body, "Y")
    return X, H, Y


def _torch_loss(kind, xt, h, square=False):
    pick = torch.max if kind == "max" else torch.min
    total = torch.zeros((), dtype=torch.float64)
    for j in range(1, xt.shape[1]):
        for i in range(R):
            a = xt[i, :j] ** 2 if square else xt[i, :j]
            total = total + h[i, j] * pick(a * (j + 1.0))
    return total


def _inputs(case, rng):
    x = rng.integers(-2, 3, (R, N)).astype(np.float64)  # many ties
    h = rng.standard_normal((R, N))
    if case == "distinct":
        x = rng.permutation(np.arange(R * N)).reshape(R, N) / 4.0
    elif case == "nan":
        x[0, 3] = x[1, 5] = x[2, 0] = np.nan
    elif case == "inf":
        x[0, 2], x[1, 4], x[2, 0], x[2, 7] = np.inf, -np.inf, -np.inf, np.inf
    return x, h


@pytest.mark.parametrize("kind", ["max", "min"])
def test_tie_routing_runs_over_the_window_only(kind):
    """Work by hand: the compared values (saved: the source rounds), the winner with its tie count and
    the tie routing each visit the ``R N (N - 1) / 2`` points of the triangle; the destination and the
    winner's scatter one per output."""
    X, H, Y = _triangle(kind)
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    low = ta.lower([dX], [X, H], target=AVX512)
    assert low.work == 3 * R * N * (N - 1) // 2 + 2 * R * N, str(low)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_gradient_with_ties_nan_and_inf_equals_pytorch(kind):
    X, H, Y = _triangle(kind)
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    build = ta.build([dX], [X, H])
    rng = np.random.default_rng(5)
    for case in ["ties", "distinct", "nan", "inf"]:
        x, h = _inputs(case, rng)
        xt = torch.tensor(x, requires_grad=True)
        _torch_loss(kind, xt, torch.tensor(h)).backward()
        want = xt.grad.numpy()
        np.testing.assert_allclose(build(x, h), want, rtol=1e-12, atol=1e-12, err_msg=case)
        np.testing.assert_allclose(ta.evaluate(dX, {X: x, H: h}), want, rtol=1e-12, atol=1e-12, err_msg=case)


def test_hessian_vector_product_with_ties_equals_pytorch():
    X, H, Y = _triangle("max", square=True)
    V = ta.placeholder((R, N), "float64", "V")
    r, q = ta.reduce_axis((0, R), "r"), ta.reduce_axis((0, N), "q")
    L = ta.compute((), lambda: ta.sum(Y[r, q] * Y[r, q] * H[r, q], [r, q]), name="L")
    (hv,) = ta.hessian_vector_product(L, [X], [V])
    rng = np.random.default_rng(2)
    x, v, h = rng.integers(-2, 3, (R, N)).astype(np.float64), rng.standard_normal((R, N)), rng.random((R, N))
    xt = torch.tensor(x, requires_grad=True)
    pick = torch.max
    loss = sum(float(h[i, j]) * pick(xt[i, :j] ** 2 * (j + 1.0)) ** 2 for j in range(1, N) for i in range(R))
    (g,) = torch.autograd.grad(loss, xt, create_graph=True)
    (want,) = torch.autograd.grad((g * torch.tensor(v)).sum(), xt)
    np.testing.assert_allclose(ta.build([hv], [X, V, H])(x, v, h), want.numpy(), rtol=1e-12, atol=1e-12)


PR, PN, K, P = 4, 12, 5, 2  # rows, length, window, padding of the pool below


def _padded_pool(square=False):
    """``Y[i, j] = max_k (in bounds(j + k - P) ? 2 a + 1 : -5)``, ``a = X[i, j + k - P]`` (squared when
    ``square``): a padded 1-D max pool written with ``if_then_else``."""
    X, H = ta.placeholder((PR, PN), "float64", "X"), ta.placeholder((PR, PN), "float64", "H")
    k = ta.reduce_axis((0, K), "k")

    def body(i, j):
        a = X[i, j + k - P] * X[i, j + k - P] if square else X[i, j + k - P]
        return ta.max(ta.if_then_else((j + k - P >= 0) & (j + k - P < PN), a * 2.0 + 1.0, -5.0), k)

    return X, H, ta.compute((PR, PN), body, "Y")


def _torch_pool(xt, h, square=False):
    total = torch.zeros((), dtype=torch.float64)
    for i in range(PR):
        for j in range(PN):
            cols = [j + k - P for k in range(K)]
            vals = [(xt[i, c] ** 2 if square else xt[i, c]) * 2.0 + 1.0 if 0 <= c < PN
                    else torch.tensor(-5.0, dtype=torch.float64) for c in cols]
            total = total + h[i, j] * torch.max(torch.stack(vals))
    return total


def test_padded_pool_routes_its_ties_over_the_points_in_bounds():
    """The padding's guard of the read (its derivative is 0 outside) bounds the tie routing too, as the
    ``where`` does (they visited all ``K`` points of every window).  Work by hand: the compared values
    (saved) and the winner with its tie count ``2 R N K``, the destination and the winner's scatter
    ``2 R N``, the tie routing over the ``R (N K - P (P + 1) / 2 - (K - 1 - P) (K - P) / 2)`` points in
    bounds."""
    X, H, Y = _padded_pool()
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    low = ta.lower([dX], [X, H], target=AVX512)
    inside = PR * (PN * K - P * (P + 1) // 2 - (K - 1 - P) * (K - P) // 2)
    assert low.work == 2 * PR * PN * K + 2 * PR * PN + inside, str(low)


def test_padded_pool_gradient_with_ties_nan_and_inf_equals_pytorch():
    X, H, Y = _padded_pool()
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    build = ta.build([dX], [X, H])
    rng = np.random.default_rng(11)
    for case in ["ties", "distinct", "nan", "inf"]:
        x = rng.integers(-3, 2, (PR, PN)).astype(np.float64)  # ties, and ties with the padding's -5
        if case == "distinct":
            x = rng.permutation(np.arange(PR * PN)).reshape(PR, PN) / 4.0
        elif case == "nan":
            x[0, 0] = x[1, 5] = x[3, 11] = np.nan
        elif case == "inf":
            x[0, 1], x[1, 4], x[2, 0], x[3, 11] = np.inf, -np.inf, -np.inf, np.inf
        h = rng.standard_normal((PR, PN))
        xt = torch.tensor(x, requires_grad=True)
        _torch_pool(xt, torch.tensor(h)).backward()
        want = xt.grad.numpy()
        np.testing.assert_allclose(build(x, h), want, rtol=1e-12, atol=1e-12, err_msg=case)
        np.testing.assert_allclose(ta.evaluate(dX, {X: x, H: h}), want, rtol=1e-12, atol=1e-12, err_msg=case)


def test_padded_pool_hessian_vector_product_with_ties_equals_pytorch():
    X, H, Y = _padded_pool(square=True)
    V = ta.placeholder((PR, PN), "float64", "V")
    r, q = ta.reduce_axis((0, PR), "r"), ta.reduce_axis((0, PN), "q")
    L = ta.compute((), lambda: ta.sum(Y[r, q] * Y[r, q] * H[r, q], [r, q]), name="L")
    (hv,) = ta.hessian_vector_product(L, [X], [V])
    rng = np.random.default_rng(4)
    x, v = rng.integers(-2, 3, (PR, PN)).astype(np.float64), rng.standard_normal((PR, PN))
    h = rng.random((PR, PN))
    xt = torch.tensor(x, requires_grad=True)
    total = torch.zeros((), dtype=torch.float64)
    for i in range(PR):
        for j in range(PN):
            vals = [xt[i, c] ** 2 * 2.0 + 1.0 if 0 <= c < PN else torch.tensor(-5.0, dtype=torch.float64)
                    for c in (j + k - P for k in range(K))]
            total = total + float(h[i, j]) * torch.max(torch.stack(vals)) ** 2
    (g,) = torch.autograd.grad(total, xt, create_graph=True)
    (want,) = torch.autograd.grad((g * torch.tensor(v)).sum(), xt)
    np.testing.assert_allclose(ta.build([hv], [X, V, H])(x, v, h), want.numpy(), rtol=1e-12, atol=1e-12)
