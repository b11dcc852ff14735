"""``ta.compute`` with Python's usual loop-variable capture: a defaulted parameter is a value,
not an index argument.  Oracle: NumPy slicing of the same array."""

import numpy as np
import pytest

import tensorad as ta


def test_defaulted_parameters_are_captured_values_not_indices():
    X = ta.placeholder((2, 3, 4), "float64", "X")
    steps = [ta.compute((2, 4), lambda i, k, s=s: X[i, s, k], name=f"step{s}") for s in range(3)]
    x = np.arange(24.0).reshape(2, 3, 4)
    got = ta.build(steps, [X])(x)
    for s, g in enumerate(got):
        np.testing.assert_array_equal(g, x[:, s, :])


def test_a_missing_index_argument_is_still_an_error():
    X = ta.placeholder((2, 3), "float64", "X")
    with pytest.raises(TypeError, match="fcompute takes 2 index arguments but the shape has 3"):
        ta.compute((2, 3, 4), lambda i, s=0: X[i, s])
