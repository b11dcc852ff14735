"""reshape, transpose, concatenate, split, expand_dims, squeeze and matmul against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

topi = ta.topi


@pytest.mark.parametrize("src, dst", [
    ((2, 3, 4), (6, 4)), ((2, 3, 4), (2, 12)), ((2, 3, 4), (24,)), ((24,), (2, 3, 4)),
    ((2, 3, 4), (4, 3, 2)), ((6, 5), (3, 2, 5)), ((2, 3, 4), (2, -1, 2)), ((5, 1, 3), (15,)),
    ((4, 6), (1, 4, 1, 6)), ((3, 5, 2), (3, 5, 2)), ((), (1, 1)), ((1, 1), ()), ((7,), (-1,)),
])
def test_reshape(rng, src, dst):
    X = ta.placeholder(src, name="X")
    x = rng.standard_normal(src).astype(np.float32)
    Y = topi.reshape(X, dst)
    want = x.reshape(dst)
    assert Y.shape == want.shape
    np.testing.assert_array_equal(ta.evaluate(Y, {X: x}), want)


def test_reshape_keeps_unchanged_outer_axes_direct():
    X = ta.placeholder((2, 3, 4, 5), name="X")
    text = ta.PrintTensorRecursively(topi.reshape(X, (2, 12, 5)))
    assert "X(ax0, (ax1 // 4), (ax1 % 4), ax2)" in text


@pytest.mark.parametrize("shape, axes", [((2, 3), None), ((2, 3, 4), (1, 2, 0)),
                                         ((2, 3, 4), (-1, 0, -2)), ((5,), (0,)),
                                         ((2, 1, 3, 2), (3, 1, 0, 2))])
def test_transpose(rng, shape, axes):
    X = ta.placeholder(shape, name="X")
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(ta.evaluate(topi.transpose(X, axes), {X: x}), np.transpose(x, axes))


@pytest.mark.parametrize("shapes, axis", [
    ([(2, 3), (4, 3)], 0), ([(2, 1), (2, 3), (2, 2)], 1), ([(2, 3, 4)], -1),
    ([(1, 2, 3), (1, 2, 1), (1, 2, 2), (1, 2, 1)], -1), ([(2, 0), (2, 3)], 1), ([(3,), (2,)], 0),
])
def test_concatenate(rng, shapes, axis):
    ts = [ta.placeholder(s, name=f"T{p}") for p, s in enumerate(shapes)]
    arrs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    Y = topi.concatenate(ts, axis)
    want = np.concatenate(arrs, axis)
    assert Y.shape == want.shape
    np.testing.assert_array_equal(ta.evaluate(Y, dict(zip(ts, arrs))), want)


@pytest.mark.parametrize("shape, spec, axis", [
    ((6, 2), 3, 0), ((2, 6), [1, 4], 1), ((2, 7), [0, 3, 3, 7], -1), ((4, 3), 1, 0), ((5,), [2], 0),
])
def test_split(rng, shape, spec, axis):
    X = ta.placeholder(shape, name="X")
    x = rng.standard_normal(shape).astype(np.float32)
    parts = topi.split(X, spec, axis)
    want = np.split(x, spec, axis)
    assert len(parts) == len(want)
    got = ta.evaluate(parts, {X: x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_split_then_concatenate_is_identity(rng):
    X = ta.placeholder((3, 8), name="X")
    x = rng.standard_normal((3, 8)).astype(np.float32)
    Y = topi.concatenate(topi.split(X, [2, 5], axis=1), axis=1)
    np.testing.assert_array_equal(ta.evaluate(Y, {X: x}), x)


def test_expand_dims_and_squeeze(rng):
    X = ta.placeholder((3, 1, 4), name="X")
    x = rng.standard_normal((3, 1, 4)).astype(np.float32)
    np.testing.assert_array_equal(ta.evaluate(topi.expand_dims(X, 0, 2), {X: x}), x[None, None])
    np.testing.assert_array_equal(ta.evaluate(topi.expand_dims(X, -1), {X: x}), x[..., None])
    np.testing.assert_array_equal(ta.evaluate(topi.squeeze(X), {X: x}), x.squeeze())
    np.testing.assert_array_equal(ta.evaluate(topi.squeeze(X, 1), {X: x}), x.squeeze(1))


@pytest.mark.parametrize("sa, sb", [
    ((3, 4), (4, 5)), ((1, 1), (1, 1)), ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4, 2)),
    ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4, 3)), ((3, 4), (4,)), ((4,), (4,)),
    ((2, 3, 4), (4,)),
])
def test_matmul(rng, sa, sb):
    A = ta.placeholder(sa, "float64", name="A")
    B = ta.placeholder(sb, "float64", name="B")
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    Y = topi.matmul(A, B)
    want = np.matmul(a, b)
    assert Y.shape == want.shape and Y.name == "matmul"
    np.testing.assert_allclose(ta.evaluate(Y, {A: a, B: b}), want, rtol=1e-12)
