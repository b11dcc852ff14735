"""A guard on a gather index kept an out-of-range read from running.

``t0[i] = if_then_else(i + 2 < 3, X[.., i + 2], 0)`` read through ``t0.take(I[j] + 2, "wrap")``
inlines to ``if_then_else(v + 2 < 3, X[.., v + 2], 0)`` with ``v = data_index(I[j] + 2, 9)``.
The emitter made choices on data tests eager (a ``select``) on the premise that the bounds proof
could not use such a test -- but a gather index enters the proof as a variable over its range,
so the proof *did* use ``v + 2 < 3`` and the read ``X[.., v + 2]`` is out of bounds for
``v >= 1``.  Computing both branches read out of bounds (the checked build reported it).
The oracle is a NumPy formula written here, and ``ta.evaluate``.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta


def _program():
    X = ta.placeholder((3, 5, 3), "float64", name="X")
    idx = ta.placeholder((2, 2), "int32", name="idx")
    t0 = ta.compute((9,), lambda i: ta.if_then_else(i + 2 < 3, X[0, 4 - i % 5, i + 2], 0.0), name="t0")
    Y = ta.compute((4, 5), lambda a, j: t0.take(idx[a % 2, j % 2] + 2, mode="wrap"), name="Y")
    return X, idx, Y


def _want(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    t0 = np.array([x[0, 4 - i % 5, i + 2] if i + 2 < 3 else 0.0 for i in range(9)])
    return np.array([[t0[(g[a % 2, j % 2] + 2) % 9] for j in range(5)] for a in range(4)])


def test_a_guard_on_a_gather_index_keeps_its_branch_lazy():
    X, idx, Y = _program()
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (3, 5, 3))
    g = np.array([[-2, 3], [5, 0]], np.int32)  # wrapped indices 0, 5, 7, 2: only 0 passes the guard
    for options in ({}, {"vector_width": 1, "fuse": False}):
        got = ta.build([Y], [X, idx], checked=True, **options)(x, g)  # IndexError if it reads X[.., 7]
        np.testing.assert_array_equal(got, _want(x, g))
    np.testing.assert_array_equal(ta.evaluate([Y], {X: x, idx: g})[0], _want(x, g))
