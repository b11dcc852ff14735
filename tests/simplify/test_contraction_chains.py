"""Sums of one product over several variables run as the cheapest sequence of smaller sums
(simplify/sums/chains.py): chains of three and four matrices, batched and not, a bilinear form,
a chain with a broadcast and an elementwise factor, a sum with a term that is not a product.

Work is counted on a pinned target against pairwise hand counts (each gradient written as
matrix products an expert chooses); values are checked against NumPy ``einsum`` formulas
written here and float64 central differences; random ``einsum``-shaped sums check values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import examples
from tensorad.simplify import Optimizer

import tensorad as ta
from tensorad.ir.rewrite import tensor_graph
from tensorad.ir.tensor import ComputeOp, Role

TARGET = "llvm -mcpu=skylake-avx512"
F64 = "float64"


def _p(shape, name):
    return ta.placeholder(tuple(shape), F64, name=name)


def _r(n, name):
    return ta.reduce_axis((0, n), name)


def _work(outputs, inputs) -> int:
    return ta.lower(list(outputs), list(inputs), target=TARGET).work


def _gradients(Y, inputs):
    H = _p(Y.shape, "H")
    return H, list(ta.JacobianRecursive(Y, inputs, H))


def _chain3(bn, p, q, r, s):
    """``Y[b, i, o] = sum_{j, k} A[b, i, j] B[b, j, k] C[b, k, o]`` (no batch axis when ``bn`` is 0)."""
    lead = (bn,) if bn else ()
    A, B, C = _p(lead + (p, q), "A"), _p(lead + (q, r), "B"), _p(lead + (r, s), "C")
    j, k = _r(q, "j"), _r(r, "k")
    if bn:
        Y = ta.compute((bn, p, s), lambda b, i, o: ta.sum(A[b, i, j] * B[b, j, k] * C[b, k, o], [j, k]),
                       name="Y")
    else:
        Y = ta.compute((p, s), lambda i, o: ta.sum(A[i, j] * B[j, k] * C[k, o], [j, k]), name="Y")
    return [A, B, C], Y


def _chain3_values(a, b, c, h, batched):
    e = "b" if batched else ""
    return (np.einsum(f"{e}ij,{e}jk,{e}kl->{e}il", a, b, c),
            [np.einsum(f"{e}il,{e}jk,{e}kl->{e}ij", h, b, c),
             np.einsum(f"{e}il,{e}ij,{e}kl->{e}jk", h, a, c),
             np.einsum(f"{e}il,{e}ij,{e}jk->{e}kl", h, a, b)])


@pytest.mark.parametrize("bn", [0, 8])
def test_three_chain_gradients_cost_pairwise_products(bn):
    n = 24
    inputs, Y = _chain3(bn, n, n, n, n)
    H, grads = _gradients(Y, inputs)
    batch = max(bn, 1)
    work = _work(grads, inputs + [H])
    hand = 6 * batch * n ** 3  # B C, H (B C)^T, A B, (A B)^T H, A^T H, (A^T H) C^T
    assert work <= 1.25 * hand, f"gradient work {work} > 1.25 x {hand}"
    forward = _work([ta.OptimizeAndLiftNonzeronessConditions(Y)], inputs)
    assert forward <= 1.25 * 2 * batch * n ** 3


@pytest.mark.parametrize("bn", [0, 2])
def test_three_chain_values(bn):
    inputs, Y = _chain3(bn, 3, 4, 5, 2)
    H, grads = _gradients(Y, inputs)
    rng = np.random.default_rng(1)
    a, b, c, h = (rng.standard_normal(t.shape) for t in inputs + [H])
    want, want_grads = _chain3_values(a, b, c, h, bool(bn))
    forward = ta.OptimizeAndLiftNonzeronessConditions(Y)
    np.testing.assert_allclose(ta.build([forward], inputs)(a, b, c), want, rtol=1e-12, atol=1e-12)
    for got, expected in zip(ta.build(grads, inputs + [H])(a, b, c, h), want_grads):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_order_follows_the_sizes():
    """``(A B) C`` with ``A`` of two rows costs ``2 q r + 2 r s``; ``A (B C)`` costs ``q r s + 2 q s``."""
    p, q, r, s = 2, 30, 30, 30
    inputs, Y = _chain3(0, p, q, r, s)
    forward = ta.OptimizeAndLiftNonzeronessConditions(Y)
    assert _work([forward], inputs) == p * q * r + p * r * s
    made = [t.op for t in tensor_graph([forward]) if isinstance(t.op, ComputeOp) and t.op is not forward.op]
    assert [op.provenance.role for op in made] == [Role.SPLIT]


def _chain4(n):
    A, B, C, D = (_p((n, n), s) for s in "ABCD")
    j, k, o = _r(n, "j"), _r(n, "k"), _r(n, "o")
    Y = ta.compute((n, n), lambda i, m: ta.sum(A[i, j] * B[j, k] * C[k, o] * D[o, m], [j, k, o]), name="Y")
    return [A, B, C, D], Y


def test_four_chain_work():
    n = 16
    inputs, Y = _chain4(n)
    H, grads = _gradients(Y, inputs)
    # forward A B, (A B) C; backward (ABC)^T H, H D^T, (AB)^T G3, G3 C^T, A^T G2, G2 B^T
    assert _work(grads, inputs + [H]) <= 1.25 * 8 * n ** 3
    assert _work([ta.OptimizeAndLiftNonzeronessConditions(Y)], inputs) <= 1.25 * 3 * n ** 3


def test_four_chain_values():
    inputs, Y = _chain4(3)
    H, grads = _gradients(Y, inputs)
    rng = np.random.default_rng(2)
    a, b, c, d, h = (rng.standard_normal(t.shape) for t in inputs + [H])
    want = [np.einsum("im,jk,kl,lm->ij", h, b, c, d), np.einsum("im,ij,kl,lm->jk", h, a, c, d),
            np.einsum("im,ij,jk,lm->kl", h, a, b, d), np.einsum("im,ij,jk,kl->lm", h, a, b, c)]
    forward = ta.OptimizeAndLiftNonzeronessConditions(Y)
    np.testing.assert_allclose(ta.build([forward], inputs)(a, b, c, d),
                               np.einsum("ij,jk,kl,lm->im", a, b, c, d), rtol=1e-12, atol=1e-12)
    for got, expected in zip(ta.build(grads, inputs + [H])(a, b, c, d, h), want):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bn", [0, 3])
def test_bilinear_form(bn):
    """``s = sum_{i, j} x_i W_ij y_j``: as written it is already the cheapest; three passes of
    ``|x| |y|`` for the gradients."""
    p, q = 5, 7
    lead = (bn,) if bn else ()
    x, W, y = _p(lead + (p,), "x"), _p((p, q), "W"), _p(lead + (q,), "y")
    i, j = _r(p, "i"), _r(q, "j")
    if bn:
        s = ta.compute((bn,), lambda b: ta.sum(x[b, i] * W[i, j] * y[b, j], [i, j]), name="s")
    else:
        s = ta.compute((1,), lambda _: ta.sum(x[i] * W[i, j] * y[j], [i, j]), name="s")
    inputs = [x, W, y]
    H, grads = _gradients(s, inputs)
    batch = max(bn, 1)
    assert _work(grads, inputs + [H]) <= 1.25 * 3 * batch * p * q
    rng = np.random.default_rng(3)
    xv, wv, yv, h = (rng.standard_normal(t.shape) for t in inputs + [H])
    e = "b" if bn else ""
    hv = h if bn else h[0]
    want = [np.einsum(f"{e},ij,{e}j->{e}i", hv, wv, yv), np.einsum(f"{e},{e}i,{e}j->ij", hv, xv, yv),
            np.einsum(f"{e},{e}i,ij->{e}j", hv, xv, wv)]
    for got, expected in zip(ta.build(grads, inputs + [H])(xv, wv, yv, h), want):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def _broadcast_chain(n):
    """``Y[i, o] = sum_{j, k} (A[i, j] E[i, j]) B[j, k] s[k] C[k, o]``: an elementwise product and a
    broadcast vector among the factors."""
    A, E, B, s, C = _p((n, n), "A"), _p((n, n), "E"), _p((n, n), "B"), _p((n,), "s"), _p((n, n), "C")
    j, k = _r(n, "j"), _r(n, "k")
    Y = ta.compute((n, n), lambda i, o: ta.sum(A[i, j] * E[i, j] * B[j, k] * s[k] * C[k, o], [j, k]),
                   name="Y")
    return [A, E, B, s, C], Y


def _broadcast_forward(a, e, b, s, c):
    return np.einsum("ij,ij,jk,k,kl->il", a, e, b, s, c)


def test_broadcast_chain_work():
    n = 16
    inputs, Y = _broadcast_chain(n)
    H, grads = _gradients(Y, inputs)
    assert _work([ta.OptimizeAndLiftNonzeronessConditions(Y)], inputs) <= 1.25 * 2 * n ** 3
    # A, E, C: two products each; B: (A E)^T H, then times (s C)^T; s: (A E) B, then a row sum
    assert _work(grads, inputs + [H]) <= 1.25 * 10 * n ** 3


def test_broadcast_chain_values(numeric_grad):
    inputs, Y = _broadcast_chain(3)
    H, grads = _gradients(Y, inputs)
    rng = np.random.default_rng(4)
    values = [rng.standard_normal(t.shape) for t in inputs]
    h = rng.standard_normal(H.shape)
    forward = ta.OptimizeAndLiftNonzeronessConditions(Y)
    np.testing.assert_allclose(ta.build([forward], inputs)(*values), _broadcast_forward(*values),
                               rtol=1e-12, atol=1e-12)
    got = ta.build(grads, inputs + [H])(*values, h)
    for g, fd in zip(got, numeric_grad(_broadcast_forward, values, head=h)):
        np.testing.assert_allclose(g, fd, rtol=1e-7, atol=1e-8)


def test_sum_with_a_term_that_is_not_a_product(numeric_grad):
    """``sum_{j, k} (A[i, j] B[j, k] C[k, o] + E[j, k])``: values stay right."""
    p, q, r, s = 3, 4, 2, 3
    A, B, C, E = _p((p, q), "A"), _p((q, r), "B"), _p((r, s), "C"), _p((q, r), "E")
    j, k = _r(q, "j"), _r(r, "k")
    Y = ta.compute((p, s), lambda i, o: ta.sum(A[i, j] * B[j, k] * C[k, o] + E[j, k], [j, k]), name="Y")
    inputs = [A, B, C, E]
    H, grads = _gradients(Y, inputs)
    rng = np.random.default_rng(5)
    values = [rng.standard_normal(t.shape) for t in inputs]
    h = rng.standard_normal(H.shape)

    def forward(a, b, c, e):
        return np.einsum("ij,jk,kl->il", a, b, c) + e.sum()

    np.testing.assert_allclose(ta.build([ta.OptimizeAndLiftNonzeronessConditions(Y)], inputs)(*values),
                               forward(*values), rtol=1e-12, atol=1e-12)
    got = ta.build(grads, inputs + [H])(*values, h)
    for g, fd in zip(got, numeric_grad(forward, values, head=h)):
        np.testing.assert_allclose(g, fd, rtol=1e-7, atol=1e-8)


SIZES = {"a": 2, "b": 3, "j": 2, "k": 3, "o": 4}
letters = st.lists(st.sampled_from(sorted(SIZES)), min_size=1, max_size=3, unique=True).map("".join)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(out=st.sampled_from(["", "a", "ab", "ba"]), factors=st.lists(letters, min_size=2, max_size=4),
       seed=st.integers(0, 2 ** 16))
def test_random_contractions_keep_values(out, factors, seed):
    """Random ``einsum``-shaped sums (each factor its own tensor over distinct letters): the optimized
    forward and every gradient equal NumPy's ``einsum``."""
    summed = sorted(set("".join(factors)) - set(out))
    assume(len(summed) >= 2)
    shape = tuple(SIZES[c] for c in out) or (1,)
    inputs = [_p(tuple(SIZES[c] for c in f), f"F{n}") for n, f in enumerate(factors)]
    rvars = {c: _r(SIZES[c], c) for c in summed}

    def body(*ax):
        env = dict(zip(out, ax)) | rvars
        term = None
        for t, f in zip(inputs, factors):
            read = t[tuple(env[c] for c in f)]
            term = read if term is None else term * read
        return ta.sum(term, [rvars[c] for c in summed])

    Y = ta.compute(shape, body, name="Y")
    H, grads = _gradients(Y, inputs)
    optimizer = Optimizer()  # as a gradient's call runs it: brackets unshared are folded back
    (forward,) = optimizer.finish([optimizer(Y)])
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(t.shape) for t in inputs]
    h = rng.standard_normal(H.shape)
    feed = dict(zip(inputs + [H], values + [h]))
    spec = ",".join(factors)
    want = np.einsum(f"{spec},{out}->{out}", *values, np.ones(shape[:len(out)])).reshape(shape)
    np.testing.assert_allclose(ta.evaluate(forward, feed), want, rtol=1e-10, atol=1e-10)
    head = h if out else h[0]
    for n, (g, f) in enumerate(zip(ta.evaluate(grads, feed), factors)):
        others = [v for m, v in enumerate(values) if m != n]
        rest = [x for m, x in enumerate(factors) if m != n]
        ones = np.ones(g.shape)  # (a letter only this factor reads: the gradient is constant along it)
        expected = np.einsum(",".join([out, f] + rest) + f"->{f}", head, ones, *others)
        np.testing.assert_allclose(g, expected, rtol=1e-10, atol=1e-10)


def test_axis_no_factor_reads():
    """``Y[a, i] = sum_{j, k} A[i, j] B[j, k] c[k]``: lowering sums once for every ``a``, so the plan
    is ``T = B c`` then ``A T``, ``|j k| + |i j|``."""
    na, n = 10, 8
    A, B, c = _p((n, n), "A"), _p((n, n), "B"), _p((n,), "c")
    j, k = _r(n, "j"), _r(n, "k")
    Y = ta.compute((na, n), lambda a, i: ta.sum(A[i, j] * B[j, k] * c[k], [j, k]), name="Y")
    optimizer = Optimizer()
    (forward,) = optimizer.finish([optimizer(Y)])
    assert _work([forward], [A, B, c]) == 2 * n * n
    rng = np.random.default_rng(6)
    a, b, cv = rng.standard_normal((n, n)), rng.standard_normal((n, n)), rng.standard_normal(n)
    want = np.broadcast_to(a @ (b @ cv), (na, n))
    np.testing.assert_allclose(ta.build([forward], [A, B, c])(a, b, cv), want, rtol=1e-12, atol=1e-12)
