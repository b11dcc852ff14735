"""A NumPy scalar given to ``ta.const`` keeps its dtype.

``ta.const(np.int64(3))`` was a ``float32`` constant (only Python ``bool`` and ``int`` had a rule), so
``X[i] * ta.const(np.int64(3))`` over an ``int64`` ``X`` computed in float32 and lost every bit past
the 24th; ``ta.const(np.bool_(True))`` was the float ``1.0``.  A NumPy scalar now keeps its type, as
it already did where it meets a tensor (``X[i] * np.int64(3)``).

Oracle: NumPy integer arithmetic written in the test."""

import numpy as np
import pytest

import tensorad as ta

BIG = np.array([2**40 + 1, -(2**41) - 3, 7, 2**53 + 1], dtype=np.int64)


@pytest.mark.parametrize("scalar", [np.int64(3), np.int32(3)])
def test_a_numpy_integer_keeps_its_type(scalar):
    c = ta.const(scalar)
    assert c.dtype == np.dtype(type(scalar)).name
    X = ta.placeholder((4,), name="X", dtype="int64")
    Y = ta.compute((4,), lambda i: X[i] * c, name="Y")
    assert Y.dtype == "int64"
    np.testing.assert_array_equal(ta.build([Y], [X])(BIG), BIG * 3)


def test_numpy_bool_and_float32_scalars_keep_their_type():
    assert ta.const(np.bool_(True)).dtype == "bool"
    assert ta.const(np.float32(0.1)).dtype == "float32"
    assert ta.const(np.float32(0.1)).arg == float(np.float32(0.1))
    X = ta.placeholder((2,), name="X", dtype="float64")
    Y = ta.compute((2,), lambda i: ta.select(ta.const(np.bool_(True)), X[i], 0.0), name="Y")
    np.testing.assert_array_equal(ta.build([Y], [X])(np.array([0.5, -2.0])), [0.5, -2.0])


def test_an_unsupported_numpy_scalar_is_a_clear_error():
    with pytest.raises(TypeError, match="unsupported dtype 'uint8'"):
        ta.const(np.uint8(3))
