"""Index arithmetic is exact.

``if_then_else(i * 100000 < 10, A[i * 100000], -1.0)`` computed its guard in int32 (it wraps
to negative values, so the guard passed) and its address in int64: a segfault.  And
``A[(i * 100000) % 7]``: the kernel (int64) and ``ta.evaluate`` (int32) disagreed on 8,525 of
30,000 elements.  The oracle is Python's integer arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

N = 30000


def _both(outs, ins, args):
    return ta.build(outs, ins)(*args), ta.evaluate(outs, dict(zip(ins, args)))[0]


def test_guard_with_a_large_index_product_does_not_wrap():
    A = ta.placeholder((N,), name="A")
    Y = ta.compute((N,), lambda i: ta.if_then_else(i * 100000 < 10, A[i * 100000], -1.0), name="Y")
    a = np.arange(N, dtype=np.float32) + 1
    want = np.array([a[i * 100000] if i * 100000 < 10 else -1.0 for i in range(N)], np.float32)
    for got in _both([Y], [A], [a]):
        np.testing.assert_array_equal(got, want)


def test_modulo_of_a_large_index_product_is_python_modulo():
    A = ta.placeholder((N,), name="A")
    Y = ta.compute((N,), lambda i: A[(i * 100000) % 7], name="Y")
    a = np.arange(N, dtype=np.float32)
    want = a[[(i * 100000) % 7 for i in range(N)]]
    for got in _both([Y], [A], [a]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_large_index_value_cast_to_float_is_exact(dtype):
    """``float(i * i * 3001)`` for ``i < 30000`` reaches 2.7e12: exact in float64, rounded once
    (not wrapped first) in float32; a guard on it is exact too."""
    Y = ta.compute((N,), lambda i: ta.select(i * i * 3001 > 2_000_000_000 * 1,
                                             ta.cast(dtype, i * i * 3001), ta.const(-1.0, dtype)),
                   name="Y")
    ii = np.arange(N, dtype=np.int64)
    v = ii * ii * 3001
    want = np.where(v > 2_000_000_000, v.astype(dtype), -1.0).astype(dtype)
    got, ev = ta.build([Y], [])(), ta.evaluate([Y], {})[0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ev, want)


def test_index_value_stored_in_int32_wraps_like_numpy_astype():
    """An exact index value stored in an int32 tensor is converted as NumPy's ``astype``;
    int32 tensor values among themselves still wrap like NumPy's."""
    Ii = ta.placeholder((N,), "int32", name="I")
    Y = ta.compute((N,), lambda i: Ii[i] + i * 100000, name="Y")
    Z = ta.compute((N,), lambda i: (Ii[i] * 7) % 1000 + (i * 100000) % 1000, name="Z")
    ii = np.random.default_rng(0).integers(-2**31, 2**31, N).astype(np.int32)
    big = np.arange(N, dtype=np.int64) * 100000
    want_y = (ii.astype(np.int64) + big).astype(np.int32)
    want_z = ((ii * np.int32(7)) % 1000 + big % 1000).astype(np.int32)
    y, z = ta.build([Y, Z], [Ii])(ii)
    ey, ez = ta.evaluate([Y, Z], {Ii: ii})
    for got, want in ((y, want_y), (ey, want_y), (z, want_z), (ez, want_z)):
        np.testing.assert_array_equal(got, want)


def test_index_arithmetic_beyond_64_bits_is_refused():
    """``i * 10**10 * 10**10`` reaches 3e24: no 64-bit kernel or evaluator is exact there, so
    both refuse it, naming the expression (instead of wrapping silently)."""
    A = ta.placeholder((7,), name="A")
    Y = ta.compute((N,), lambda i: A[(i * 10**10 * 10**10) % 7], name="Y")
    with pytest.raises(ValueError, match=r"index arithmetic .* can reach .* beyond the 64-bit"):
        ta.build([Y], [A])
    with pytest.raises(ValueError, match=r"evaluate: Y: index arithmetic .* can reach"):
        ta.evaluate([Y], {A: np.zeros(7, np.float32)})
