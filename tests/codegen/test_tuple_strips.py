"""A tuple reduction accumulates in strips of its outputs.

The strip form (the last output axis innermost, each element accumulated in its output buffer) took
only reductions of one value.  A max's winner with its tie code, ``(value, code)``, ran with scalar
accumulators and the window innermost: a 3x3 erosion's gradient, whose window pass had run in
vectorized strips before its tie code joined the pass, became about 1.2x slower.  Now each component
accumulates in its own output, the results stored in an order in which every result reads the old
values it needs (the code, which compares with the old maximum, before the maximum); a combiner whose
components read each other's old values (a complex product) has no such order and keeps its
accumulators.

Values are NumPy's, on integer data so that ties decide the winners.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from tensorad.codegen.program import Nest

import tensorad as ta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fuzz.cheap import pinned  # noqa: E402

TARGET = pinned("llvm -mcpu=skylake-avx512")  # (and typical caches: the same choices on every host)
RNG = np.random.default_rng(5)


def _max_and_count():
    """A column's maximum and the number of rows that tie with it: the count compares with the old
    maximum, so it is stored first."""
    def combine(x, y):
        count = ta.select(x[0] > y[0], x[1], ta.select(y[0] > x[0], y[1], x[1] + y[1]))
        return ta.select(x[0] >= y[0], x[0], y[0]), count
    return ta.comm_reducer(combine, lambda dv, dc: (ta.min_value(dv), ta.const(0, dc)), name="max_count")


def _labels(lowered, name):
    return {point: (labels, chosen) for point, labels, chosen in lowered.offered if point.startswith(name)}


def test_a_column_maximum_and_its_tie_count_in_strips_are_numpys():
    rows, cols = 40, 64
    X = ta.placeholder((rows, cols), "float64", "X")
    i = ta.reduce_axis((0, rows), "i")
    value, count = ta.compute((cols,), lambda j: _max_and_count()((X[i, j], ta.const(1, "int32")), i),
                              name="colmax")
    (point, (labels, _)), = _labels(ta.lower([value, count], [X], target=TARGET), "colmax").items()
    assert "strips" in labels
    lowered = ta.lower([value, count], [X], choices={point: "strips"})
    (nest,) = [s for s in lowered.program.steps if isinstance(s, Nest)]
    assert "accumulates in the output" in nest.note
    assert lowered.work == rows * cols
    x = RNG.integers(0, 4, (rows, cols)).astype(np.float64)
    got_value, got_count = ta.build([value, count], [X], choices={point: "strips"})(x)
    np.testing.assert_array_equal(got_value, x.max(axis=0))
    np.testing.assert_array_equal(got_count, (x == x.max(axis=0)).sum(axis=0))


def test_an_erosion_gradient_finds_winners_and_ties_in_strips():
    n = 64
    X = ta.placeholder((n + 2, n + 2), name="X")
    r, s = ta.reduce_axis((0, 3), "r"), ta.reduce_axis((0, 3), "s")
    Y = ta.compute((n, n), lambda i, j: ta.min(X[i + r, j + s], [r, s]), "erode")
    H = ta.placeholder(Y.shape, name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    lowered = ta.lower([dX], [X, H], target=TARGET)
    (hits,) = [s for s in lowered.program.steps if isinstance(s, Nest) and "tie_code" in s.note]
    assert "accumulates in the output" in hits.note


def test_components_reading_each_other_keep_their_accumulators():
    """``(a, b) * (c, d) = (ac - bd, ad + bc)``: each result reads both old values."""
    complex_product = ta.comm_reducer(lambda x, y: (x[0] * y[0] - x[1] * y[1], x[0] * y[1] + x[1] * y[0]),
                                      lambda d0, d1: (ta.const(1, d0), ta.const(0, d1)), name="cprod")
    rows, cols = 6, 32
    A = ta.placeholder((rows, cols), "float64", "A")
    B = ta.placeholder((rows, cols), "float64", "B")
    i = ta.reduce_axis((0, rows), "i")
    re, im = ta.compute((cols,), lambda j: complex_product((A[i, j], B[i, j]), i), name="cp")
    lowered = ta.lower([re, im], [A, B], target=TARGET)
    assert all("strips" not in labels for labels, _ in _labels(lowered, "cp").values())
    nests = [s for s in lowered.program.steps if isinstance(s, Nest)]
    assert not any("accumulates in the output" in n.note for n in nests)
    a, b = RNG.uniform(-1, 1, (2, rows, cols))
    got_re, got_im = ta.build([re, im], [A, B])(a, b)
    want = np.prod(a + 1j * b, axis=0)
    np.testing.assert_allclose(got_re + 1j * got_im, want, rtol=1e-12)


def test_a_strided_pool_keeps_scalar_winners():
    """A 2x2 stride-2 max pool's winner pass reads every other element along the strip: its tie code
    keeps its accumulators (strips interleaving those reads for both components ran 1.4x slower)."""
    X = ta.placeholder((2, 8, 32, 32), name="X")
    Y = ta.topi.nn.pool(X, (2, 2), (2, 2), (0, 0), "max")
    H = ta.placeholder(Y.shape, name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    lowered = ta.lower([dX], [X, H], target=TARGET)
    (hits,) = [s for s in lowered.program.steps if isinstance(s, Nest) and "tie_code" in s.note]
    assert "accumulates in the output" not in hits.note
