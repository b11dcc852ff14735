"""A tensor read at an index taken from data is computed on the points such a read can reach.

``Y[n] = P[g[n], 2] * x[n, 0]`` reads one column of ``P``, at rows from data.  A read whose index holds a
``DATA_INDEX`` was not affine, so ``P``'s footprint was its whole box: three columns of products where
the forward needs one (and a gradient that recomputes an intermediate at a saved winner's index computed
all of it).  The index is now some point of its range, ``[0, 16)`` here.  Oracles: a hand count of the
work and a NumPy formula."""

from __future__ import annotations

import numpy as np

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"


def _program():
    x = ta.placeholder((16, 3), "float64", "x")
    g = ta.placeholder((4,), "int32", "g")
    r = ta.reduce_axis((0, 5), "r")
    P = ta.compute((16, 3), lambda i, j: ta.prod(x[i, j] + ta.cast("float64", r), axis=r), name="P")
    Y = ta.compute((4,), lambda n: P.take(g[n], 2, mode="clip") * x[n, 0], name="Y")
    return x, g, Y


def test_only_the_read_column_is_computed():
    x, g, Y = _program()
    # P over 16 rows of column 2, 5 terms each, then Y
    assert ta.lower([Y], [x, g], target=TARGET).work == 16 * 5 + 4


def test_values_at_any_row():
    x, g, Y = _program()
    xv = np.random.default_rng(4).standard_normal((16, 3))
    gv = np.array([15, -3, 7, 40], dtype=np.int32)  # (clipped to 0 and 15)
    rows = np.clip(gv, 0, 15)
    want = np.prod(xv[rows, 2][:, None] + np.arange(5.0), axis=1) * xv[:4, 0]
    np.testing.assert_allclose(ta.build([Y], [x, g])(xv, gv), want, rtol=1e-14)
