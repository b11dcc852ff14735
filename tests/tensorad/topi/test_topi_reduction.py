"""ta.topi.sum / max / min / prod: axes, negative axes, keepdims, all-axes, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

topi = ta.topi


@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("shape, axis", [
    ((3, 4), None), ((3, 4), 0), ((3, 4), 1), ((3, 4), -1), ((2, 3, 5), (0, 2)),
    ((2, 3, 5), (-1, -3)), ((2, 3, 5), [1]), ((7,), 0), ((2, 1, 3), 1), ((), None), ((2, 3), ()),
])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(rng, kind, shape, axis, keepdims):
    X = ta.placeholder(shape, "float64", name="X")
    x = rng.standard_normal(shape)
    Y = getattr(topi, kind)(X, axis=axis, keepdims=keepdims)
    np_axis = tuple(axis) if isinstance(axis, list) else axis
    want = getattr(np, kind if kind not in ("max", "min") else "a" + kind)(x, axis=np_axis, keepdims=keepdims)
    assert Y.shape == np.shape(want) and Y.name == kind
    np.testing.assert_allclose(ta.evaluate(Y, {X: x}), want, rtol=1e-12)


def test_sum_of_integers_and_reduce_axis_names():
    X = ta.placeholder((2, 3), "int32", name="X")
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = ta.evaluate(topi.sum(X, axis=0), {X: x})
    assert out.dtype == np.int32 and out.tolist() == [3, 5, 7]
    text = ta.PrintTensorRecursively(topi.sum(X, axis=(0, 1)))
    assert "axes (k0 : [0, 1], k1 : [0, 2])" in text


def test_max_keepdims_broadcasts_back(rng):
    X = ta.placeholder((3, 4), "float64", name="X")
    x = rng.standard_normal((3, 4))
    Y = X - topi.max(X, axis=1, keepdims=True)
    np.testing.assert_allclose(ta.evaluate(Y, {X: x}), x - x.max(1, keepdims=True))
