"""simplify/sums/merge.py: adjoint sums over shifted, overlapping windows merge into one nest over
the union of their domains, each source guarded by its own domain.

Random gather programs ``Y[y, x] = sum_t c_t X[(y + dy_t) // sy_t, (x + dx_t) // sx_t]``
(reads out of range guarded by ``if_then_else``) are differentiated; the optimized gradient
must equal the unoptimized one (``ta.evaluate``, float64) and the compiled kernel must agree.
A fixed program -- bilinear upsampling written as four reads -- checks that the merge happens:
the gradient runs one nest of 4 body runs per input (the 16 taps of four gathers, and more
than the 9 of the true stencil, before)."""

from __future__ import annotations

import itertools
import operator

import islpy as isl
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples
from tensorad.simplify.sums.merge import _overlap_saves

import tensorad as ta
from tensorad.ir import placeholders
from tensorad.ir.expr import var

F64 = "float64"


def _gather(h: int, w: int, reads):
    X = ta.placeholder((h, w), F64, name="X")
    oh, ow = 2 * h, 2 * w

    def body(y, x):
        total = None
        for c, dy, sy, dx, sx in reads:
            iy, ix = (y + dy) // sy, (x + dx) // sx
            term = ta.if_then_else((iy < h) & (ix < w), X[iy, ix] * c, 0.0)
            total = term if total is None else total + term
        return total

    return X, ta.compute((oh, ow), body, name="Y")


read = st.tuples(st.sampled_from([0.5, -1.25, 2.0]), st.integers(0, 2), st.sampled_from([1, 2]),
                 st.integers(0, 2), st.sampled_from([1, 2]))


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(read, min_size=1, max_size=4), st.integers(0, 2**31 - 1))
def test_merged_windows_keep_the_gradient(reads, seed):
    X, Y = _gather(3, 4, reads)
    H = ta.placeholder(Y.shape, F64, name="H")
    got = ta.JacobianRecursive(Y, [X], H)
    want = ta.JacobianRecursive(Y, [X], H, optimize=False)
    rng = np.random.default_rng(seed)
    feed = {t: rng.standard_normal(t.shape) for t in placeholders(want)}
    np.testing.assert_allclose(ta.evaluate(got, feed)[0], ta.evaluate(want, feed)[0], rtol=1e-12, atol=1e-12)


def test_bilinear_as_four_reads_merges_into_one_nest():
    h, w = 5, 6
    X = ta.placeholder((h, w), F64, name="X")
    Y = ta.compute((2 * h - 1, 2 * w - 1),
                   lambda y, x: 0.25 * X[y // 2, x // 2] + 0.5 * X[(y + 1) // 2, x // 2]
                   + 0.75 * X[y // 2, (x + 1) // 2] + 1.5 * X[(y + 1) // 2, (x + 1) // 2], name="Y")
    H = ta.placeholder(Y.shape, F64, name="H")
    grad = ta.JacobianRecursive(Y, [X], H)
    lowered = ta.lower(grad, placeholders(grad))
    assert lowered.work == 4 * h * w, lowered.work  # was 396: four gathers, 16 taps per input
    hh = np.random.default_rng(2).standard_normal(Y.shape)
    want = np.zeros((h, w))
    for y in range(2 * h - 1):
        for x in range(2 * w - 1):
            for c, iy, ix in ((0.25, y // 2, x // 2), (0.5, (y + 1) // 2, x // 2),
                              (0.75, y // 2, (x + 1) // 2), (1.5, (y + 1) // 2, (x + 1) // 2)):
                want[iy, ix] += c * hh[y, x]
    np.testing.assert_allclose(ta.build(grad, placeholders(grad))(hh), want, rtol=1e-12, atol=1e-12)


_conds = st.lists(st.tuples(st.integers(-2, 2), st.integers(-2, 2), st.integers(-3, 3),
                            st.sampled_from(["<=", "==", ">="])), min_size=2, max_size=4)


@settings(max_examples=examples(60), deadline=None)
@given(_conds)
def test_a_union_saves_body_runs_exactly_when_the_count_says(specs):
    # the oracle: every point of the box enumerated, each domain's and the union's counted
    i, r = var("i", 0, 4), var("r", -1, 3)
    ops = {"<=": operator.le, "==": operator.eq, ">=": operator.ge}
    conds = [ops[o](a * i + b * r, c) for a, b, c, o in specs]  # (an Expr's comparisons build nodes)
    points = list(itertools.product(range(0, 4), range(-1, 3)))
    inside = [{p for p in points if ops[o](a * p[0] + b * p[1], c)} for a, b, c, o in specs]
    union = set().union(*inside)
    assert _overlap_saves([i], [r], conds) == (len(union) < sum(map(len, inside)))


def test_merging_windows_counts_no_points(monkeypatch):
    # counting each window's points and the union's (isl's count_val) took a third of a
    # bilinear upsampling layer's gradient; whether two windows intersect decides the same
    counted = []
    real = isl.Set.count_val
    monkeypatch.setattr(isl.Set, "count_val", lambda s: counted.append(s) or real(s))
    test_bilinear_as_four_reads_merges_into_one_nest()
    assert counted == []
