"""A lazy ``if_then_else`` whose only reads lie in a nested ``if_then_else``.

``ite(0 <= r - 2 < 1, ite(c, X[.., i + 3], X[.., r - 2]), -1)``: the emitter keeps an
``if_then_else`` lazy (real branches) when a branch reads a tensor, but it replaced the nested
one by a placeholder first and then saw no read under the outer one, so it computed the outer
one as an eager ``select`` -- evaluating the nested choice, and its read ``X[.., r - 2]`` at
``r = 0``, for every ``r``: an out-of-bounds read (the checked build reported it; a far enough
offset reads outside the buffer).  The oracle is ``ta.evaluate`` and a NumPy loop.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta


def _program():
    X = ta.placeholder((2, 17), "float32", name="X")
    T = ta.compute((1, 4), lambda a, b: ta.if_then_else((2 * a - b) % 5 == 0, X[b % 2, b + 3],
                                                        X[(3 - a) % 2, a]), name="T")
    r = ta.reduce_axis((0, 17), name="r")
    Y = ta.compute((2,), lambda i: ta.min(ta.if_then_else((r - 2 >= 0) & (r - 2 < 1), T[r - 2, i], -1.0),
                                          axis=r), name="Y")
    return X, Y


def _want(x: np.ndarray) -> np.ndarray:
    t = np.array([[x[b % 2, b + 3] if (-b) % 5 == 0 else x[1, 0] for b in range(4)]], np.float32)
    return np.array([min(-1.0, t[0, i]) for i in range(2)], np.float32)


def test_outer_choice_stays_lazy_when_its_reads_are_in_a_nested_choice():
    X, Y = _program()
    x = np.random.default_rng(0).uniform(-3, 3, (2, 17)).astype(np.float32)
    got = ta.build([Y], [X], checked=True)(x)  # (an IndexError names an out-of-bounds read)
    np.testing.assert_array_equal(got, _want(x))
    np.testing.assert_array_equal(ta.evaluate([Y], {X: x})[0], _want(x))
