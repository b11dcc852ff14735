"""``ta.topi`` layers on tensors with an axis of extent 0.

``layer_norm`` of a ``(3, 0)`` tensor raised ``ZeroDivisionError`` while defining (its scale
``1 / 0``), and ``reshape((3, 0) -> (0, 3))`` too (the flat index divided by an extent 0);
NumPy and PyTorch return empty arrays.  The oracle is NumPy's shapes; the gradients are empty
or zero.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

LAYERS = {
    "layer_norm": (lambda x: ta.topi.nn.layer_norm(x, ndim=1), (3, 0)),
    "reshape": (lambda x: ta.topi.reshape(x, (0, 3)), (0, 3)),
    "reshape 3-d": (lambda x: ta.topi.reshape(x, (4, 0, 1)), (4, 0, 1)),
    "batch_norm": (lambda x: ta.topi.nn.batch_norm(x), (3, 0)),
}


@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_an_empty_tensor_goes_through(kind):
    layer, want = LAYERS[kind]
    x = ta.placeholder((3, 0), "float64", name="x")
    w = ta.placeholder((2,), "float64", name="w")
    y = layer(x)
    assert tuple(y.shape) == want == np.zeros((3, 0)).reshape(want).shape
    z = ta.compute((2,), lambda i: w[i] * 2.0, name="z")  # (an empty output beside a full one)
    got = ta.build([y, z], [x, w])(np.zeros((3, 0)), np.array([1.0, -1.0]))
    assert got[0].shape == want
    np.testing.assert_array_equal(got[1], [2.0, -2.0])
    h = ta.placeholder(want, "float64", name="h")
    (g,) = ta.JacobianRecursive(y, [x], h)
    assert ta.build([g], [x, h])(np.zeros((3, 0)), np.zeros(want)).shape == (3, 0)
