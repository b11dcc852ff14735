"""The gradient of a ``prod`` whose ``where`` reads an output axis or data is the product of the other
factors, built from an exclusive prefix and an exclusive suffix product (two scans, no division).

It was ``P / g`` from a zero count and the nonzero factors' product ``P``, which was wrong in three ways:

* second derivatives at a zero factor, where the product's ``where`` reads an output axis or data (a
  prefix ``k < j``, a running product, a mask ``X[i, k] < c``): the integer count's 0 branches carried
  no tangent, so Hessian-vector products, vjp-of-vjp and jvp-of-vjp lost the zero factors' terms;
* a NaN at an infinite or NaN factor whose other factors have a finite product (``inf / inf``);
* ``inf`` where ``P`` overflows but the product of the others is finite (``inf / g``).

A plain box product (a ``where`` reading only its reduction axes) keeps ``P / g`` from a float zero count
whose tangent carries the zero factors' (right at second order, one fused pass over the box): at inf,
NaN and overflow it gives what PyTorch's first-order ``prod`` backward gives, so the last two tests read
where-linked products (an all-ones data mask).

Oracles: PyTorch float64 double backward (``prod``, ``cumprod``, ``where`` masks), NumPy formulas of the
product of the others written here, and ``ta.evaluate`` against ``ta.build``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"
ROWS = np.array([[2, 0, 0.5, 3, 1.25, -1], [0, 0, 0.5, 3, -1, 2], [0, 0, 0, 3, 2, 1],
                 [1.5, -2, 0.5, 3, -0.75, 0.5], [-0.0, 4, 0.5, 0, 1, 2], [0, 1, 1, 1, 1, 0]])
KEEP = np.array([[1, 1, 0, 1, 1, 1], [1, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 1], [0, 1, 1, 1, 1, 0],
                 [1, 1, 1, 0, 1, 1], [1, 1, 1, 1, 1, 1]], dtype=np.float64)


def _exclusive_cumprod(t: torch.Tensor) -> torch.Tensor:
    c = torch.cumprod(t, 1)
    return torch.cat([torch.ones_like(c[:, :1]), c[:, :-1]], 1)


# (name, the tensorad body over (X, M, k) and output axes, output shape, the PyTorch function of (x, m))
CASES = {
    "box": (lambda X, M, k, i: ta.prod(X[i, k], axis=k), (6,), lambda x, m: x.prod(1)),
    "exclusive prefix": (lambda X, M, k, i, j: ta.prod(X[i, k], axis=k, where=k < j), (6, 6),
                         lambda x, m: _exclusive_cumprod(x)),
    "running": (lambda X, M, k, i, j: ta.prod(X[i, k], axis=k, where=k <= j), (6, 6),
                lambda x, m: torch.cumprod(x, 1)),
    "suffix": (lambda X, M, k, i, j: ta.prod(X[i, k], axis=k, where=k > j), (6, 6),
               lambda x, m: _exclusive_cumprod(x.flip(1)).flip(1)),
    "data mask": (lambda X, M, k, i: ta.prod(X[i, k], axis=k, where=M[i, k] > 0), (6,),
                  lambda x, m: torch.where(m > 0, x, torch.ones_like(x)).prod(1)),
    "mask on the output": (lambda X, M, k, i, j: ta.prod(X[i, k], axis=k, where=k != j), (6, 6),
                           lambda x, m: torch.stack([torch.cat([x[:, :c], x[:, c + 1:]], 1).prod(1)
                                                     for c in range(6)], 1)),
}


def _program(name: str):
    body, shape, _ = CASES[name]
    X = ta.placeholder((6, 6), "float64", "X")
    M = ta.placeholder((6, 6), "float64", "M")
    k = ta.reduce_axis((0, 6), "k")
    Y = ta.compute(shape, lambda *i: body(X, M, k, *i), name="Y")
    return X, M, Y


def _torch_second_order(name: str, x, m, h, v):
    xt = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad((CASES[name][2](xt, torch.tensor(m)) * torch.tensor(h)).sum(), xt,
                               create_graph=True)
    (hv,) = torch.autograd.grad((g * torch.tensor(v)).sum(), xt)
    return g.detach().numpy(), hv.numpy()


@pytest.mark.parametrize("name", list(CASES))
def test_first_and_second_order_at_zeros_match_pytorch(name):
    """Rows with 0, 1, 2 and 3 zeros and a -0.0: the gradient, the Hessian-vector product (forward over
    reverse) and the vjp of the vjp (reverse over reverse) against PyTorch's double backward."""
    X, M, Y = _program(name)
    H = ta.placeholder(Y.shape, "float64", "H")
    V = ta.placeholder(X.shape, "float64", "V")
    r = [ta.reduce_axis((0, s), f"r{n}") for n, s in enumerate(Y.shape)]
    S = ta.compute((), lambda: ta.sum(Y[tuple(r)] * H[tuple(r)], axis=r), name="S")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    (hv,) = ta.hessian_vector_product(S, [X], [V])
    (vv,) = ta.JacobianRecursive(g, [X], V)
    rng = np.random.default_rng(1)
    h, v = rng.standard_normal(Y.shape), rng.standard_normal(X.shape)
    want_g, want_hv = _torch_second_order(name, ROWS, KEEP, h, v)
    feed = [ROWS, KEEP, h, v]
    got = ta.build([g, hv, vv], [X, M, H, V])(*feed)
    for value, want in zip(got, [want_g, want_hv, want_hv]):
        np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12)
    at = dict(zip([X, M, H, V], feed))
    for t, value in zip([g, hv, vv], got):
        np.testing.assert_allclose(ta.evaluate(t, at), value, rtol=1e-12, atol=1e-12)


def test_forward_over_the_gradient_at_zeros_matches_pytorch():
    """jvp of the vjp of a running product at zeros (the tangent of the gradient along ``V``)."""
    X, M, Y = _program("running")
    H = ta.placeholder(Y.shape, "float64", "H")
    V = ta.placeholder(X.shape, "float64", "V")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    jv = ta.jvp(g, [X], [V])
    rng = np.random.default_rng(2)
    h, v = rng.standard_normal(Y.shape), rng.standard_normal(X.shape)
    _, want = _torch_second_order("running", ROWS, KEEP, h, v)  # (the Hessian is symmetric)
    np.testing.assert_allclose(ta.build([jv], [X, H, V])(ROWS, h, v), want, rtol=1e-12, atol=1e-12)


def _others(x: np.ndarray, axis_size: int) -> np.ndarray:
    """Per row, the product of the other factors in float64, 0 where one of them is 0 (a zero factor's
    strong zero: ``0 * inf`` is 0)."""
    rows = x.reshape(-1, axis_size).astype(np.float64)
    out = np.empty_like(rows)
    for i, c in np.ndindex(rows.shape):
        rest = np.delete(rows[i], c)
        out[i, c] = 0.0 if (rest == 0).any() else np.prod(rest)
    return out.reshape(x.shape)


def _masked_gradient(shape: tuple[int, ...], dtype: str):
    """``Y[i] = prod over the other axes of X[i, ...] where M[i, ...] > 0`` and its gradient."""
    X = ta.placeholder(shape, dtype, "X")
    M = ta.placeholder(shape, dtype, "M")
    ks = [ta.reduce_axis((0, s), f"k{n}") for n, s in enumerate(shape[1:])]
    Y = ta.compute(shape[:1], lambda i: ta.prod(X[(i, *ks)], axis=ks, where=M[(i, *ks)] > 0), name="Y")
    H = ta.placeholder(shape[:1], dtype, "H")
    return X, M, H, ta.JacobianRecursive(Y, [X], H)[0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_an_infinite_or_nan_factor_leaves_the_product_of_the_others(dtype):
    """The factor that is inf or NaN gets the product of the others, finite (``P / g`` was
    ``inf / inf``, NaN); PyTorch's first-order ``prod`` backward divides too (NaN), its double
    backward's exclusive cumulative products give the product of the others, as JAX's ``cumprod``
    rule does.  Over two reduction axes as over one, under a data mask that keeps every factor (a plain
    box divides, as PyTorch's first order does)."""
    x = np.array([[2, np.inf, 0.5, 3], [1, np.nan, 0.5, -3], [1.5, -2, np.inf, 0], [-np.inf, 2, 0, 0],
                  [np.inf, np.inf, 1, 2], [4, -0.0, 0.25, 2]], dtype=dtype)
    for shape in [(6, 4), (6, 2, 2)]:
        X, M, H, g = _masked_gradient(shape, dtype)
        h, m = np.ones(6, dtype), np.ones(shape, dtype)
        with np.errstate(invalid="ignore"):
            want = _others(x, 4).astype(dtype).reshape(shape)
        got = ta.build([g], [X, M, H])(x.reshape(shape), m, h)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(ta.evaluate(g, {X: x.reshape(shape), M: m, H: h}), got)


def test_the_product_of_the_others_where_the_product_overflows():
    """float32 ``[1e30, 1e30, 5, 0.5]`` under an all-ones data mask: the product overflows; the first two
    factors' others multiply to 2.5e30 (PyTorch's ``P / g``, as a plain box's, gives inf for all four),
    the last two's overflow (inf)."""
    X, M, H, g = _masked_gradient((1, 4), "float32")
    x = np.array([[1e30, 1e30, 5, 0.5]], np.float32)
    got = ta.build([g], [X, M, H])(x, np.ones((1, 4), np.float32), np.ones(1, np.float32))
    np.testing.assert_array_equal(got, np.array([[2.5e30, 2.5e30, np.inf, np.inf]], np.float32))


def _prefix_second_order_work(n: int, strict: bool) -> list[int]:
    """The work of the second gradients (by ``X``, by the head) of ``prod_{k < j} X[i, k]`` (``k <= j``)."""
    X = ta.placeholder((4, n), "float32", "X")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((4, n), lambda i, j: ta.prod(X[i, k], axis=k, where=k < j if strict else k <= j), name="Y")
    H, W = (ta.placeholder((4, n), "float32", name) for name in "HW")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    return [ta.lower([ta.JacobianRecursive(g, [t], W)[0]], [X, H, W], target=TARGET).work for t in (X, H)]


@pytest.mark.parametrize("strict", [True, False])
def test_second_order_of_a_prefix_product_is_linear(strict):
    """The gradient of the gradient of ``prod_{k < j}`` (``k <= j``) by ``X`` and by the head: scans,
    linear in ``n`` (the exclusive prefix's adjoint is a suffix recurrence)."""
    works = [_prefix_second_order_work(n, strict) for n in (64, 128, 256)]
    for (a, b), (c, d) in zip(works, works[1:]):
        assert c <= 2 * a + 8 and d <= 2 * b + 8, works
    assert works[-1][0] <= 8 * 4 * 256 and works[-1][1] <= 5 * 4 * 256, works
