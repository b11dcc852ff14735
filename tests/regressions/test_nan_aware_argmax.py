"""docs/conventions.md: a custom selecting reducer keeps its own NaN rule -- ``keep = x[1] >= y[1]``
drops a NaN, ``keep = (x[1] >= y[1]) | (x[1] != x[1])`` returns the index of the first NaN, as
``numpy.argmax`` does.  Checked in every path: ``ta.evaluate``, built
kernels at each opt level, with fast-math and threads, over rows long enough to vectorize;
``jvp`` (the chosen element's tangent); the reverse gradient and ``ta.function``'s backward (the
head routed to the chosen element).  Oracles: the combiner folded in Python in index order (the
API's order), ``numpy.argmax``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorad as ta

R, K = 6, 67


def _combine(nan_aware):
    def combine(x, y):
        keep = x[1] >= y[1]
        if nan_aware:
            keep = keep | (x[1] != x[1])
        return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])
    return combine


REDUCERS = {aware: ta.comm_reducer(_combine(aware), lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)),
                                   name="argmax_nan" if aware else "argmax")
            for aware in (False, True)}


def _fold(row, nan_aware):
    best_i, best_v = -1, -math.inf
    for i, v in enumerate(row):
        keep = best_v >= v or (nan_aware and best_v != best_v)
        if not keep:
            best_i, best_v = i, v
    return best_i


def _data():
    x = np.random.default_rng(5).standard_normal((R, K))
    x[0, 30] = x[0, 50] = np.nan        # two NaNs
    x[1, 0] = np.nan                    # a NaN first
    x[2, K - 1] = np.nan                # a NaN last
    x[3, 2] = x[3, 40] = 9.0            # a tie of the maximum, no NaN
    x[4, :] = np.nan                    # every element NaN
    x[5, 1], x[5, 2] = np.inf, np.nan   # inf before a NaN
    return x


def _program(nan_aware):
    X = ta.placeholder((R, K), "float64", name="X")
    k = ta.reduce_axis((0, K), name="k")
    idx, val = ta.compute((R,), lambda i: REDUCERS[nan_aware]((k, X[i, k]), axis=k), name="Y")
    return X, idx, val


@pytest.mark.parametrize("nan_aware", [False, True])
def test_the_docs_rule_in_evaluate_and_every_build(nan_aware):
    X, idx, val = _program(nan_aware)
    x = _data()
    want = np.array([_fold(row, nan_aware) for row in x])
    if nan_aware:
        np.testing.assert_array_equal(want, np.argmax(x, axis=1))
    got = ta.evaluate([idx], {X: x})[0]
    np.testing.assert_array_equal(got, want)
    for opts in (dict(opt_level=0), dict(opt_level=1), dict(opt_level=3), dict(fastmath=True),
                 dict(num_threads=2, parallel_min_work=0)):
        got_i, got_v = ta.build([idx, val], [X], **opts)(x)
        np.testing.assert_array_equal(got_i, want, err_msg=str(opts))
        np.testing.assert_array_equal(got_v, x[np.arange(R), want], err_msg=str(opts))


@pytest.mark.parametrize("nan_aware", [False, True])
def test_the_chosen_element_takes_the_tangent_and_the_gradient(nan_aware):
    X, idx, val = _program(nan_aware)
    x = _data()
    want = np.array([_fold(row, nan_aware) for row in x])
    onehot = np.zeros((R, K))
    onehot[np.arange(R), want] = 1.0
    dX = ta.placeholder((R, K), "float64", name="dX")
    t = np.random.default_rng(6).standard_normal((R, K))
    tangent = ta.jvp(val, [X], [dX])
    np.testing.assert_array_equal(ta.build([tangent], [X, dX])(x, t), t[np.arange(R), want])
    np.testing.assert_array_equal(ta.evaluate([tangent], {X: x, dX: t})[0], t[np.arange(R), want])
    H = ta.placeholder((R,), "float64", name="H")
    h = np.arange(1.0, R + 1)
    (grad,) = ta.gradient(val, [X], H)
    np.testing.assert_array_equal(ta.build([grad], [X, H])(x, h), onehot * h[:, None])
    np.testing.assert_array_equal(ta.evaluate([grad], {X: x, H: h})[0], onehot * h[:, None])
    f = ta.function([val], [X])
    _, residuals = f.forward(x)
    np.testing.assert_array_equal(f.backward(residuals, h)[0], onehot * h[:, None])
