"""The adjoint of a one-hot read, ``dX[i, v] = if_then_else(data_index(T[i]) == v, g(i), 0)``, fills ``dX``
with zeros and stores ``g(i)`` once per row at ``T[i]`` (``codegen/strategies/scatter.py``): ``N`` body runs,
not a pass over ``N x C``.  A store, not an add onto the fill, so a ``-0.0`` head stays ``-0.0``; a label
outside the classes leaves its row zero; the read at an argmax's index alike.  Oracles: NumPy formulas."""

from __future__ import annotations

import numpy as np

import tensorad as ta

F64 = "float64"
TARGET = "llvm -mcpu=skylake-avx512"


def test_one_hot_pick_gradient_stores_once_per_row():
    n, c = 6, 40
    X, t = ta.placeholder((n, c), F64, "X"), ta.placeholder((n,), "int32", "t")
    q = ta.reduce_axis((0, c), "q")
    Y = ta.compute((n,), lambda i: ta.sum(ta.select(q == t[i], X[i, q], 0.0), q), name="Y")
    H = ta.placeholder((n,), F64, "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([dX], [t, H], target=TARGET).work == n

    labels = np.array([3, 0, c - 1, -1, c + 2, 3], np.int32)  # (two outside [0, c): rows of zeros)
    h = np.array([1.5, -0.0, 2.0, 7.0, 8.0, -2.5])
    got = ta.build([dX], [t, H])(labels, h)
    want = np.zeros((n, c))
    inside = (labels >= 0) & (labels < c)
    want[np.arange(n)[inside], labels[inside]] = h[inside]
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[1, 0]) and not np.signbit(got[1, 1])  # (the stored -0.0 and the fill's +0.0)


def test_value_read_at_an_argmax_gradient_stores_once_per_row():
    n, m = 5, 33
    S, V = ta.placeholder((n, m), F64, "S"), ta.placeholder((n, m), F64, "V")
    argmax = ta.comm_reducer(
        lambda x, y: (ta.select(x[0] >= y[0], x[0], y[0]), ta.select(x[0] >= y[0], x[1], y[1])),
        lambda a, b: (ta.min_value(a), ta.const(-1, b)), name="argmax")
    k = ta.reduce_axis((0, m), "k")
    _, at = ta.compute((n,), lambda i: argmax((S[i, k], k), k), name="at")
    Y = ta.compute((n,), lambda i: V[i, at[i]] * 3.0, name="Y")
    H = ta.placeholder((n,), F64, "H")
    (dV,) = ta.JacobianRecursive(Y, [V], H)
    assert ta.lower([dV], [S, H], target=TARGET).work == n * m + n  # the argmax, then one store per row

    rng = np.random.default_rng(4)
    s, h = rng.standard_normal((n, m)), rng.standard_normal(n)
    want = np.zeros((n, m))
    want[np.arange(n), s.argmax(1)] = 3.0 * h
    np.testing.assert_array_equal(ta.build([dV], [S, H])(s, h), want)


def test_one_hot_of_a_single_point_is_lowered_as_a_pass():
    """``dX[v] = if_then_else(data_index(T[0]) == v, H, 0)`` leaves no loop to scatter over: a plain pass."""
    c = 9
    X, t = ta.placeholder((c,), F64, "X"), ta.placeholder((1,), "int32", "t")
    q = ta.reduce_axis((0, c), "q")
    Y = ta.compute((), lambda: ta.sum(ta.select(q == t[0], X[q], 0.0), q), name="Y")
    H = ta.placeholder((), F64, "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    for label in (4, c):
        want = np.zeros(c)
        want[label:label + 1] = 2.5
        got = ta.build([dX], [t, H])(np.array([label], np.int32), np.array(2.5))
        np.testing.assert_array_equal(got, want)
