"""Nested brackets (simplify/sums/factor.py ``nest``, ``nested_share``, ``fold_nested``) and their
canonical spelling (simplify/algebra/bracket.py) checked at random points.

Random programs sum over two variables ``(k1, k2)`` sources whose factors use both
(``A[i, k1, k2]``, the centred ``A - M[i, k1]``), only the outer one (``v[i, k1]``), only the
inner one (``w[k2]``) or neither (``u[i]``, constants), optionally under a triangular
``where``.  The sums are written over the shapes that meet in group norm's gradient: a full
sum ``Y[i]``, per-(i, c) partial sums ``Z[i, c]``, the same partial sums over the digits
``(g, j)`` of ``c = 2g + j``, and a sum whose outer variable is the batch (``S[c] = sum_{i,
k2}``).  One optimizer serves them all (brackets are shared across them, folded back when
unshared), and the results must equal the reference evaluator's values of the originals,
with zeros and negative values among the data."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples
from tensorad.simplify import Optimizer
from tensorad.simplify.algebra.bracket import canonical

import tensorad as ta
from tensorad.ir.expr import var

N, C, K = 3, 4, 3
A = ta.placeholder((N, C, K), name="A")
u = ta.placeholder((N,), name="u")
v = ta.placeholder((N, C), name="v")
w = ta.placeholder((K,), name="w")
_k = ta.reduce_axis((0, K), "k")
M = ta.compute((N, C), lambda i, c: ta.sum(A[i, c, _k], _k) * (1.0 / K), name="M")

FACTORS = ["A", "u", "v", "w", "centred", "const"]
SHAPES = ["full", "partial", "digits", "batch"]


def _factor(kind: str, i, c, k):
    return {"A": lambda: A[i, c, k], "u": lambda: u[i], "v": lambda: v[i, c], "w": lambda: w[k],
            "centred": lambda: A[i, c, k] - M[i, c], "const": lambda: ta.const(-1.5)}[kind]()


def _source(spec, i, c, k):
    total = None
    for sign, kinds in spec:
        t = None
        for kind in kinds:
            f = _factor(kind, i, c, k)
            t = f if t is None else t * f
        t = t if sign > 0 else -t
        total = t if total is None else total + t
    return total


def _tensor(n: int, shape: str, spec, triangle: bool):
    k = ta.reduce_axis((0, K), "k2")

    def where(c):
        return (k <= c) if triangle else None

    if shape == "full":
        c = ta.reduce_axis((0, C), "k1")
        return ta.compute((N,), lambda i: ta.sum(_source(spec, i, c, k), [c, k], where=where(c)),
                          name=f"Y{n}")
    if shape == "partial":
        return ta.compute((N, C), lambda i, c: ta.sum(_source(spec, i, c, k), k, where=where(c)),
                          name=f"Z{n}")
    if shape == "digits":
        return ta.compute((N, C // 2, 2), lambda i, g, j: ta.sum(_source(spec, i, 2 * g + j, k), k,
                                                                 where=where(2 * g + j)),
                          name=f"D{n}")
    b = ta.reduce_axis((0, N), "b")
    return ta.compute((C,), lambda c: ta.sum(_source(spec, b, c, k), [b, k], where=where(c)),
                      name=f"S{n}")


term = st.tuples(st.sampled_from([1, -1]), st.lists(st.sampled_from(FACTORS), min_size=1, max_size=3))
program = st.lists(st.tuples(st.sampled_from(SHAPES), st.lists(term, min_size=1, max_size=2)),
                   min_size=1, max_size=4)


def _feed(rng):
    def draw(shape):
        x = rng.standard_normal(shape).astype(np.float32)
        x[rng.random(shape) < 0.3] = 0.0  # zeros among the data
        return x
    return {A: draw(A.shape), u: draw(u.shape), v: draw(v.shape), w: draw(w.shape)}


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program, st.booleans(), st.integers(0, 2**31 - 1))
def test_nested_brackets_keep_their_values(specs, triangle, seed):
    ys = [_tensor(n, shape, spec, triangle) for n, (shape, spec) in enumerate(specs)]
    opt = Optimizer()
    got = opt.finish([opt(y) for y in ys])
    feed = _feed(np.random.default_rng(seed))
    for g, want in zip(ta.evaluate(got, feed), ta.evaluate(ys, feed)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)


def test_partial_sums_are_shared_across_shapes():
    """The rewrite fires: ``Y[i] = sum_{c, k} v[i, c] A[i, c, k]``, ``S[c] = sum_{i, k} A``
    and ``D[i, g, j] = sum_k A[i, 2g + j, k]`` all read one tensor ``sum_k A`` over (i, c)."""
    specs = [("full", [(1, ["v", "A"])]), ("batch", [(1, ["A"])]), ("digits", [(1, ["A"])])]
    ys = [_tensor(n, shape, spec, False) for n, (shape, spec) in enumerate(specs)]
    opt = Optimizer()
    got = opt.finish([opt(y) for y in ys])
    from tensorad.ir import tensor_graph

    sums = [t for t in tensor_graph(got) if not t.is_placeholder and t.op.is_reduction]
    # the one partial sum over k, and Y's and S's small outer sums; D copies the partial sums
    assert sorted(len(t.op.reduce_axes) for t in sums) == [1, 1, 1], [t.op for t in sums]
    assert ta.lower(got, [A, v]).work == N * C * K + 3 * N * C
    feed = _feed(np.random.default_rng(1))
    for g, want in zip(ta.evaluate(got, feed), ta.evaluate(ys, feed)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)


def test_canonical_spelling_merges_digits_and_orders_axes():
    """``sum_k X[n, 2G + j, k]`` over ``(n, G, j)`` and ``sum_k X[n, c, k]`` over ``(c, n)``
    have one spelling, each read back at its own variables."""
    X = ta.placeholder((2, 4, 3), name="X")
    n, G, j, c = var("n", 0, 2), var("G", 0, 2), var("j", 0, 2), var("c", 0, 4)
    r1, r2 = ta.reduce_axis((0, 3), "r"), ta.reduce_axis((0, 3), "s")
    one = canonical([n, G, j], ta.sum(X[n, 2 * G + j, r1], r1))
    two = canonical([c, n], ta.sum(X[n, c, r2], r2))
    assert [(a.lo, a.hi) for a in one[0]] == [(0, 2), (0, 4)] == [(a.lo, a.hi) for a in two[0]]
    assert str(one[1]) == str(two[1])
    assert [str(e) for e in one[2]] == ["n", "((2 * G) + j)"] and [str(e) for e in two[2]] == ["n", "c"]


def test_canonical_spelling_reads_the_original_back_at_its_axes():
    """The original's free variables over the canonical axes: a unit variable its point, merged
    digits the quotient and remainder of their axis."""
    X = ta.placeholder((2, 4, 3), name="X")
    n, G, u, j = var("n", 0, 2), var("G", 0, 2), var("u", 3, 4), var("j", 0, 2)
    r = ta.reduce_axis((0, 3), "r")
    spelled = canonical([n, G, u, j], ta.sum(X[n, 2 * G + j, r + u - 3], r))
    assert [(a.lo, a.hi) for a in spelled.axes] == [(0, 2), (0, 4)]
    assert [str(e) for e in spelled.back] == ["_b0", "(_b1 // 2)", "3", "(_b1 % 2)"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([(2, 4, 3, 2), (1, 6, 2, 3), (3, 4, 2, 1)]), st.data(), st.booleans(),
       st.integers(0, 2**31 - 1))
def test_normalization_gradients_keep_their_values(shape, data, affine, seed):
    """Gradients of group norms (any group count, with or without the affine parameters,
    under a random elementwise loss) optimized with nested and late-shared brackets equal the
    unoptimized gradients."""
    n, c, h, wd = shape
    groups = data.draw(st.sampled_from([g for g in range(1, c + 1) if c % g == 0]))
    X = ta.placeholder(shape, name="X")
    g, b = (ta.placeholder((c,), name=x) for x in "gb") if affine else (None, None)
    Y = ta.topi.nn.group_norm(X, groups, g, b)
    P = ta.placeholder(shape, name="P")
    out = ta.compute(shape, lambda *i: ta.tanh(Y[i]) * P[i], name="out")
    inputs = [X] + ([g, b] if affine else [])
    Hd = ta.placeholder(shape, name="H")
    got = ta.JacobianRecursive(out, inputs, Hd)
    want = ta.JacobianRecursive(out, inputs, Hd, optimize=False)
    from tensorad.ir import placeholders

    rng = np.random.default_rng(seed)
    feed = {x: rng.standard_normal(x.shape).astype(np.float32) for x in placeholders(want)}
    for a, e in zip(ta.evaluate(got, feed), ta.evaluate(want, feed)):
        np.testing.assert_allclose(a, e, rtol=2e-4, atol=2e-4)


def test_a_nested_sum_keeps_the_zero_of_an_empty_inner_domain():
    """``Y1[c] = sum_{b, k < c} v[b, c] A[b, c, k]`` and ``Y2[c] = sum_{b, k < c} u[b]
    A[b, c, k]`` share the partial sums ``sum_{k < c} A[b, c, k]``: for ``c = 0`` the inner
    domain is empty, so ``v[b, 0] = inf`` never meets it (the original is finite), while
    ``v * [sum]`` would be ``inf * 0 = NaN``.  The outer sums run only where the inner domain
    has a point."""
    b1, k1 = ta.reduce_axis((0, N), "b"), ta.reduce_axis((0, K), "k")
    b2, k2 = ta.reduce_axis((0, N), "b"), ta.reduce_axis((0, K), "k")
    Y1 = ta.compute((C,), lambda c: ta.sum(v[b1, c] * A[b1, c, k1], [b1, k1], where=k1 < c), name="Y1")
    Y2 = ta.compute((C,), lambda c: ta.sum(u[b2] * A[b2, c, k2], [b2, k2], where=k2 < c), name="Y2")
    opt = Optimizer()
    got = opt.finish([opt(Y1), opt(Y2)])
    from tensorad.ir import tensor_graph

    shared = {t.op for t in tensor_graph([got[0]])} & {t.op for t in tensor_graph([got[1]])}
    assert any(not isinstance(op, type(A.op)) and op.is_reduction for op in shared), "one partial sum"
    feed = _feed(np.random.default_rng(4))
    feed[v][:, 0] = np.inf
    want = ta.evaluate([Y1, Y2], feed)
    assert np.isfinite(want[0]).all() and np.isfinite(want[1]).all()
    for g, w in zip(ta.evaluate(got, feed), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
