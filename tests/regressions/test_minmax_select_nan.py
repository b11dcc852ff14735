"""A float select shaped like a min/max keeps its NaN behaviour through LLVM's optimizer.

An argmax combiner (``keep = acc >= v``) over a guarded read whose default is
-1.0, with one NaN among the values.  In order, the NaN is taken (``-1 >= NaN`` is false) and
then dropped again (``NaN >= -1`` is false): the result is -1.  LLVM 22's instcombine folded the
second compare of the unrolled chain as if NaN could not arise and returned NaN, at every opt
level above 0, with or without fast-math.  The kernel freezes such selects
(codegen/llvm/expr.freeze); the expected values are written here with Python's comparisons.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import tensorad as ta


def _argmax_combine(x, y):
    keep = x[1] >= y[1]
    return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])


ARGMAX = ta.comm_reducer(_argmax_combine, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)),
                         name="argmax")


def _in_order(values):
    best_i, best_v = -1, -math.inf
    for i, v in values:
        if not best_v >= v:
            best_i, best_v = i, v
    return best_i, best_v


@pytest.mark.parametrize("opt_level", [1, 2, 3])
@pytest.mark.parametrize("fastmath", [True, False])
def test_argmax_over_a_guarded_default_with_a_nan(opt_level, fastmath):
    X = ta.placeholder((4,), "float32", "X")
    r = ta.reduce_axis((-1, 4), "r")
    # r = 1 reads X[i]; every other r gives the default -1
    idx, val = ta.compute((4,), lambda i: ARGMAX((r, 1.0 / ta.if_then_else(r == 1, X[i], -1.0)), axis=r),
                          name="Y")
    x = np.array([np.nan, 0.5, -0.25, np.inf], np.float32)
    got_i, got_v = ta.build([idx, val], [X], opt_level=opt_level, fastmath=fastmath)(x)
    for k in range(4):
        want_i, want_v = _in_order([(r, 1.0 / float(x[k]) if r == 1 and x[k] != 0 else -1.0)
                                    for r in range(-1, 4)])
        assert got_i[k] == want_i and (got_v[k] == np.float32(want_v) or
                                       (math.isnan(want_v) and np.isnan(got_v[k]))), k


def test_a_minmax_select_still_vectorizes():
    A = ta.placeholder((4096,), "float32", "A")
    B = ta.placeholder((4096,), "float32", "B")
    Y = ta.compute((4096,), lambda i: ta.select(A[i] >= B[i], A[i], B[i]), name="Y")
    kern = ta.build([Y], [A, B], num_threads=1, target="llvm -mcpu=haswell")
    assert "freeze" in kern.llvm_ir_unoptimized
    assert re.search(r"v(max|blendv|cmp)\w*ps\s.*%ymm", kern.asm)  # 8 lanes a instruction
    a = np.random.default_rng(0).normal(size=4096).astype(np.float32)
    b = np.random.default_rng(1).normal(size=4096).astype(np.float32)
    a[::7] = np.nan
    np.testing.assert_array_equal(kern(a, b), np.where(a >= b, a, b))
