"""An integer constant past int32 (``X[(i * 2147516416 + 1) % 3]``).

``ta.evaluate`` made every integer constant an int32 NumPy value and raised NumPy's
``OverflowError`` on 2147516416, while the kernel accepted the program (its index arithmetic
is 64-bit).  Now such a constant is exact index arithmetic in both: the operation it meets is
computed in 64 bits, also when the other operand is int32 data read from a tensor, and the
int32 result is converted where it is stored.  The oracle is Python's integer arithmetic.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta

BIG = 2147516416  # 2**31 + 32768


def _both(outs, ins, args):
    return [ta.build(outs, ins)(*args), ta.evaluate(outs, dict(zip(ins, args)))[0]]


def test_index_with_a_constant_past_int32():
    X = ta.placeholder((3,), name="X")
    Y = ta.compute((5,), lambda i: X[(i * BIG + 1) % 3], name="Y")
    x = np.array([10.0, 20.0, 30.0], np.float32)
    want = x[[(i * BIG + 1) % 3 for i in range(5)]]
    for got in _both([Y], [X], [x]):
        np.testing.assert_array_equal(got, want)


def test_int32_data_meeting_a_constant_past_int32_is_exact_until_stored():
    """``N[i] + 3e9 < 0``, ``(N[i] + 3e9) // 7`` and ``(N[i] - 3e9) % 1000`` are exact 64-bit
    integer arithmetic; ``N[i] + 3e9`` stored in int32 wraps as NumPy's ``astype``."""
    big = 3_000_000_000
    N = ta.placeholder((6,), "int32", name="N")
    C = ta.compute((6,), lambda i: ta.select(N[i] + big < 0, 1.0, 2.0), name="C")
    D = ta.compute((6,), lambda i: ta.cast("float64", (N[i] + big) // 7), name="D")
    M = ta.compute((6,), lambda i: (N[i] - big) % 1000, name="M")
    S = ta.compute((6,), lambda i: N[i] + big, name="S")
    n = np.array([-5, 0, 7, 2**31 - 1, -2**31, 123456], np.int32)
    wide = [int(v) for v in n]
    want = {
        C: np.array([1.0 if v + big < 0 else 2.0 for v in wide], np.float32),
        D: np.array([float((v + big) // 7) for v in wide]),
        M: np.array([(v - big) % 1000 for v in wide], np.int32),
        S: np.array([v + big for v in wide], np.int64).astype(np.int32),
    }
    for T, w in want.items():
        for got in _both([T], [N], [n]):
            np.testing.assert_array_equal(got, w, err_msg=T.name)
