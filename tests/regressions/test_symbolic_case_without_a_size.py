"""A derivative over two sizes whose case no longer reads one of them builds and runs.

The gradient of ``mean(softmax(X @ W))`` with ``X`` of shape ``(b, L, 7)`` is optimized per case of
``b``'s values; in a case the weights' gradient is proved zero and reads no ``b``.  Binding that case
at ``b`` raised ``ValueError: bind: the program has no size named b`` at every size, in any build that
included ``dW``; and ``ta.function``'s backward for ``X`` alone, whose inputs (the head) hold neither
size, could not read its sizes.  Binding now binds only the sizes a program has (a size it is given
and lacks binds nothing; one it has and is not given is still an error).  Oracle: NumPy float64
formulas written here; the squared softmax's gradients are not zero.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad import topi

PAIRS = ((1, 2), (3, 2), (2, 3))  # (b = 1, a case of its own; two lengths, each a kernel)


def _program(power: int):
    b, L = ta.size_var("b"), ta.size_var("L")
    X, W = ta.placeholder((b, L, 7), "float64", "X"), ta.placeholder((7, 3), "float64", "W")
    S = topi.nn.softmax(topi.matmul(X, W))
    if power == 2:
        S = ta.compute(S.shape, lambda *i: S[i] * S[i], name="sq")
    return topi.mean(S), X, W


def _numpy(x, w, h, power):
    """``mean(softmax(x @ w) ** power)`` and its gradients by ``x`` and ``w`` at head ``h``."""
    z = x @ w
    e = np.exp(z - z.max(-1, keepdims=True))
    s = e / e.sum(-1, keepdims=True)
    ds = h * power * s ** (power - 1) / s.size
    dz = s * (ds - (ds * s).sum(-1, keepdims=True))
    return (s ** power).mean(), dz @ w.T, np.einsum("blk,blj->kj", x, dz)


@pytest.mark.parametrize("power", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_build_of_the_weights_gradient_alone_and_with_the_others(power):
    y, X, W = _program(power)
    H = ta.placeholder((), "float64", "H")
    dX, dW = ta.gradient(y, [X, W], H)
    alone, every = ta.build([dW], [X, W, H]), ta.build([y, dX, dW], [X, W, H])
    for b, L in PAIRS:
        rng = np.random.default_rng(10 * b + L)
        x, w, h = rng.standard_normal((b, L, 7)), rng.standard_normal((7, 3)), np.array(rng.standard_normal())
        want = _numpy(x, w, h, power)
        np.testing.assert_allclose(alone(x, w, h), want[2], rtol=1e-10, atol=1e-14)
        for got, ref in zip(every(x, w, h), want, strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-14)
    with pytest.raises(ValueError, match="no value given for size b"):
        ta.bind(dW, L=3)
    with pytest.raises(ValueError, match="the program has no size named m"):
        ta.bind(dW, b=2, L=3, m=1)


@pytest.mark.slow
@pytest.mark.parametrize("power", [1, 2])
def test_function_of_each_input_alone_and_of_both(power):
    y, X, W = _program(power)
    for wrt, picks in (([W], [2]), ([X], [1]), ([X, W], [1, 2])):
        f = ta.function(y, [X, W], wrt=wrt)
        for b, L in PAIRS:
            rng = np.random.default_rng(10 * b + L)
            x, w, h = rng.standard_normal((b, L, 7)), rng.standard_normal((7, 3)), rng.standard_normal()
            want = _numpy(x, w, h, power)
            value, residuals = f.forward(x, w)
            np.testing.assert_allclose(value, want[0], rtol=1e-12)
            for got, k in zip(f.backward(residuals, np.array(h)), picks, strict=True):
                np.testing.assert_allclose(got, want[k], rtol=1e-10, atol=1e-14)
