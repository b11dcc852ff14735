"""A sum whose output axis equals an integer read from data, ``cnt[q] = sum_k [seg[k] == q]`` (a histogram,
a segment sum or mean written with ``where=seg[k] == q``), is a scatter-add: each term lands on the output
``seg[k]`` when that is inside the axis, so the work is one add per term, not a pass over every output
for each term.  Values outside the axis add nothing.  Oracles: ``numpy.bincount`` and ``numpy.add.at``."""

import numpy as np

import tensorad as ta

N, S, D = 64, 8, 3
TARGET = "llvm -mcpu=haswell"


def test_histogram_is_one_add_per_term_and_skips_values_outside_the_axis():
    seg = ta.placeholder((N,), "int32", "seg")
    k = ta.reduce_axis((0, N), "k")
    cnt = ta.compute((S,), lambda q: ta.sum(ta.select(seg[k] == q, 1.0, 0.0), k), name="cnt")
    low = ta.lower([cnt], [seg], target=TARGET)
    assert low.work == N
    ids = np.random.default_rng(0).integers(-2, S + 2, N).astype(np.int32)  # (some outside [0, S))
    inside = ids[(ids >= 0) & (ids < S)]
    want = np.bincount(inside, minlength=S)
    np.testing.assert_array_equal(ta.build([cnt], [seg], target=TARGET)(ids), want)


def test_segment_sum_with_a_where_is_one_add_per_element():
    X, seg = ta.placeholder((N, D), "float64", "X"), ta.placeholder((N,), "int32", "seg")
    k = ta.reduce_axis((0, N), "k")
    Y = ta.compute((S, D), lambda q, j: ta.sum(X[k, j], k, where=seg[k] == q), name="Y")
    assert ta.lower([Y], [X, seg], target=TARGET).work == N * D
    rng = np.random.default_rng(1)
    x, ids = rng.standard_normal((N, D)), rng.integers(-1, S + 1, N).astype(np.int32)
    want = np.zeros((S, D))
    keep = (ids >= 0) & (ids < S)
    np.add.at(want, ids[keep], x[keep])
    np.testing.assert_allclose(ta.build([Y], [X, seg], target=TARGET)(x, ids), want, rtol=1e-12, atol=1e-12)


def _segment_reduce(reduce):
    X, seg = ta.placeholder((N, D), "float64", "X"), ta.placeholder((N,), "int32", "seg")
    k = ta.reduce_axis((0, N), "k")
    return ta.compute((S, D), lambda q, j: reduce(X[k, j], k, where=seg[k] == q), name="Y"), X, seg


def _segment_ties(rng):
    """Small integers (ties in most segments), ids partly outside the axis, one segment empty."""
    x = rng.integers(0, 3, (N, D)).astype(np.float64)
    ids = rng.integers(-1, S + 1, N).astype(np.int32)
    ids[ids == 2] = 3
    return x, ids


def test_segment_max_and_min_combine_each_term_into_its_segment():
    rng = np.random.default_rng(2)
    x, ids = _segment_ties(rng)
    x[5, 1] = np.nan
    keep = (ids >= 0) & (ids < S)
    for reduce, at, identity in ((ta.max, np.maximum.at, -np.inf), (ta.min, np.minimum.at, np.inf)):
        Y, X, seg = _segment_reduce(reduce)
        assert ta.lower([Y], [X, seg], target=TARGET).work == N * D  # (not S * N * D)
        want = np.full((S, D), identity)
        at(want, ids[keep], x[keep])  # (NaN propagates, as the reduction's)
        got = ta.build([Y], [X, seg], target=TARGET)(x, ids)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, ta.evaluate(Y, {X: x, seg: ids}))


def test_segment_max_gradient_is_a_winner_scatter_and_shares_the_head_among_ties():
    Y, X, seg = _segment_reduce(ta.max)
    H = ta.placeholder(Y.shape, "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    # the winners with their tie counts (N*D), where each goes (S*D), the head's scatter (S*D), the ties (N*D)
    assert ta.lower([dX], [X, seg, H], target=TARGET).work <= 2 * N * D + 2 * S * D
    rng = np.random.default_rng(3)
    x, ids = _segment_ties(rng)
    h = rng.standard_normal((S, D))
    want = np.zeros((N, D))
    for q in range(S):
        for j in range(D):
            rows = np.flatnonzero(ids == q)
            if rows.size:
                tied = rows[x[rows, j] == x[rows, j].max()]
                want[tied, j] += h[q, j] / tied.size
    got = ta.build([dX], [X, seg, H], target=TARGET)(x, ids, h)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, ta.evaluate(dX, {X: x, seg: ids, H: h}), rtol=1e-12, atol=1e-12)


def test_segment_argmax_scatters_its_value_and_index_together():
    argmax = ta.comm_reducer(
        lambda a, b: (ta.select(a[0] >= b[0], a[0], b[0]), ta.select(a[0] >= b[0], a[1], b[1])),
        lambda v, i: (ta.min_value(v), ta.const(-1, i)), name="argmax")
    X, seg = ta.placeholder((N,), "float64", "X"), ta.placeholder((N,), "int32", "seg")
    k = ta.reduce_axis((0, N), "k")
    V, at = ta.compute((S,), lambda q: argmax((X[k], k), k, where=seg[k] == q), name="best")
    assert ta.lower([V, at], [X, seg], target=TARGET).work == N
    rng = np.random.default_rng(4)
    x, ids = rng.standard_normal(N), rng.integers(-1, S + 1, N).astype(np.int32)
    ids[ids == 2] = 3
    got_v, got_at = ta.build([V, at], [X, seg], target=TARGET)(x, ids)
    for q in range(S):
        rows = np.flatnonzero(ids == q)
        first = rows[np.argmax(x[rows])] if rows.size else -1  # (the first of equal values: none here)
        assert got_at[q] == first and (not rows.size or got_v[q] == x[first])
    np.testing.assert_array_equal(got_v, ta.evaluate(V, {X: x, seg: ids}))  # (the identity where empty)
