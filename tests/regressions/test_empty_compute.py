"""A compute with an axis of extent 0 builds.

``t[i0, i1]`` over a ``(0, 5)`` domain whose body reads through ``% 2`` and ``% 1``: the digit
split of the axes (codegen/loops/stripmine.py) cut the domain into pieces and dropped the empty ones,
all of them, and the lowering indexed the first: ``IndexError: list index out of range`` in
``ta.build``.  Oracles: NumPy shapes and a formula written here.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta


def test_an_empty_compute_read_through_divisions_builds_and_sums_to_nothing():
    x = ta.placeholder((2,), "float64", name="x")
    c = ta.compute((3, 1), lambda i, j: ta.const(-1.5, "float64"), name="c")
    t = ta.compute((0, 5), lambda i0, i1: ta.if_then_else((i1 % 2 == 0) & (i0 <= 0), x[0],
                                                          c[2, (i1 * 3 + i0) % 1]), name="t")
    r = ta.reduce_axis((0, 0), name="r")
    z = ta.compute((5,), lambda j: ta.sum(t[r, j], axis=[r]) + x[1] * 2.0, name="z")
    xv = np.array([0.7, -1.25])
    got_t, got_z = ta.build([t, z], [x])(xv)
    assert got_t.shape == (0, 5)
    np.testing.assert_array_equal(got_z, np.full(5, -2.5))
    h = ta.placeholder((5,), "float64", name="h")
    (g,) = ta.JacobianRecursive(z, [x], h)
    hv = np.arange(5.0)
    np.testing.assert_array_equal(ta.build([g], [x, h], checked=True)(xv, hv), [0.0, 2.0 * hv.sum()])
