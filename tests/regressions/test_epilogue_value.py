"""Epilogue fusion of a multi-value reduction that has one output.

The forward-mode derivative of an argmax's value is a 4-value reduction (index and value
tangents, index and value) whose single output is value 1; the fused consumer stored
accumulator 0 (the integer index tangent) into the float output.  Oracles: ``fuse=False``,
``ta.evaluate`` and the NumPy formula ``U[i, argmax_k X[i, k]]``."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _argmax():
    def fcombine(x, y):
        keep = x[1] >= y[1]
        return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])

    def fidentity(t0, t1):
        return ta.const(-1, t0), ta.const(-3.0e38, t1)

    return ta.comm_reducer(fcombine, fidentity, name="argmax")


@pytest.mark.parametrize("consumer", [lambda v: v, lambda v: v * 2.0 + 1.0])
def test_jvp_of_argmax_value_with_fused_epilogue(consumer, rng):
    n, m = 6, 9
    X = ta.placeholder((n, m), name="X")
    U = ta.placeholder((n, m), name="U")
    k = ta.reduce_axis((0, m), name="k")
    _, V = ta.compute((n,), lambda i: _argmax()((k, X[i, k]), axis=k), name="am")
    Y = ta.compute((n,), lambda i: consumer(V[i]), name="Y")
    J = ta.jvp(Y, [X], [U])
    x = rng.uniform(-1, 1, (n, m)).astype(np.float32)
    u = rng.uniform(-1, 1, (n, m)).astype(np.float32)
    slope = 2.0 if consumer(1.0) == 3.0 else 1.0
    want = slope * u[np.arange(n), x.argmax(1)]
    fused = ta.build([J], [X, U])
    assert "fused" in str(fused.lowered)  # the defect's path: the consumer is the epilogue
    np.testing.assert_allclose(fused(x, u), want, rtol=1e-6)
    np.testing.assert_allclose(ta.build([J], [X, U], fuse=False)(x, u), want, rtol=1e-6)
    np.testing.assert_allclose(ta.evaluate([J], {X: x, U: u})[0], want, rtol=1e-6)


def test_fused_epilogue_of_second_output_in_float64(rng):
    """A 2-value (min, argmin-like) reduction whose op has only its value as output: the
    consumer must read the float64 accumulator, not the int32 one."""
    n, m = 4, 5
    X = ta.placeholder((n, m), "float64", name="X")
    k = ta.reduce_axis((0, m), name="k")

    def fcombine(x, y):
        keep = x[1] <= y[1]
        return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])

    def fidentity(t0, t1):
        return ta.const(-1, t0), ta.const(np.inf, t1)

    argmin = ta.comm_reducer(fcombine, fidentity, name="argmin")
    _, V = ta.compute((n,), lambda i: argmin((k, X[i, k]), axis=k), name="am")
    x = rng.uniform(-1, 1, (n, m))
    U = ta.placeholder((n, m), "float64", name="U")
    Y = ta.compute((n,), lambda i: ta.exp(V[i]), name="Y")
    J = ta.jvp(Y, [X], [U])
    u = rng.uniform(-1, 1, (n, m))
    j = x.argmin(1)
    want = np.exp(x[np.arange(n), j]) * u[np.arange(n), j]
    np.testing.assert_allclose(ta.build([J], [X, U])(x, u), want, rtol=1e-12)
    np.testing.assert_allclose(ta.build([J], [X, U], fuse=False)(x, u), want, rtol=1e-12)
