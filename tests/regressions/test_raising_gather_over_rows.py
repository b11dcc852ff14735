"""A program of independent rows over a size variable that gathers with ``mode="raise"`` (an embedding
lookup of a batch of any size) is one generic kernel: each block's kernel reports a bad index through a
record that the row driver passes it and reads after the block, stopping there, so a call raises
``IndexError`` naming the row of the call (not of its block) where the index was read, and the next
call runs.  It was built per size: the driver passed no record."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

E_VALUES = np.arange(15, dtype=np.float32).reshape(5, 3)


def _embedding(mode):
    n = ta.size_var("n")
    E = ta.placeholder((5, 3), "float32", name="E")
    Idx = ta.placeholder((n,), "int32", name="I")
    return E, Idx, ta.compute((n, 3), lambda i, j: E.take(Idx[i], j, mode=mode), name="Y")


@pytest.mark.parametrize("threads", [1, 2])
def test_raising_gather_over_rows_runs_and_raises(threads):
    E, Idx, Y = _embedding("raise")
    kernel = ta.build(Y, [E, Idx], num_threads=threads)
    assert kernel.generic and kernel.why == ""
    for rows in (1, 3, 33, 300):
        idx = (np.arange(rows) * 7 % 5).astype(np.int32)
        np.testing.assert_array_equal(kernel(E_VALUES, idx), E_VALUES[idx])
    for rows, bad in ((3, 1), (9, 8), (300, 270), (300, 299)):
        idx = np.zeros(rows, np.int32)
        idx[bad] = 5
        with pytest.raises(IndexError, match=rf"gather index out of range.*at I\[{bad}\]"):
            kernel(E_VALUES, idx)
        np.testing.assert_array_equal(kernel(E_VALUES, idx[:bad]), E_VALUES[idx[:bad]])


def test_clipping_gather_over_rows_stays_generic():
    E, Idx, Y = _embedding("clip")
    kernel = ta.build(Y, [E, Idx])
    assert kernel.generic
    idx = np.array([0, 9, -2], np.int32)
    np.testing.assert_array_equal(kernel(E_VALUES, idx), E_VALUES[np.clip(idx, 0, 4)])
