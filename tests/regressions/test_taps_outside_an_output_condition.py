"""A sum over a few taps whose condition also bounds the output axes alone (``b == 4 and a <= 2``) is
zero off a part of the output box: the unrolled-taps strategy would store every point of the box
(``0 + 0`` outside), the plain loops sum only where the condition holds and fill the rest, so under
fast math the work is that of the loops, as without it (the work a size-variable program bound at a
size and the program written at that size share)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


@pytest.mark.parametrize("target", ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"])
def test_taps_outside_an_output_condition_are_not_stored(target):
    X = ta.placeholder((9, 5), "float32", "X")
    W = ta.placeholder((2,), "float32", "W")
    t = ta.reduce_axis((0, 2), "t")
    Y = ta.compute((7, 5), lambda a, b: ta.sum(X[a + t, b] * W[t], axis=t, where=(b == 4) & (a <= 2)),
                   name="Y")
    assert ta.lower(Y, [X, W], target=target).work == 3 * 2  # 3 points, 2 taps each
    assert ta.lower(Y, [X, W], target=target, fastmath=False).work == 3 * 2


def test_taps_outside_an_output_condition_values():
    X = ta.placeholder((9, 5), "float64", "X")
    W = ta.placeholder((2,), "float64", "W")
    t = ta.reduce_axis((0, 2), "t")
    Y = ta.compute((7, 5), lambda a, b: ta.sum(X[a + t, b] * W[t], axis=t, where=(b == 4) & (a <= 2)),
                   name="Y")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((9, 5)), rng.standard_normal(2)
    want = np.zeros((7, 5))
    want[:3, 4] = x[0:3, 4] * w[0] + x[1:4, 4] * w[1]
    np.testing.assert_allclose(ta.build(Y, [X, W])(x, w), want, rtol=1e-12)
