"""float32 sums accumulated in blocks (:mod:`tensorad.codegen.loops.cascade`): rounding error
that grows like log n, as NumPy's pairwise sum, by default and with ``fastmath=False``; a
fixed order with ``fastmath=False`` (the same bits on every target); the same ``work``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorad as ta

EPS = 2.0 ** -24  # float32's unit roundoff


def _total(n: int, dtype: str = "float32"):
    X = ta.placeholder((n,), dtype, "X")
    k = ta.reduce_axis((0, n), "k")
    return ta.compute((), lambda: ta.sum(X[k], axis=k), name="Y"), X


def _channels(batch: int, channels: int, plane: int):
    """Batch-norm statistics: ``Y[c] = sum_{n, s} X[n, c, s]``."""
    X = ta.placeholder((batch, channels, plane), "float32", "X")
    n = ta.reduce_axis((0, batch), "n")
    s = ta.reduce_axis((0, plane), "s")
    return ta.compute((channels,), lambda c: ta.sum(X[n, c, s], axis=[n, s]), name="Y"), X


def _relative(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want) / np.abs(want)))


@pytest.mark.parametrize("n", [1 << 22, 1 << 24])
def test_a_long_float32_sum_is_as_accurate_as_numpys(n):
    # The case: 2**22 values of 0.1 summed one after another lose 4e-2 of the result
    # (1e-3 vectorized); NumPy's pairwise sum 1.5e-7.  Each build is compiled once and run on
    # constant and random data, against exact sums (math.fsum); NumPy's error may be 0 by luck
    # on random data, so the bar is 10x NumPy's error or 10 units of roundoff, the larger
    Y, X = _total(n)
    rng = np.random.default_rng(3)
    data = [np.full(n, 0.1, np.float32), rng.random(n, dtype=np.float32),
            (rng.standard_normal(n) + 1.0).astype(np.float32)]
    cases = []  # (data, exact sum, the bar)
    for x in data:
        exact = math.fsum(x.astype(np.float64))
        cases.append((x, exact, 10 * max(_relative(x.sum(), exact), EPS)))
    for fastmath in (True, False):
        kern = ta.build([Y], [X], fastmath=fastmath)
        for x, exact, bar in cases:
            assert _relative(kern(x), exact) <= bar, (fastmath, x[:2])


@pytest.mark.parametrize("fastmath", [True, False])
def test_batch_norm_channel_sums_are_accurate(fastmath):
    # sum over (64, 4096) per channel: two reduction axes, cut into blocks at the loop over the
    # batch and along the plane; the bar as above (NumPy's error is PyTorch's here)
    Y, X = _channels(64, 3, 4096)
    kern = ta.build([Y], [X], fastmath=fastmath)
    rng = np.random.default_rng(5)
    for x in (rng.random((64, 3, 4096), dtype=np.float32) + 0.5, np.full((64, 3, 4096), 0.1, np.float32)):
        exact = x.astype(np.float64).sum(axis=(0, 2))
        numpy_error = _relative(x.sum(axis=(0, 2)), exact)
        assert _relative(kern(x), exact) <= 10 * max(numpy_error, EPS), fastmath


def test_strict_sums_give_the_same_bits_on_every_target():
    # fastmath=False adds in the loop program's order, blocks included: no target may vectorize
    # or reassociate it, so AVX-512 and AVX2 code agree to the bit
    rng = np.random.default_rng(11)
    for (Y, X), shape in ((_total(1 << 20), (1 << 20,)), (_channels(16, 3, 4100), (16, 3, 4100))):
        x = rng.standard_normal(shape).astype(np.float32)
        host = ta.build([Y], [X], fastmath=False)(x)
        haswell = ta.build([Y], [X], fastmath=False, target="llvm -mcpu=haswell")(x)
        np.testing.assert_array_equal(host, haswell)


@pytest.mark.parametrize("fastmath", [True, False])
def test_blocks_are_bookkeeping_not_work(fastmath):
    # the partial sums' starts and combines are not counted: work is the terms summed
    n = 100_003  # (a last, shorter block)
    Y, X = _total(n)
    low = ta.lower([Y], [X], fastmath=fastmath)
    assert low.work == n
    assert "acc.0 = 0.0f" in str(low) and "acc = (acc + acc.0)" in str(low)
    x = np.random.default_rng(2).random(n, dtype=np.float32)
    exact = math.fsum(x.astype(np.float64))
    assert _relative(ta.build([Y], [X], fastmath=fastmath)(x), exact) <= 8 * EPS


def test_only_float32_sums_are_blocked():
    # float64 sums and other reductions keep their sequential loops
    n = 1 << 16
    Y, X = _total(n, "float64")
    assert "acc.0" not in str(ta.lower([Y], [X]))
    X32 = ta.placeholder((n,), "float32", "X")
    k = ta.reduce_axis((0, n), "k")
    M = ta.compute((), lambda: ta.max(X32[k], axis=k), name="M")
    assert "acc.0" not in str(ta.lower([M], [X32]))
    P = ta.compute((), lambda: ta.sum(X32[k] * X32[k], axis=k), name="P")
    assert "acc.0" in str(ta.lower([P], [X32]))
