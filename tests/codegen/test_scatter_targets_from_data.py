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
