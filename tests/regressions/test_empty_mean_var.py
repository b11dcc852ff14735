"""``ta.topi.mean`` and ``ta.topi.var`` over no element, or with no degree of freedom left,
give NumPy's and PyTorch's values (not a ``ValueError``).

The mean over no element is ``0 / 0``, NaN; the variance with ``M <= ddof`` divides its sum
of squares by zero: ``inf``, or NaN where that sum is 0.  Over no element the input is empty,
so is its gradient, and ``J u`` is an empty sum, 0.  With one element and ``ddof=1`` PyTorch's
gradient is NaN, as ours.  Oracles: NumPy's ``mean``/``var`` and PyTorch's backward.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorad as ta


def _numpy(kind, x, axis, ddof):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.mean(x, axis=axis) if kind == "mean" else np.var(x, axis=axis, ddof=ddof)


def _np_dtype(dtype):
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("kind, shape, axis, ddof", [
    ("mean", (0, 3), 0, 0), ("mean", (2, 0), None, 0), ("var", (0, 3), 0, 0), ("var", (4, 0), (0, 1), 1),
    ("var", (1, 3), 0, 1), ("var", (2, 3), 0, 2), ("var", (2, 3), 0, 5),
])
def test_forward_is_numpys(dtype, kind, shape, axis, ddof):
    X = ta.placeholder(shape, dtype, name="X")
    Y = ta.topi.mean(X, axis=axis) if kind == "mean" else ta.topi.var(X, axis=axis, ddof=ddof)
    x = (np.arange(np.prod(shape)).reshape(shape) % 2 * 1.5).astype(_np_dtype(dtype))  # (equal columns: NaN)
    want = _numpy(kind, x.astype(np.float64), axis, ddof)
    for got in (ta.build([Y], [X])(x), ta.build([Y], [X], fastmath=False)(x), ta.evaluate(Y, {X: x})):
        np.testing.assert_array_equal(np.asarray(got).astype(np.float64), want)


@pytest.mark.parametrize("kind, shape, axis, ddof", [("mean", (0, 3), 0, 0), ("var", (0, 3), 0, 0),
                                                     ("var", (1, 3), 0, 1)])
def test_gradients_are_pytorchs(kind, shape, axis, ddof):
    import torch  # a test dependency (`make test` installs the torch extra): missing, it fails
    X = ta.placeholder(shape, "float64", name="X")
    Y = ta.topi.mean(X, axis=axis) if kind == "mean" else ta.topi.var(X, axis=axis, ddof=ddof)
    H, U = ta.placeholder(Y.shape, "float64", name="H"), ta.placeholder(shape, "float64", name="U")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    h = np.linspace(0.5, 1.5, int(np.prod(Y.shape)))
    xt = torch.tensor(x, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "degrees of freedom is <= 0"
        yt = xt.mean(axis) if kind == "mean" else xt.var(axis, correction=ddof)
    yt.backward(torch.tensor(h))
    np.testing.assert_array_equal(np.asarray(ta.build([g], [X, H])(x, h)), xt.grad.numpy())
    if not x.size:  # J is empty: J u is 0 (and u . J^T h = 0 with it)
        t = ta.jvp(Y, [X], [U])
        np.testing.assert_array_equal(np.asarray(ta.build([t], [X, U])(x, x)), np.zeros(Y.shape))
