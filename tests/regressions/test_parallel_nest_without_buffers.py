"""With default options but ``num_threads=3, parallel_min_work=0``, ``ta.build`` raised
``ValueError: max() arg is an empty sequence``.  An argmax fused into an empty
consumer (shape ``(0,)``) left a parallel nest whose body computes but stores into no buffer;
the parallel chunk size took the widest vector of the nest's buffers, of which it has none.
Such a nest counts one lane, and a nest that stores nothing is not lowered at all
(``lower._storing``).  Oracles: NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _argmax_combine(x, y):
    keep = x[1] >= y[1]
    return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])


ARGMAX = ta.comm_reducer(_argmax_combine, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")


def _program(n: int):
    x0 = ta.placeholder((9, 3), name="x0")
    r = ta.reduce_axis((0, 9), name="r")
    t1_i, t1 = ta.compute((4,), lambda i: ARGMAX((r * 7, ta.sin(ta.cast("float32", r % 3))), axis=[r]),
                          name="t1")
    t2 = ta.compute((n,), lambda i: x0[2, 0] * t1[i], name="t2")
    return x0, t2


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n", [0, 4])
def test_an_empty_consumer_of_a_fused_argmax_builds(threads, n):
    x0, t2 = _program(n)
    kern = ta.build([t2], [x0], num_threads=threads, parallel_min_work=0)
    x = np.random.default_rng(0).standard_normal((9, 3)).astype(np.float32)
    best = np.sin(np.arange(9) % 3, dtype=np.float32).max()
    np.testing.assert_allclose(kern(x), np.full(n, x[2, 0] * best, np.float32), rtol=1e-6)


def test_a_nest_that_stores_nothing_is_not_lowered():
    x0, t2 = _program(0)
    low = ta.lower([t2], [x0], num_threads=3, parallel_min_work=0)
    assert low.work == 0, str(low)  # (was 36: the argmax computed for every i, stored nowhere)
    assert "for " not in str(low)
