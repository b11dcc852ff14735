"""codegen/passes/footprint.py: a materialized tensor is computed only where its readers read it.

Random programs materialize a product ``T = A B`` (a sum) and ``U = exp(T) / 2`` (forced
materialized), and read them in sums under triangular, banded and box ``where`` conditions,
through reversed and halved indices, and under lazy ``if_then_else`` guards; the kernel must
equal ``ta.evaluate`` (the oracle, which computes every tensor on its whole box).  A fixed
program checks that the shrinking happens (the work of the triangle, not the square)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorad as ta

N, M, R = 6, 7, 3
F64 = "float64"
A = ta.placeholder((N, R), F64, name="A")
B = ta.placeholder((R, M), F64, name="B")
CONDS = {
    "none": lambda i, j: None,
    "lower": lambda i, j: j <= i,
    "upper": lambda i, j: j >= i,
    "box": lambda i, j: j < 3,
    "band": lambda i, j: (j >= i - 1) & (j <= i + 1),
    "anti": lambda i, j: i + j < 6,
    "half": lambda i, j: 2 * j <= i,
}
INDEX = {"j": lambda j: j, "reversed": lambda j: M - 1 - j, "halved": lambda j: j // 2}


def _reader(n, kind, V, cond, index):
    if kind == "sum":
        j = ta.reduce_axis((0, M), "j")
        return ta.compute((N,), lambda i: ta.sum(V[i, INDEX[index](j)], j, where=CONDS[cond](i, j)),
                          name=f"Y{n}")

    def body(i, j):
        c = CONDS[cond](i, j)
        x = V[i, INDEX[index](j)]
        return x if c is None else ta.if_then_else(c, x, 0.0)
    return ta.compute((N, M), body, name=f"Z{n}")


def _program(readers, materialize_u):
    r = ta.reduce_axis((0, R), "r")
    T = ta.compute((N, M), lambda i, j: ta.sum(A[i, r] * B[r, j], r), name="T")
    U = ta.compute((N, M), lambda i, j: ta.exp(T[i, j]) * 0.5, name="U")
    outs = []
    for n, (kind, src, cond, index) in enumerate(readers):
        V = U if src == "U" else T
        outs.append(_reader(n, kind, V, cond, index))
    return outs, ([U] if materialize_u else [])


reader = st.tuples(st.sampled_from(["sum", "guard"]), st.sampled_from(["T", "U"]),
                   st.sampled_from(sorted(CONDS)), st.sampled_from(sorted(INDEX)))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(reader, min_size=1, max_size=3), st.booleans(), st.integers(0, 2**31 - 1))
def test_shrunk_producers_keep_their_readers_values(readers, materialize_u, seed):
    outs, forced = _program(readers, materialize_u)
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(A.shape), rng.standard_normal(B.shape)
    got = ta.build(outs, [A, B], materialize=forced)(a, b)
    got = got if isinstance(got, tuple) else (got,)
    for g, want in zip(got, ta.evaluate(outs, {A: a, B: b})):
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)


def test_a_product_read_on_its_lower_triangle_is_computed_there():
    outs, _ = _program([("sum", "T", "lower", "j"), ("guard", "T", "lower", "j")], False)
    low = sum(min(i + 1, M) for i in range(N))  # points with j <= i
    # T on the triangle (R per point), the sum and the guarded copy on it
    assert ta.lower(outs, [A, B]).work == R * low + low + low
    a, b = np.arange(N * R).reshape(N, R) / 7.0, np.arange(R * M).reshape(R, M) / 5.0
    full = a @ b
    y, z = ta.build(outs, [A, B])(a, b)
    np.testing.assert_allclose(y, [full[i, :i + 1].sum() for i in range(N)])
    np.testing.assert_allclose(z, np.tril(full))



@pytest.mark.parametrize("text, inside", [
    ("{ [a, b] : 0 <= a <= 7 and 0 < b <= 5 }", lambda a, b: 0 <= a <= 7 and 0 < b <= 5),  # a box
    ("{ [a, b] : 0 <= a <= 6 and 0 <= b <= a }", lambda a, b: 0 <= a <= 6 and 0 <= b <= a),  # a triangle
    ("{ [a, b] : 0 <= a <= 3 and 0 <= b <= 2 or 5 <= a <= 6 and 1 <= b <= 4 }",
     lambda a, b: 0 <= a <= 3 and 0 <= b <= 2 or 5 <= a <= 6 and 1 <= b <= 4),  # two boxes
    ("{ [a, b] : 0 <= a <= 9 and 0 <= b <= 4 and exists e : a = 2e }",
     lambda a, b: 0 <= a <= 9 and 0 <= b <= 4 and a % 2 == 0),  # even rows (a division)
])
def test_count_points_counts_every_point(text, inside):
    import islpy as isl
    from tensorad.codegen.passes.footprint import count_points

    s = isl.Set(text)
    assert count_points(s) == sum(1 for a in range(-2, 14) for b in range(-2, 14) if inside(a, b))


def test_the_reads_of_one_body_share_its_renaming(monkeypatch):
    # a chain whose loss reads one point: the steps are shrunk to the point read, and each
    # body reads its producer at two points under its own footprint guard, renamed to
    # canonical variables once per body, not per read
    import importlib

    footprint = importlib.import_module("tensorad.codegen.passes.footprint")
    renamings = []
    real = footprint._Call.renaming
    monkeypatch.setattr(footprint._Call, "renaming",
                        lambda self, free: renamings.append(1) or real(self, free))
    X = ta.placeholder((16,), "float64", name="X")
    Y = X
    n = 40
    for k in range(n):
        Y = (lambda P, k=k: ta.compute((16,), lambda i: ta.tanh(P[i]) * 0.5 + P[i // 2] * 0.25,
                                       name=f"t{k}"))(Y)
    L = ta.compute((), lambda: Y[0] * 2.0, name="L")
    low = ta.lower([L], [X], materialize=[], fuse=False)
    assert len(renamings) <= n + 2, len(renamings)  # (one per read before: 2n)
    x = np.linspace(-1, 1, 16)
    y = x.copy()
    for _ in range(n):
        y = np.tanh(y) * 0.5 + y[np.arange(16) // 2] * 0.25
    np.testing.assert_allclose(ta.build([L], [X], cache=False)(x), y[0] * 2.0, rtol=1e-12)
    assert low.work < 16 * n  # (shrunk to the points read)


# a Hessian-vector product's (a four-deep nest of reductions, each lifted from the previous one's
# source): one footprint over a 5 x 3 x 16 box, with three divisions of large coefficients
SEED_971008 = ("{ [a, b, c] : exists (e1, e2: 2 <= a <= 3 and 0 <= b <= 2 and 0 <= c <= 15 and "
               "-5 - 3b - 7c - 9*floor((1 - b)/3) - 8e1 <= 112e2 <= 18 - 3b - 7c - 9*floor((1 - b)/3) - 8e1 "
               "and 1128 - 224b - 453c - 672*floor((1 - b)/3) - 528e1 <= 7248e2 <= "
               "1136 - 224b - 453c - 672*floor((1 - b)/3) - 528e1) }")


def test_a_footprint_with_divisions_is_its_bounding_box_before_isl_counts_it(monkeypatch):
    # a footprint with divisions is used as its bounding box: isl took 13 CPU-s to compare this one
    # with its box and 13 more to count its points (56 CPU-s for the seed's hvp check)
    import islpy as isl
    from tensorad.codegen.passes import footprint

    from tensorad.poly.affine import IndexSpace

    counted = []
    real = footprint.count_points
    monkeypatch.setattr(footprint, "count_points", lambda s: counted.append(s) or real(s))
    axes = [ta.reduce_axis((0, n), name=name) for name, n in zip("abc", (5, 3, 16))]
    space = IndexSpace(axes)
    names = dict(zip("abc", space.space.get_var_names(isl.dim_type.set)))
    fp = isl.Set(re.sub(r"(?<![A-Za-z_])[abc](?![A-Za-z_0-9])", lambda m: names[m.group()], SEED_971008))
    guard = footprint._canonical_guard(space, fp)
    assert counted and not any(b.dim(isl.dim_type.div) for s in counted for b in s.get_basic_sets())
    assert str(guard) == "(((a + -2) >= 0) && (((a * -1) + 3) >= 0))"  # the box 2 <= a <= 3
