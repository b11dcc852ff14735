"""An ``int32`` tensor's value does not depend on whether it is stored.  Its body may compute
exactly in 64 bits (an index variable among its operands) and its store wraps the result to
int32; inlined into a reader, the exact value was read instead:
``k = int32(i * -3 - 2) - int32(x * 1e10)`` read through a sigmoid and summed gave 45 in
evaluate and in a build that stored ``k``, 18 optimized or built with ``k`` inlined.  Such a
tensor now keeps its buffer (``tensorad.ir.intrange.wraps_where_stored``), in every inliner."""

import numpy as np
import pytest

import tensorad as ta


def _program():
    X = ta.placeholder((2,), "float64", name="X")
    K = ta.compute((5, 2), lambda i, j: ta.cast("int32", i * -3 - 2) - ta.cast("int32", X[j] * 1e10),
                   name="K")
    r = ta.reduce_axis((0, 5), name="r")
    c = ta.reduce_axis((0, 2), name="c")
    S = ta.compute((), lambda: ta.sum(ta.sigmoid(ta.cast("float64", K[r, c]) * 1e-9), axis=[r, c]), name="S")
    return X, K, S


def _want(x: np.ndarray) -> float:
    sat = np.clip(np.trunc(x * 1e10), -(2**31), 2**31 - 1).astype(np.int64)
    k = ((np.arange(5)[:, None] * -3 - 2) - sat[None, :] + 2**31) % 2**32 - 2**31  # the store wraps
    return float(np.sum(1 / (1 + np.exp(-k * 1e-9))))


@pytest.mark.parametrize("x", [[-0.9, 1.07], [0.3, -0.2]])
def test_an_int32_tensor_reads_the_same_inlined_or_stored(x):
    X, K, S = _program()
    x = np.array(x)
    want = _want(x)
    np.testing.assert_allclose(ta.evaluate([S], {X: x})[0], want, rtol=1e-12)
    np.testing.assert_allclose(ta.build([S], [X])(x), want, rtol=1e-12)  # K not an output
    np.testing.assert_allclose(ta.build([K, S], [X])(x)[1], want, rtol=1e-12)  # K stored
    opt = ta.OptimizeAndLiftNonzeronessConditions(S)
    np.testing.assert_allclose(ta.evaluate([opt], {X: x})[0], want, rtol=1e-12)
    np.testing.assert_allclose(ta.build([opt], [X])(x), want, rtol=1e-12)


def test_index_arithmetic_within_int32_is_still_inlined():
    X = ta.placeholder((8,), "float64", name="X")
    K = ta.compute((8,), lambda i: ta.cast("int32", i * 3 + 1) % 8, name="K")
    Y = ta.compute((8,), lambda i: ta.cast("float64", K[i]) * X[i], name="Y")
    text = str(ta.lower([Y], [X]))
    assert "inlined: K" in text and "allocate K" not in text, text


def test_inline_non_reductions_keeps_a_wrapping_int32_tensor():
    """``ta.InlineNonReductions`` (the seed's manual path) asks the same question: inlined, K
    gave 5.0 where the program's value is 8.95 (evaluate and build alike)."""
    X, K, S = _program()
    x = np.array([-0.9, 1.07])
    inl = ta.InlineNonReductions(S, [K])
    np.testing.assert_allclose(ta.evaluate([inl], {X: x})[0], _want(x), rtol=1e-12)
    np.testing.assert_allclose(ta.build([inl], [X])(x), _want(x), rtol=1e-12)
    Y = ta.compute((8,), lambda i: ta.cast("int32", i * 3 + 1) % 8, name="Y")
    Z = ta.compute((8,), lambda i: ta.cast("float64", Y[i]) * 2.0, name="Z")
    assert "Y" not in str(ta.InlineNonReductions(Z, [Y]).op.body[0])  # within int32: inlined
