"""The gradient of a running product ``Y[j] = prod_{k <= j} X[k]`` (or ``k >= j``): the adjoint
of the term ``k`` is ``E[k] S[k]``, an exclusive running product times the reversed linear
recurrence ``S[k] = H[k] + X[k + 1] S[k + 1]``, both scans (``AdjointBuilder._line_terms``).
No division and no zero count: three passes, under the hand-written form's four (the forward,
the exclusive product, the recurrence, the product of the two).

Oracles: PyTorch's ``cumprod`` backward in float64 (zeros in ``X``), a NumPy formula summing
``H[j] prod_{i <= j, i != k} X[i]`` term by term (infinities in ``X``, where PyTorch divides
``inf / inf``), and float64 central differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

AVX512 = "llvm -mcpu=skylake-avx512"
HASWELL = "llvm -mcpu=haswell"
F64 = "float64"


def _running(shape: tuple[int, ...], axis: int, where=lambda k, j: k <= j, source=lambda x: x,
             dtype: str = "float32"):
    """``Y = prod_k source(X[.., k, ..]) where where(k, j)`` along ``axis``, and its gradient."""
    X = ta.placeholder(shape, dtype, "X")
    k = ta.reduce_axis((0, shape[axis]), "k")

    def body(*idx):
        at = list(idx)
        at[axis] = k
        return ta.prod(source(X[tuple(at)]), k, where=where(k, idx[axis]))

    Y = ta.compute(shape, body, name="Y")
    H = ta.placeholder(shape, dtype, "H")
    return X, H, list(ta.JacobianRecursive(Y, [X], H))


def _others(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``dX[i, k] = sum_{j >= k} H[i, j] prod_{t <= j, t != k} X[i, t]``, a product with a zero
    factor 0 (the zero count's convention), each term on its own."""
    out = np.zeros_like(x)
    for i, k in np.ndindex(x.shape):
        for j in range(k, x.shape[1]):
            rest = np.delete(x[i, :j + 1], k)
            out[i, k] += h[i, j] * (0.0 if (rest == 0).any() else np.prod(rest))
    return out


@pytest.mark.parametrize("target", [AVX512, HASWELL])
@pytest.mark.parametrize("n", [32, 64])
def test_a_long_running_product_gradient_is_three_scans(target, n):
    r = 4
    X, H, grads = _running((r, n), 1)
    work = ta.lower(grads, [X, H], target=target).work
    # the exclusive product (its first point empty), the recurrence, the product of the two
    assert work == 3 * r * n - r, work


def test_the_gradient_equals_pytorch_with_zeros():
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    r, n = 5, 33
    X, H, grads = _running((r, n), 1, dtype=F64)
    rng = np.random.default_rng(2)
    x, h = np.round(rng.uniform(-2, 2, (r, n)) * 2) / 2, rng.normal(size=(r, n))
    x[:, 7] = 0.0
    x[1, 20] = x[2, 0] = x[3, n - 1] = 0.0  # a second zero, a first, a last
    tx = torch.tensor(x, requires_grad=True)
    torch.cumprod(tx, 1).backward(torch.tensor(h))
    np.testing.assert_allclose(ta.build(grads, [X, H])(x, h), tx.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_an_infinite_factor_leaves_the_product_of_the_others_finite():
    """``X[1] = inf``: the adjoint of ``X[1]`` is a sum of products of the other factors
    (finite), which a division ``Y[j] / X[1]`` makes ``inf / inf``; with a zero before them
    the terms are 0, not ``0 * inf``.  Where the formula's terms are infinite the recurrence
    factors ``X[1]`` out of their sum: not finite either (the formula adds ``inf - inf``)."""
    r, n = 2, 9
    X, H, grads = _running((r, n), 1, dtype=F64)
    rng = np.random.default_rng(4)
    x, h = rng.uniform(0.5, 1.5, (r, n)), rng.normal(size=(r, n))
    x[:, 1] = np.inf
    x[1, 5] = 0.0
    got = ta.build(grads, [X, H])(x, h)
    with np.errstate(invalid="ignore"):
        want = _others(x, h)
    finite = np.isfinite(want)
    assert finite[:, 1].all() and finite[1, 6:].all()
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12, atol=1e-12)
    assert not np.isfinite(got[~finite]).any()


@pytest.mark.parametrize("shape, axis", [((3, 17), 1), ((17, 3), 0), ((2, 17, 3), 1)])
def test_a_running_suffix_product_gradient_is_linear_and_exact(shape, axis, numeric_grad):
    X, H, grads = _running(shape, axis, where=lambda k, j: k >= j, dtype=F64)
    size = int(np.prod(shape))
    assert ta.lower(grads, [X, H], target=AVX512).work <= 3 * size

    rng = np.random.default_rng(6)
    x, h = rng.uniform(0.5, 1.5, shape), rng.normal(size=shape)
    flip = lambda a: np.flip(a, axis)  # noqa: E731
    want = numeric_grad(lambda a: flip(np.cumprod(flip(a), axis)), [x], h)[0]
    np.testing.assert_allclose(ta.build(grads, [X, H])(x, h), want, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("case", ["square", "masked", "two reads"])
def test_a_running_product_of_an_expression_equals_differences(case, numeric_grad):
    """The source ``g(X[i, k])`` differentiated at each read; a where-condition that does not
    mention ``j`` (``k != 3``) makes its terms 1."""
    r, n = 3, 12
    source = {"square": lambda x: x * x, "masked": lambda x: x, "two reads": lambda x: x * ta.exp(x)}[case]
    where = (lambda k, j: (k <= j) & (k != 3)) if case == "masked" else (lambda k, j: k <= j)
    X, H, grads = _running((r, n), 1, where=where, source=source, dtype=F64)
    assert ta.lower(grads, [X, H], target=AVX512).work <= 3 * r * n

    keep = np.arange(n) != 3
    fn = {"square": lambda a: np.cumprod(a * a, 1), "masked": lambda a: np.cumprod(np.where(keep, a, 1.0), 1),
          "two reads": lambda a: np.cumprod(a * np.exp(a), 1)}[case]
    rng = np.random.default_rng(8)
    x, h = rng.uniform(0.5, 1.2, (r, n)), rng.normal(size=(r, n))
    want = numeric_grad(fn, [x], h)[0]
    np.testing.assert_allclose(ta.build(grads, [X, H])(x, h), want, rtol=1e-7, atol=1e-7)


def test_the_gradient_of_the_gradient_is_scans_too(numeric_grad):
    """The first gradient's recurrence differentiates as a recurrence (its adjoint runs the
    other way), not by the generic rule's Jacobian of every output by every input: linear in
    ``n``, by ``X`` and by the head (whose transpose also runs the first gradient's recurrence:
    the strong zero of ``E S`` tests it for infinities).  Oracle: central differences of the NumPy
    formula."""
    r, n = 4, 32
    X, H, (dX,) = _running((r, n), 1)
    W = ta.placeholder((r, n), "float32", "W")
    by_x, by_h = (ta.JacobianRecursive(dX, [t], W)[0] for t in (X, H))
    assert ta.lower([by_x], [X, H, W], target=AVX512).work <= 10 * r * n
    assert ta.lower([by_h], [X, H, W], target=AVX512).work <= 5 * r * n

    r, n = 2, 8
    X, H, (dX,) = _running((r, n), 1, dtype=F64)
    W = ta.placeholder((r, n), F64, "W")
    grads = ta.JacobianRecursive(dX, [X, H], W)
    rng = np.random.default_rng(10)
    x, h, w = rng.uniform(0.5, 1.5, (r, n)), rng.normal(size=(r, n)), rng.normal(size=(r, n))
    want = numeric_grad(_others, [x, h], w)
    for got, expected in zip(ta.build(list(grads), [X, H, W])(x, h, w), want):
        np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-7)
