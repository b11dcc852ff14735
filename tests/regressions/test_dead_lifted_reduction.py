"""A reduction lifted out of an output that nobody reads is not computed.

``t1 = (0.5, max(...) * 0.5 + i0)`` is one op of two outputs; only the constant one is read
(inlined into ``t2``).  The reduction the language lifted out of the other output (``t1.red``)
was still lowered, as a nest that stored nothing: 81 iterations of work for no value, and with
``parallel_min_work=0`` the parallel chunking of a nest without buffers raised ``ValueError:
max() arg is an empty sequence`` in ``ta.build``.  Oracles: the work a hand count gives and a
NumPy formula.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _program():
    x = ta.placeholder((4,), "float64", name="x")
    r = ta.reduce_axis((0, 3), name="r")
    c, _ = ta.compute((9, 3), lambda i0, i1: (ta.const(0.5, "float64"),
                                              ta.max(ta.cast("float64", i1 + r), axis=[r]) * 0.5), name="t1")
    t2 = ta.compute((9,), lambda i0: c[(i0 + 2) % 9, 2 - i0 % 3] * x[i0 % 4], name="t2")
    return x, t2


def test_only_the_read_outputs_are_computed():
    x, t2 = _program()
    assert ta.lower([t2], [x]).work == 9


@pytest.mark.parametrize("threads", [1, 2])
def test_it_builds_with_parallel_loops_for_any_work(threads):
    x, t2 = _program()
    xv = np.array([1.0, -2.0, 3.0, 0.5])
    got = ta.build([t2], [x], num_threads=threads, parallel_min_work=0)(xv)
    np.testing.assert_array_equal(got, 0.5 * xv[np.arange(9) % 4])
