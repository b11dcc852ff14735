"""A reduction over an empty box whose source holds another reduction.

``min_{r in []} 0.5 * max_s X[i] * s`` is ``min``'s identity, ``inf``: it reads nothing.  The
inner ``max``, lifted into a tensor of its own and fused into the outer reduction's nest (its
accumulator read in place), was still computed there for every ``i`` -- a nest storing nothing,
work for no value, and with ``parallel_min_work=0`` the chunking of a parallel nest without
buffers raised ``ValueError: max() arg is an empty sequence`` in ``ta.build``.  Oracles: the
identities (NumPy's ``min`` of nothing is ``inf``; an argmax over nothing keeps its initial
``(-1, -inf)``), and zero work.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

OPTIONS = [{}, {"parallel_min_work": 0}, {"parallel_min_work": 0, "num_threads": 2, "fuse": False}]


def _program():
    X = ta.placeholder((5,), "float64", name="X")
    r, s = ta.reduce_axis((0, 0), name="r"), ta.reduce_axis((1, 3), name="s")
    t = ta.compute((5,), lambda i: ta.min(0.5 * ta.max(X[i] * s, axis=[s]), axis=[r]), name="t")
    return X, t


@pytest.mark.parametrize("options", OPTIONS)
def test_min_over_nothing_of_a_lifted_max(options):
    X, t = _program()
    x = np.arange(5.0)
    np.testing.assert_array_equal(np.asarray(ta.build([t], [X], **options)(x)), np.full(5, np.inf))
    assert ta.lower([t], [X]).work == 0


def test_argmax_over_nothing_of_a_lifted_sum():
    X = ta.placeholder((4, 3), "float64", name="X")
    r, s = ta.reduce_axis((2, 2), name="r"), ta.reduce_axis((0, 3), name="s")
    argmax = ta.comm_reducer(
        lambda a, b: (ta.select(a[1] >= b[1], a[0], b[0]), ta.select(a[1] >= b[1], a[1], b[1])),
        lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")
    idx, val = ta.compute((4,), lambda i: argmax((r, ta.sum(X[i, s], axis=[s])), axis=[r]), name="a")
    x = np.ones((4, 3))
    got_i, got_v = ta.build([idx, val], [X], parallel_min_work=0)(x)
    np.testing.assert_array_equal(np.asarray(got_i), np.full(4, -1))
    np.testing.assert_array_equal(np.asarray(got_v), np.full(4, -np.inf))

