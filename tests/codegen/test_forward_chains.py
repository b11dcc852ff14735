"""A forward sum of one product over several variables, lowered without the optimizer, runs as the
cheapest sequence of smaller sums (codegen/passes/chains.py): chains of three and four matrices, a
chain with an elementwise factor, ``ta.function``'s forward and backward, an intermediate shared by
two sums, and sums whose written order is already the cheapest.

Work is counted on a pinned target against pairwise hand counts; values are checked against NumPy
``einsum`` formulas written here."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"
F64 = "float64"


def _p(shape, name, dtype=F64):
    return ta.placeholder(tuple(shape), dtype, name=name)


def _r(n, name):
    return ta.reduce_axis((0, n), name)


def _chain3(bn, p, q, r, s, dtype=F64):
    """``Y[b, i, l] = sum_{j, k} A[b, i, j] B[b, j, k] C[b, k, o]``."""
    A, B, C = _p((bn, p, q), "A", dtype), _p((bn, q, r), "B", dtype), _p((bn, r, s), "C", dtype)
    j, k = _r(q, "j"), _r(r, "k")
    Y = ta.compute((bn, p, s), lambda b, i, o: ta.sum(A[b, i, j] * B[b, j, k] * C[b, k, o], [j, k]),
                   name="Y")
    return [A, B, C], Y


def _chain4(p, q, r, s, t):
    """``Y[i, m] = sum_{j, k, l} A[i, j] B[j, k] C[k, o] D[l, m]``."""
    A, B, C, D = _p((p, q), "A"), _p((q, r), "B"), _p((r, s), "C"), _p((s, t), "D")
    j, k, l_ = _r(q, "j"), _r(r, "k"), _r(s, "l")
    Y = ta.compute((p, t), lambda i, m: ta.sum(A[i, j] * B[j, k] * C[k, l_] * D[l_, m], [j, k, l_]),
                   name="Y")
    return [A, B, C, D], Y


def _scaled_chain(p, q, r, s):
    """``Y[i, l] = sum_{j, k} A[i, j] exp(B[j, k]) v[k] C[k, o]``: an elementwise factor and a vector."""
    A, B, v, C = _p((p, q), "A"), _p((q, r), "B"), _p((r,), "v"), _p((r, s), "C")
    j, k = _r(q, "j"), _r(r, "k")
    Y = ta.compute((p, s), lambda i, o: ta.sum(A[i, j] * ta.exp(B[j, k]) * v[k] * C[k, o], [j, k]),
                   name="Y")
    return [A, B, v, C], Y


def _values(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s) for s in shapes]


def _work(outputs, inputs) -> int:
    return ta.lower(list(outputs), list(inputs), target=TARGET).work


def test_three_chain_forward_costs_two_products():
    bn, n = 8, 48
    inputs, Y = _chain3(bn, n, n, n, n, "float32")
    assert _work([Y], inputs) == 2 * bn * n ** 3  # (A B), then (A B) C; as written: bn n^4


def test_four_chain_forward_costs_three_products():
    n = 32
    inputs, Y = _chain4(n, n, n, n, n)
    assert _work([Y], inputs) == 3 * n ** 3


def test_four_chain_takes_the_cheap_order_of_its_shapes():
    """A narrow middle: ``(A B)`` and ``(C D)`` first, then their product over the narrow axis."""
    inputs, Y = _chain4(40, 40, 2, 40, 40)
    assert _work([Y], inputs) == 3 * 40 * 40 * 2


def test_chain_with_an_elementwise_factor_costs_two_products():
    n = 40
    inputs, Y = _scaled_chain(n, n, n, n)
    assert _work([Y], inputs) == 2 * n ** 3


@pytest.mark.parametrize("make, formula", [
    (lambda: _chain3(2, 3, 4, 5, 2), lambda a, b, c: np.einsum("bij,bjk,bkl->bil", a, b, c)),
    (lambda: _chain4(3, 4, 5, 6, 2), lambda a, b, c, d: np.einsum("ij,jk,kl,lm->im", a, b, c, d)),
    (lambda: _scaled_chain(3, 4, 5, 2), lambda a, b, v, c: np.einsum("ij,jk,k,kl->il", a, np.exp(b), v, c)),
])
def test_chain_values_match_einsum(make, formula):
    inputs, Y = make()
    xs = _values([x.shape for x in inputs])
    got = ta.build([Y], inputs)(*xs)
    np.testing.assert_allclose(got, formula(*xs), rtol=1e-10, atol=1e-12)


def test_function_forward_and_backward_of_a_three_chain():
    inputs, Y = _chain3(2, 3, 4, 5, 2)
    a, b, c, h = _values([x.shape for x in inputs] + [Y.shape], seed=1)
    f = ta.function(Y, inputs)
    y, res = f.forward(a, b, c)
    np.testing.assert_allclose(y, np.einsum("bij,bjk,bkl->bil", a, b, c), rtol=1e-10)
    ga, gb, gc = f.backward(res, h)
    np.testing.assert_allclose(ga, np.einsum("bil,bjk,bkl->bij", h, b, c), rtol=1e-10)
    np.testing.assert_allclose(gb, np.einsum("bil,bij,bkl->bjk", h, a, c), rtol=1e-10)
    np.testing.assert_allclose(gc, np.einsum("bil,bij,bjk->bkl", h, a, b), rtol=1e-10)


def test_function_forward_of_a_three_chain_costs_products():
    """The forward with residuals: ``Y`` in two products, and the backward's ``B C`` saved (one more);
    as written, ``Y`` alone costs ``bn n^4``."""
    bn, n = 4, 32
    inputs, Y = _chain3(bn, n, n, n, n)
    f = ta.function(Y, inputs, target=TARGET)
    assert f.lower_forward().work == 3 * bn * n ** 3


def test_two_sums_share_their_first_product():
    """``Y = A B C`` and ``Z = A B D`` compute ``A B`` once."""
    n = 24
    A, B, C, D = (_p((n, n), s) for s in "ABCD")
    j, k = _r(n, "j"), _r(n, "k")
    j2, k2 = _r(n, "j2"), _r(n, "k2")
    Y = ta.compute((n, n), lambda i, o: ta.sum(A[i, j] * B[j, k] * C[k, o], [j, k]), name="Y")
    Z = ta.compute((n, n), lambda i, o: ta.sum(A[i, j2] * B[j2, k2] * D[k2, o], [j2, k2]), name="Z")
    lowered = ta.lower([Y, Z], [A, B, C, D], target=TARGET)
    assert lowered.work == 3 * n ** 3 and len(lowered.temporaries) == 1
    a, b, c, d = _values([(n, n)] * 4, seed=2)
    y, z = ta.build([Y, Z], [A, B, C, D])(a, b, c, d)
    np.testing.assert_allclose(y, a @ b @ c, rtol=1e-10)
    np.testing.assert_allclose(z, a @ b @ d, rtol=1e-10)


def _pair_over_two(n):
    """``Y[i, l] = sum_{j, k} A[i, j, k] B[j, k, o]``: two operands reading every summed variable."""
    A, B = _p((n, n, n), "A"), _p((n, n, n), "B")
    j, k = _r(n, "j"), _r(n, "k")
    return [A, B], ta.compute((n, n), lambda i, o: ta.sum(A[i, j, k] * B[j, k, o], [j, k]), name="Y")


def _bilinear(n):
    """``y = sum_{i, j} x[i] W[i, j] z[j]``: as written, ``n^2``, no product of two costs less."""
    x, W, z = _p((n,), "x"), _p((n, n), "W"), _p((n,), "z")
    i, j = _r(n, "i"), _r(n, "j")
    return [x, W, z], ta.compute((1,), lambda o: ta.sum(x[i] * W[i, j] * z[j], [i, j]), name="Y")


@pytest.mark.parametrize("make, written", [(_pair_over_two, 16 ** 4), (_bilinear, 16 ** 2)])
def test_a_sum_already_cheapest_as_written_is_unchanged(make, written):
    inputs, Y = make(16)
    lowered = ta.lower([Y], inputs, target=TARGET)
    assert lowered.temporaries == [] and lowered.work == written
