"""``evaluate_in_order(..., rounded_math=True)``: float32 math functions computed in float64
and rounded once, the fuzz oracle's allowance for a kernel whose math is correctly rounded
where NumPy's float32 routine is an ulp off (``tanh(-9.517245) // -0.5``)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.reference import evaluate_in_order


def test_tanh_under_a_floor_follows_the_rounded_value():
    x = ta.placeholder((1,), "float32", "x")
    y = ta.compute((1,), lambda i: ta.tanh(x[i]) // -0.5, name="y")
    feed = {x: np.array([-9.517245], np.float32)}
    assert np.float32(np.tanh(np.float64(feed[x][0]))) == -1.0  # the correctly rounded tanh
    assert evaluate_in_order([y], feed, "numpy", rounded_math=True)[0][0] == 2.0
    assert ta.evaluate([y], feed)[0][0] in (1.0, 2.0)  # (NumPy's float32 tanh: either)


@pytest.mark.parametrize("fn, lo, hi", [(ta.exp, -100, 80), (ta.log, 1e-30, 1e30), (ta.tanh, -12, 12),
                                         (ta.sigmoid, -30, 30), (ta.sin, -100, 100), (ta.cos, -100, 100),
                                         (ta.erf, -5, 5)])
def test_float32_math_is_the_float64_value_rounded_once(rng, fn, lo, hi):
    x = ta.placeholder((512,), "float32", "x")
    y = ta.compute((512,), lambda i: fn(x[i]), name="y")
    xv = rng.uniform(lo, hi, 512).astype(np.float32)
    x64 = ta.placeholder((512,), "float64", "x64")
    y64 = ta.compute((512,), lambda i: fn(x64[i]), name="y64")
    want = ta.evaluate([y64], {x64: xv.astype(np.float64)})[0].astype(np.float32)
    got = evaluate_in_order([y], {x: xv}, "numpy", rounded_math=True)[0]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_float64_programs_are_unchanged(rng):
    x = ta.placeholder((64,), "float64", "x")
    y = ta.compute((64,), lambda i: ta.tanh(x[i]) * ta.exp(x[i]), name="y")
    feed = {x: rng.uniform(-3, 3, 64)}
    np.testing.assert_array_equal(evaluate_in_order([y], feed, "numpy", rounded_math=True)[0],
                                  ta.evaluate([y], feed)[0])

