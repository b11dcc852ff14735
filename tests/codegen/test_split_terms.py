"""A sum of products as products (codegen/strategies/term_split.py).

The gradient of a Gram matrix ``G[b, i, j] = sum_k F[b, i, k] F[b, j, k]`` sums two products in
one reduction, ``sum_j H[b, i, j] F[b, j, k] + H[b, j, i] F[b, j, k]``: no product itself.  Under
fast math it is one product of the summed head, ``sum_j (H[b, i, j] + H[b, j, i]) F[b, j, k]``,
where split term by term it is two (the cost model compares both, by work and cycles at a pinned
target); an infinite ``F`` then gives the factored value (docs/conventions.md).
``fastmath=False`` keeps the one loop and IEEE's NaN for ``0 * inf``.
"""

from __future__ import annotations

import re

import numpy as np

import tensorad as ta

Bn, N, K = 2, 64, 96


PINNED = "llvm -mcpu=skylake-avx512"  # where the strategies are compared; values run on the host
SHARED = {"F.grad#0": "shared-factor"}


def _gram_grad(target: str = PINNED, **options):
    Fm = ta.placeholder((Bn, N, K), "float32", "F")
    k = ta.reduce_axis((0, K), "k")
    G = ta.compute((Bn, N, N), lambda b, i, j: ta.sum(Fm[b, i, k] * Fm[b, j, k], axis=k), name="gram")
    return ta.function(G, [Fm], num_threads=1, target=target, **options)


def _want(f, h):
    f64, h64 = f.astype(np.float64), h.astype(np.float64)
    with np.errstate(invalid="ignore"):  # (0 * inf: NaN, as the unfactored sum has it)
        return np.einsum("bij,bjk->bik", h64, f64) + np.einsum("bji,bjk->bik", h64, f64)


def _check_values(fn) -> None:
    rng = np.random.default_rng(3)
    f = rng.standard_normal((Bn, N, K)).astype(np.float32)
    h = rng.standard_normal((Bn, N, N)).astype(np.float32)
    _, res = fn.forward(f)
    (got,) = fn.backward(res, h)
    np.testing.assert_allclose(got, _want(f, h), rtol=1e-4, atol=1e-4)


def test_gram_gradient_is_one_product_of_the_summed_head():
    fn = _gram_grad()
    notes = [ln for ln in fn.lower_backward().text.splitlines() if "# nest" in ln]
    assert len(notes) == 1 and "emitted as a matrix product" in notes[0], notes
    # the multiply-adds, and the summed head computed by the packing once per block of NC columns
    nc = int(re.search(r"NC=(\d+)", notes[0]).group(1))
    assert fn.lower_backward().work == Bn * N * N * K + Bn * N * N * -(-K // nc)
    _check_values(_gram_grad("llvm", choices=SHARED))


def test_gram_gradient_split_term_by_term_when_pinned():
    split = {"F.grad#0": "split-terms"}
    notes = [ln for ln in _gram_grad(choices=split).lower_backward().text.splitlines() if "# nest" in ln]
    assert sum("emitted as a matrix product" in n for n in notes) == 2, notes
    _check_values(_gram_grad("llvm", choices=split))


def test_summed_head_meets_an_inf_as_documented():
    """``(0 + H[5, 3]) * inf`` is an infinity where the terms give ``0 * inf + H[5, 3] * inf = NaN``;
    away from the infinite row the values are the terms'."""
    fn = _gram_grad("llvm", choices=SHARED)
    rng = np.random.default_rng(4)
    f = rng.standard_normal((Bn, N, K)).astype(np.float32)
    h = rng.standard_normal((Bn, N, N)).astype(np.float32)
    f[0, 5, 7] = np.inf
    h[0, 3, 5] = 0.0
    _, res = fn.forward(f)
    (got,) = fn.backward(res, h)
    assert np.isinf(got[0, 3, 7]) and np.sign(got[0, 3, 7]) == np.sign(h[0, 5, 3])
    want = _want(f, h)
    finite = np.isfinite(want)
    assert finite[1].all() and not finite[0, :, 7].any()
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


def test_strict_math_keeps_an_inf_times_zero():
    fn = _gram_grad("llvm", fastmath=False)
    rng = np.random.default_rng(4)
    f = rng.standard_normal((Bn, N, K)).astype(np.float32)
    h = rng.standard_normal((Bn, N, N)).astype(np.float32)
    f[0, 5, 7] = np.inf
    h[0, 3, 5] = 0.0  # H[3, 5] F[5, 7] = 0 * inf; H[5, 3] F[5, 7] = inf: NaN, not inf
    _, res = fn.forward(f)
    (got,) = fn.backward(res, h)
    want = _want(f, h)
    assert np.isnan(got[0, 3, 7]) and np.isnan(want[0, 3, 7])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_strict_math_keeps_one_loop():
    Fm = ta.placeholder((Bn, N, K), "float32", "F")
    k = ta.reduce_axis((0, K), "k")
    G = ta.compute((Bn, N, N), lambda b, i, j: ta.sum(Fm[b, i, k] * Fm[b, j, k], axis=k), name="gram")
    fn = ta.function(G, [Fm], num_threads=1, fastmath=False)
    notes = [ln for ln in fn.lower_backward().text.splitlines() if "# nest" in ln]
    assert len(notes) == 1 and "matrix product" not in notes[0], notes
