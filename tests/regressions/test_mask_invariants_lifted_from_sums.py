"""A sum whose masked summand read the output index only through a factor or a conjunct was
reduced again at every output point.

The gradient of an exclusive prefix product ``Y[i] = prod_{k < i} X[k]`` is two sums over ``i > k``:
``sum_i select(Z[i] == 0, H[i] * P[i] / D[k], 0)`` (``Z`` the zero count, ``P`` the product of
the nonzero factors, ``D[k]`` the factor ``X[k]`` or 1 at a zero) and ``sum_i select(Z[i] == 1
&& X[k] == 0, H[i] * P[i], 0)``.  Each summand reads ``k`` only through the divisor or the
conjunct, so every ``k`` summed its own triangle row: ``n (n + 1) / 2`` terms per sum.  The
optimizer now moves a mask's factors and conjuncts that read no reduction variable out of the
sum when what is left is a scan or a smaller tensor (``simplify/sums/masked.py``): each sum
is a reverse scan, the divisor and the conjunct an elementwise step, and a count of the kept
terms keeps the sum's strong zero (``0 / D`` is NaN at ``D = 0`` where no term is kept).

(An inclusive prefix product ``k <= i`` is a recurrence reverse mode builds itself:
``tests/tensorad/autodiff/test_running_product.py``.)

Oracles: float64 central differences (``numeric_grad``) of NumPy's ``cumprod`` and
``cumsum``, and a NumPy formula for the other program.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"
PER_ELEMENT = 8  # passes of the gradient per element: helpers, sums, counts, the epilogue


def _cumulative(kind, shape: tuple[int, ...], axis: int, strict: bool = False):
    """``Y = cum<kind>(X, axis)`` as a reduction ``where k <= i`` (``strict``: ``k < i``, the
    exclusive form) and its gradient."""
    n = shape[axis]
    X = ta.placeholder(shape, "float64", name="X")
    k = ta.reduce_axis((0, n), "k")

    def body(*idx):
        read = list(idx)
        read[axis] = k
        return kind(X[tuple(read)], axis=k, where=k < idx[axis] if strict else k <= idx[axis])

    Y = ta.compute(shape, body, name="Y")
    H = ta.placeholder(shape, "float64", name="H")
    return X, H, ta.JacobianRecursive(Y, [X], H)


def _exclusive_cumprod(a: np.ndarray, axis: int) -> np.ndarray:
    """``prod_{k < i} a[k]`` along ``axis`` (1 at the first point)."""
    c = np.cumprod(a, axis=axis)
    return np.concatenate([np.ones_like(np.take(c, [0], axis)), np.delete(c, -1, axis)], axis)


def _values(grads, X, H, x: np.ndarray, h: np.ndarray) -> np.ndarray:
    return ta.build(grads, [X, H])(x, h)


def _with_zeros(shape: tuple[int, ...], axis: int, zeros: tuple[int, ...], seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).uniform(0.5, 1.5, shape)
    index = [slice(None)] * len(shape)
    for z in zeros:
        index[axis] = z
        x[tuple(index)] = 0.0
    return x


@pytest.mark.parametrize("shape, axis", [((64,), 0), ((8, 64), 1), ((64, 8), 0)])
def test_a_prefix_product_gradient_is_linear(shape, axis):
    X, H, grads = _cumulative(ta.prod, shape, axis, strict=True)
    size = int(np.prod(shape))
    work = ta.lower(grads, [X, H], target=TARGET).work
    assert work <= PER_ELEMENT * size, f"gradient work {work} > {PER_ELEMENT} x {size}"


@pytest.mark.parametrize("shape, axis", [((7,), 0), ((3, 6), 1), ((6, 3), 0)])
@pytest.mark.parametrize("zeros", [(), (2,), (1, 4), (0,)])
def test_a_prefix_product_gradient_matches_differences(shape, axis, zeros, numeric_grad):
    X, H, grads = _cumulative(ta.prod, shape, axis, strict=True)
    x = _with_zeros(shape, axis, zeros, seed=len(zeros) + axis)
    h = np.random.default_rng(3).normal(size=shape)
    want = numeric_grad(lambda a: _exclusive_cumprod(a, axis), [x], h)[0]
    np.testing.assert_allclose(_values(grads, X, H, x, h), want, rtol=1e-7, atol=1e-7)


def test_a_prefix_sum_gradient_stays_linear(numeric_grad):
    shape = (8, 64)
    X, H, grads = _cumulative(ta.sum, shape, 1)
    assert ta.lower(grads, [X, H], target=TARGET).work <= 2 * shape[0] * shape[1]
    x, h = np.random.default_rng(5).normal(size=(2,) + shape)
    want = numeric_grad(lambda a: np.cumsum(a, axis=1), [x], h)[0]
    np.testing.assert_allclose(_values(grads, X, H, x, h), want, rtol=1e-7, atol=1e-7)


def _outer_mask(n: int, m: int):
    """``Y[j] = sum_i select(A[i] > 0 && B[j] > 0, X[i] / W[j], 0)``: the conjunct ``B[j] > 0``
    and the divisor ``W[j]`` read the output index only."""
    A, X = (ta.placeholder((n,), "float64", name=s) for s in "AX")
    B, W = (ta.placeholder((m,), "float64", name=s) for s in "BW")
    i = ta.reduce_axis((0, n), "i")
    Y = ta.compute((m,), lambda j: ta.sum(ta.select((A[i] > 0) & (B[j] > 0), X[i] / W[j], 0.0), axis=i),
                   name="Y")
    return [A, X, B, W], Y


def _outer_mask_want(a, x, b, w) -> np.ndarray:
    out = np.zeros(len(b))
    for j in range(len(b)):
        out[j] = sum(x[i] / w[j] for i in range(len(a)) if a[i] > 0 and b[j] > 0)
    return out


def test_a_divisor_and_a_conjunct_of_the_output_index_leave_the_sum():
    n, m = 40, 30
    inputs, Y = _outer_mask(n, m)
    opt = ta.OptimizeAndLiftNonzeronessConditions(Y)
    assert ta.lower([Y], inputs, target=TARGET).work == n * m
    assert ta.lower([opt], inputs, target=TARGET).work <= 2 * n + m
    rng = np.random.default_rng(7)
    a, x, b = rng.normal(size=n), rng.normal(size=n), rng.normal(size=m)
    w = rng.uniform(0.5, 2.0, m)
    w[:3] = 0.0
    b[:3] = -1.0  # a zero divisor where the conjunct drops every term: 0, not x / 0
    got = ta.build([opt], inputs)(a, x, b, w)
    np.testing.assert_allclose(got, _outer_mask_want(a, x, b, w), rtol=1e-12)


def test_a_divisor_keeps_the_zero_of_a_sum_that_keeps_no_term():
    """No ``A[i]`` is positive: every output is the empty sum's 0, also at ``W[j] = 0`` and
    ``W[j] = inf`` (the lifted divisor applied to that 0 would be NaN)."""
    n, m = 12, 5
    inputs, Y = _outer_mask(n, m)
    opt = ta.OptimizeAndLiftNonzeronessConditions(Y)
    a, x = -np.ones(n), np.arange(n, dtype=np.float64)
    b, w = np.ones(m), np.array([0.0, np.inf, np.nan, 2.0, -0.0])
    got = ta.build([opt], inputs)(a, x, b, w)
    np.testing.assert_array_equal(got, np.zeros(m))
    np.testing.assert_array_equal(ta.evaluate([opt], dict(zip(inputs, (a, x, b, w))))[0], np.zeros(m))


def test_a_lazy_mask_keeps_the_conjunct_guarding_its_reads():
    """``if_then_else(j + 1 < m && A[i] > 0 && B[k] > 0, X[i, j + 1] / W[k], 0)``: the divisor
    and ``B[k] > 0`` leave the sum (it loses the axis ``k``), ``j + 1 < m`` guards the read
    ``X[i, j + 1]`` and stays with it."""
    n, m, p = 20, 6, 9
    A, X = ta.placeholder((n,), "float64", name="A"), ta.placeholder((n, m), "float64", name="X")
    B, W = (ta.placeholder((p,), "float64", name=s) for s in "BW")
    i = ta.reduce_axis((0, n), "i")
    Y = ta.compute((m, p), lambda j, k: ta.sum(ta.if_then_else(
        (j + 1 < m) & (A[i] > 0) & (B[k] > 0), X[i, j + 1] / W[k], 0.0), axis=i), name="Y")
    inputs = [A, X, B, W]
    opt = ta.OptimizeAndLiftNonzeronessConditions(Y)
    assert ta.lower([opt], inputs, target=TARGET).work <= 2 * n * m + m * p
    rng = np.random.default_rng(1)
    a, x, b, w = rng.normal(size=n), rng.normal(size=(n, m)), rng.normal(size=p), rng.uniform(1, 2, p)
    want = np.array([[sum(x[r, j + 1] / w[k] for r in range(n) if j + 1 < m and a[r] > 0 and b[k] > 0)
                      for k in range(p)] for j in range(m)])
    np.testing.assert_allclose(ta.build([opt], inputs)(a, x, b, w), want, rtol=1e-12)
    np.testing.assert_allclose(ta.evaluate([opt], dict(zip(inputs, (a, x, b, w))))[0], want, rtol=1e-12)


def test_a_scatter_keeps_its_scatter():
    """An embedding bag's gradient with one bag sums ``select(ax0 == I[r], H[0, ax1], 0)``: the
    head reads no reduction variable, but the sum is a scatter that visits only the ids (one
    add per id and column); moved out, the head would be multiplied into every row of the
    table.  Oracle: NumPy's ``np.add.at``."""
    V, D, n = 1000, 16, 13
    W = ta.placeholder((V, D), "float32", name="W")
    ids = ta.placeholder((n,), "int64", name="I")
    off = ta.placeholder((1,), "int64", name="offsets")
    Y = ta.topi.nn.embedding_bag(W, ids, "sum", offsets=off)
    H = ta.placeholder(Y.shape, "float32", name="H")
    [g] = ta.JacobianRecursive(Y, [W], H)
    assert ta.lower([g], [ids, off, H], target=TARGET).work <= n * D
    rng = np.random.default_rng(0)
    iv = rng.integers(0, V, n)
    iv[3] = iv[7]  # (an id taken twice)
    hv = rng.standard_normal((1, D)).astype(np.float32)
    want = np.zeros((V, D), np.float32)
    np.add.at(want, iv, np.broadcast_to(hv, (n, D)))
    got = ta.build([g], [ids, off, H])(iv, np.zeros(1, np.int64), hv)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_mask_without_factors_is_counted_once():
    """``Y[k] = sum_{i >= k} select(A[i] > 0 && B[k] > 0, C[k], 0)``: with ``C[k]`` and the
    conjunct ``B[k] > 0`` out, the sum left is the count of the kept terms itself, one reverse
    scan (not a sum and a count of the same terms).  Oracle: a NumPy formula."""
    n = 64
    A, B, C = (ta.placeholder((n,), "float64", name=s) for s in "ABC")
    i = ta.reduce_axis((0, n), "i")
    Y = ta.OptimizeAndLiftNonzeronessConditions(ta.compute(
        (n,), lambda k: ta.sum(ta.select((A[i] > 0) & (B[k] > 0), C[k], 0.0), axis=i, where=i >= k),
        name="Y"))
    assert ta.lower([Y], [A, B, C], target=TARGET).work <= 2 * n
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(n) for _ in range(3))
    c[5] = np.inf  # (kept nowhere after 5 only if no A[i] > 0 there: the count decides)
    kept = np.cumsum((a > 0)[::-1])[::-1]
    with np.errstate(invalid="ignore"):
        want = np.where((b > 0) & (kept > 0), c * kept, 0.0)
    np.testing.assert_array_equal(ta.build([Y], [A, B, C])(a, b, c), want)
