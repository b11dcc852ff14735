"""Loops over domains with ``%`` conditions reach every point.

isl's AST builder dropped strided iterations whose offset is a division of an outer loop --
which scanning two short output axes as one loop creates from any ``%`` condition.  Oracles:
``ta.evaluate`` and NumPy formulas written here; work is compared with the count of points.
"""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest
from tensorad.codegen.loops.ast_check import guarded_hulls, scans_exactly
from tensorad.codegen.loops.domain import PolyStmt
from tensorad.codegen.loops.isl_ast import AstConverter, _dim_hints, build_loops, schedule_map
from tensorad.codegen.loops.work import count_work
from tensorad.codegen.program import Store

import tensorad as ta
from tensorad.ir.expr import var
from tensorad.poly.affine import IndexSpace

F64 = "float64"


def _run(outputs, inputs, feed, **opts):
    got = ta.build(outputs, inputs, **opts)(*[feed[t] for t in inputs])
    return got if isinstance(got, tuple) else (got,)


@pytest.mark.parametrize("threads", [1, 2])
def test_mod_condition_on_merged_output_axes(threads):
    H = ta.placeholder((4,), F64, name="H")
    Z = ta.compute((2, 5, 4), lambda a, b, c: ta.if_then_else((2 * a - b + c) % 5 == 0, H[c], 0.0),
                   name="Z")
    h = np.arange(1.0, 5.0)
    want = np.zeros((2, 5, 4))
    for a in range(2):
        for b in range(5):
            for c in range(4):
                if (2 * a - b + c) % 5 == 0:
                    want[a, b, c] = h[c]
    (got,) = _run([Z], [H], {H: h}, num_threads=threads)
    np.testing.assert_array_equal(got, want)
    assert np.count_nonzero(got) == 8
    assert ta.lower([Z], [H]).work == 8


def test_sum_where_mod_keeps_the_strided_loop():
    H = ta.placeholder((4, 5), F64, name="H")
    i = ta.reduce_axis((0, 4), "i")
    j = ta.reduce_axis((0, 5), "j")
    Y = ta.compute((2, 5), lambda a, b: ta.sum(H[i, j], axis=[i, j], where=(i % 2 == a) & (j == b)),
                   name="Y")
    h = np.random.default_rng(0).standard_normal((4, 5))
    want = np.stack([h[0::2].sum(0), h[1::2].sum(0)])
    (got,) = _run([Y], [H], {H: h})
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert ta.lower([Y], [H]).work == 20
    Yo = ta.OptimizeAndLiftNonzeronessConditions(Y)
    (got,) = _run([Yo], [H], {H: h})
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("opts", [{}, {"num_threads": 3, "checked": True}])
def test_mod_condition_isl_cannot_scan_on_fused_axes_is_rebuilt(opts):
    """A reduction masked by ``(2 k - j + 2) % 5 == 0`` over output axes
    ``(i, j, k)`` whose first two are scanned as one loop made isl's AST builder fail outright
    ("cannot handle void expression"), at every option; the loops are now rebuilt over the
    division-free hulls with the exact test inside."""
    r0, r1 = ta.reduce_axis((1, 4), name="r0"), ta.reduce_axis((-1, 1), name="r1")
    T = ta.compute((3, 16, 3), lambda i, j, k: ta.sum(ta.const(-1.5, F64), axis=[r0, r1],
                                                       where=(2 * k - j + 2) % 5 == 0), name="T")
    i, j, k = np.meshgrid(np.arange(3), np.arange(16), np.arange(3), indexing="ij")
    want = np.where((2 * k - j + 2) % 5 == 0, -1.5 * 6, 0.0)
    (got,) = _run([T], [], {}, **opts)
    np.testing.assert_array_equal(got, want)
    # (plain loops: along i the sums repeat, which a scan would copy)
    assert ta.lower([T], [], choices={"T#0": "loops"}).work == 6 * int(((2 * k - j + 2) % 5 == 0).sum())


@pytest.mark.parametrize("loss", [False, True])
def test_gradient_of_modular_read(loss):
    """``Y[i, j] = X[i % 2, j % 5]`` on a (3, 7) output: its gradient sums a strided window."""
    X = ta.placeholder((2, 5), F64, name="X")
    Y = ta.compute((3, 7), lambda i, j: X[i % 2, j % 5], name="Y")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5))
    if loss:  # L = sum Y**2: dL/dX[p, q] = sum over (i, j) reading X[p, q] of 2 X[p, q]
        k0, k1 = ta.reduce_axis((0, 3)), ta.reduce_axis((0, 7))
        L = ta.compute((), lambda: ta.sum(Y[k0, k1] * Y[k0, k1], axis=[k0, k1]), name="L")
        (g,) = ta.gradient(L, [X])
        inputs, feed, h = [X], {X: x}, np.ones((3, 7))
        scale = 2 * x
    else:
        Hd = ta.placeholder((3, 7), F64, name="Hd")
        (g,) = ta.gradient(Y, [X], head=Hd)
        h = rng.standard_normal((3, 7))
        inputs, feed, scale = [X, Hd], {X: x, Hd: h}, np.ones((2, 5))
    want = np.zeros((2, 5))
    for i in range(3):
        for j in range(7):
            want[i % 2, j % 5] += h[i, j]
    (got,) = _run([g], inputs, feed)
    np.testing.assert_allclose(got, want * scale, rtol=1e-12)


def test_check_detects_dropped_iterations_and_rebuild_is_exact():
    """The check itself: isl's loops for the failing domain are caught, the hulls are right."""
    a, i = var("a", 0, 10), var("i", 0, 4)
    space = IndexSpace([a, i])
    dom = space.box().intersect(space.cond(i % 2 == a // 5))
    H = ta.placeholder((10, 4), F64, name="H")
    from tensorad.codegen.program import Buffer

    buf = Buffer("H", (10, 4), F64, "output", H)
    stmts = [PolyStmt("S", (a, i), dom, (Store(buf, (a, i), ta.const(1.0, F64)),), (a, i))]
    umap = schedule_map(stmts)
    conv = AstConverter(stmts, _dim_hints(stmts, umap))
    node = isl.AstBuild.from_context(isl.Set("{ : }")).node_from_schedule_map(umap)
    conv.node(node)
    exact = scans_exactly(stmts, conv.instances)
    safe = guarded_hulls(stmts)
    conv2 = AstConverter(safe, _dim_hints(safe, schedule_map(safe)))
    conv2.node(isl.AstBuild.from_context(isl.Set("{ : }")).node_from_schedule_map(schedule_map(safe)))
    assert scans_exactly(safe, conv2.instances)
    assert count_work(build_loops(stmts)) == 20
    if exact:  # a future isl may scan it right; then the check must agree with the count
        assert count_work(conv.node(node)) == 20


def test_statements_over_one_domain_share_its_guarded_hull(monkeypatch):
    """Statements over the same domain (a reduction's initialization and its store, over the
    projection of a sum's domain) get its division-free hull and exact test computed once, each
    statement its own body guarded by them: what each gets alone."""
    from tensorad.codegen.loops import ast_check
    from tensorad.codegen.program import Buffer

    a, i = var("a", 0, 10), var("i", 0, 4)
    space = IndexSpace([a, i])
    dom = space.box().intersect(space.cond(i % 2 == a // 5))
    H = ta.placeholder((10, 4), F64, name="H")
    buf = Buffer("H", (10, 4), F64, "output", H)
    stmts = [PolyStmt(n, (a, i), dom, (Store(buf, (a, i), ta.const(v, F64)),), (a, i, k))
             for k, (n, v) in enumerate([("I", 0.0), ("W", 1.0)])]
    alone = [guarded_hulls([s])[0] for s in stmts]
    made = []
    original = ast_check._guarded_hull
    monkeypatch.setattr(ast_check, "_guarded_hull", lambda *args: made.append(args) or original(*args))
    both = guarded_hulls(stmts)
    assert len(made) == 1
    for got, want, s in zip(both, alone, stmts):
        assert got.domain.is_equal(want.domain) and got.body[0].cond is want.body[0].cond
        assert got.body[0].then == s.body


def test_a_reductions_coverage_is_asked_of_isl_once_per_memo(monkeypatch):
    """Planning and lowering both build a reduction's domain; with the call's memo, isl's inclusion
    test of the output box in the reduced region (seconds over a domain of many pieces) runs once,
    and the domains agree with those built without the memo."""
    from tensorad.codegen.loops import domain

    X = ta.placeholder((15,), F64, name="X")
    k = ta.reduce_axis((0, 7), name="k")
    Y = ta.compute((9,), lambda j: ta.sum(X[j + k], axis=k, where=(j + k) % 3 == 0), name="Y")
    body = Y.op.body
    plain = [domain.reduction_domain(Y.op, body, [None]) for _ in range(2)]
    asked = []
    subset = isl.Set.is_subset
    monkeypatch.setattr(isl.Set, "is_subset", lambda s, t: asked.append(1) or subset(s, t))
    memo: dict = {}
    kept = [domain.reduction_domain(Y.op, body, [None], memo=memo) for _ in range(2)]
    assert len(asked) == 1
    for a, b in zip(plain, kept):
        assert [s.domain.is_equal(t.domain) for s, t in zip(a.stmts, b.stmts)] == [True] * len(a.stmts)
        assert bool(a.fills) == bool(b.fills)
