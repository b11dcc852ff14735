"""Basic indexing of whole tensors, ``X[:, s]``, ``X[..., 1:-1]``, ``X[0]``, ``X[::-2, None]``:
views written in the language (a compute that reads ``X``), with NumPy's meaning -- checked
against NumPy's own indexing, built and evaluated, with gradients against NumPy's scatter of
the head into the viewed positions."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

KEYS = [
    (slice(None), 1),
    (Ellipsis, slice(1, -1)),
    (0,),
    (-1, slice(None, None, -2)),
    (slice(None, None, 2), None, slice(3, 0, -1)),
    (None, Ellipsis, 2),
    (slice(-3, None), slice(None), slice(1, 2)),
    (slice(10, -10, -3), 0, slice(None)),
    (1, 2),
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_a_view_is_numpys_basic_indexing(key, rng):
    X = ta.placeholder((5, 4, 6), "float64", name="X")
    V = X[key]
    x = rng.standard_normal((5, 4, 6))
    want = x[key]
    assert V.shape == want.shape
    np.testing.assert_array_equal(ta.evaluate(V, {X: x}), want)
    np.testing.assert_array_equal(ta.build(V, [X])(x), want)


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_a_views_gradient_scatters_the_head(key, rng):
    X = ta.placeholder((5, 4, 6), "float64", name="X")
    V = X[key]
    Y = ta.compute(V.shape, lambda *i: V[i] * V[i], name="Y")
    x = rng.standard_normal((5, 4, 6))
    h = rng.standard_normal(Y.shape)
    H = ta.placeholder(Y.shape, "float64", name="H")
    g = ta.build(ta.JacobianRecursive(Y, [X], H), [X, H])(x, h)
    want = np.zeros_like(x)
    want[key] = 2 * x[key] * h  # (basic indexing views each position at most once)
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)


def test_strided_slice_is_tvms():
    X = ta.placeholder((7, 5), "float32", name="X")
    x = np.arange(35, dtype=np.float32).reshape(7, 5)
    S = ta.topi.strided_slice(X, [1, -1], [6, 0], [2, -2])
    np.testing.assert_array_equal(ta.build(S, [X])(x), x[1:6:2, -1:0:-2])
    T = ta.topi.strided_slice(X, [2], [4], axes=[1])
    np.testing.assert_array_equal(ta.build(T, [X])(x), x[:, 2:4])


def test_bad_views_are_clear_errors():
    X = ta.placeholder((3, 4), "float32", name="X")
    with pytest.raises(IndexError, match="index 3 is out of range for axis 0 of X, of size 3"):
        X[3, :]
    with pytest.raises(IndexError, match="selects no element"):
        X[1:1]
    with pytest.raises(IndexError, match="one '...'"):
        X[..., ...]
    with pytest.raises(IndexError, match="X has 2 dimensions"):
        X[0, 1, :]
    i = ta.reduce_axis((0, 3), name="i")
    with pytest.raises(TypeError, match="slices are not expressions"):
        X[i, :]


def test_element_reads_are_unchanged():
    X = ta.placeholder((3, 4), "float32", name="X")
    Y = ta.compute((3,), lambda i: X[i, 0] + X[2, i % 4], name="Y")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(ta.build(Y, [X])(x), x[:, 0] + x[2, np.arange(3) % 4])
    with pytest.raises(IndexError, match=r"X has 2 dimensions \(3, 4\) but is indexed with 1"):
        ta.compute((3,), lambda i: X[i])


def test_numpy_integers_index_like_python_integers():
    X = ta.placeholder((3, 4), "float32", name="X")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(ta.build(X[np.int64(1)], [X])(x), x[1])
    np.testing.assert_array_equal(ta.build(X[np.int32(-1), 1:], [X])(x), x[-1, 1:])
