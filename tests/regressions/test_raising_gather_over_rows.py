"""A program of independent rows over a size variable that gathers with ``mode="raise"`` (an embedding
lookup of a batch of any size) is built per size: its kernel reports a bad index through a record that
the generic kernel's row driver does not pass, so ``ta.build`` gives a working callable, with the
reason in ``.why``, that computes the gather and raises ``IndexError`` on an index out of range."""

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


def test_raising_gather_over_rows_runs_and_raises():
    E, Idx, Y = _embedding("raise")
    kernel = ta.build(Y, [E, Idx])
    assert "mode='raise'" in kernel.why
    for rows in (1, 3, 33):
        idx = (np.arange(rows) * 7 % 5).astype(np.int32)
        np.testing.assert_array_equal(kernel(E_VALUES, idx), E_VALUES[idx])
    with pytest.raises(IndexError, match="gather index out of range"):
        kernel(E_VALUES, np.array([0, 5, 1], np.int32))


def test_clipping_gather_over_rows_stays_generic():
    E, Idx, Y = _embedding("clip")
    kernel = ta.build(Y, [E, Idx])
    assert kernel.generic
    idx = np.array([0, 9, -2], np.int32)
    np.testing.assert_array_equal(kernel(E_VALUES, idx), E_VALUES[np.clip(idx, 0, 4)])
