"""Reads whose dimensions are the digits of one value address that value (codegen/llvm/expr.py
``recombine_digits``): a flattened tensor read as ``X[i, j // (H W), (j // W) % H, j % W]`` is
``X[i, j]``, with no division in the address, so a dense layer over a flattened activation
packs its side as a plain matrix.  Oracles: NumPy reshapes and floor arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.codegen.llvm.expr import recombine_digits

import tensorad as ta
from tensorad.ir.expr import var


def test_three_digits_of_one_value_are_that_value():
    i, j = var("i", 0, 4), var("j", 0, 3136)
    index = (i, j // 196, (j // 14) % 14, j % 14)
    assert recombine_digits(index, (3136, 196, 14, 1)) == [(i, 3136), (j, 1)]
    # two low digits: one remainder; strides that do not match keep every digit
    assert recombine_digits(((j // 14) % 14, j % 14), (14, 1)) == [(j % 196, 1)]
    assert len(recombine_digits(((j // 14) % 14, j % 14), (15, 1))) == 2


@pytest.mark.parametrize("shift", [0, -3, 5])
def test_digit_reads_match_numpy_floor_arithmetic(shift):
    b, c = 3, 4
    X = ta.placeholder((b, c), "float64", "X")
    n = 2 * b * c + 5  # wraps past the tensor more than once
    Y = ta.compute((n,), lambda j: X[((j + shift) // c) % b, (j + shift) % c] * 2.0, "Y")
    x = np.arange(b * c, dtype=np.float64).reshape(b, c)
    js = np.arange(n) + shift
    want = 2.0 * x[(js // c) % b, js % c]
    np.testing.assert_array_equal(ta.build([Y], [X])(x), want)
    np.testing.assert_array_equal(ta.evaluate(Y, {X: x}), want)


def test_dense_over_a_flattened_activation_gradient(rng):
    nn = ta.topi.nn
    H = ta.placeholder((64, 4, 7, 7), "float32", "H")
    W = ta.placeholder((10, 196), "float32", "W")
    f = ta.function(nn.dense(nn.flatten(H), W), [H, W])
    h, w = rng.normal(size=H.shape).astype(np.float32), rng.normal(size=W.shape).astype(np.float32)
    g = rng.normal(size=(64, 10)).astype(np.float32)
    gh, gw = f.backward(f.forward(h, w)[1], g)
    np.testing.assert_allclose(gw, g.T @ h.reshape(64, -1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gh, (g @ w).reshape(H.shape), rtol=1e-4, atol=1e-4)
