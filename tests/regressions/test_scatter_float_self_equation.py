"""The scatter-add form (``codegen/strategies/scatter.py``) solves ``v == d`` for an output axis and drops
the conjuncts that become ``u == u`` once ``v := d``.  For a float ``u`` that is NaN, ``u == u``
is false: the term must stay (else **wrong values**, every add made where none is due).
And an equation solved through an integer read from data, ``v == P[K[i]]``, gave a target that
is no address (``MissingRuleError`` out of ``build``): such a sum keeps its general form.
Oracles: NumPy loops written here, ``ta.evaluate``."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

N, V, J = 5, 4, 3
KV = np.array([0, 1, 1, 3, 2], np.int32)
HV = np.arange(N * J, dtype=np.float32).reshape(N, J) + 1


def _scatter(where):
    K = ta.placeholder((N,), dtype="int32", name="K")
    X = ta.placeholder((V,), name="X")
    H = ta.placeholder((N, J), name="H")
    i = ta.reduce_axis((0, N), name="i")
    out = ta.compute((V, J), lambda v, j: ta.sum(H[i, j], i, where=where(v, i, K, X)), name="out")
    return out, [K, X, H]


def _iota_self_test(v, i, K, X):
    iota = ta.compute((V,), lambda w: w, name="iota")  # inlined: ``iota[K[i]]`` is the gather index
    d = iota[K[i]]
    return (v == d) & (X[0] * ta.cast("float32", v) == X[0] * ta.cast("float32", d))


@pytest.mark.parametrize("x0", [np.nan, 2.0, np.inf])
@pytest.mark.parametrize("opt", [0, 2])
def test_a_float_self_equation_is_tested(x0, opt):
    out, args = _scatter(_iota_self_test)
    xv = np.array([x0, 1, 2, 3], np.float32)
    want = np.zeros((V, J), np.float32)
    with np.errstate(invalid="ignore"):  # (inf * 0)
        for i, k in enumerate(KV):
            if xv[0] * np.float32(k) == xv[0] * np.float32(k):
                want[k] += HV[i]
    vals = (KV, xv, HV)
    np.testing.assert_array_equal(ta.evaluate(out, dict(zip(args, vals))), want)
    for checked in (False, True):
        np.testing.assert_array_equal(ta.build([out], args, opt_level=opt, checked=checked)(*vals), want)


def test_an_equation_through_an_integer_read_from_data_builds():
    K = ta.placeholder((N,), dtype="int32", name="K")
    P = ta.placeholder((V,), dtype="int32", name="P")
    H = ta.placeholder((N, J), name="H")
    i = ta.reduce_axis((0, N), name="i")
    out = ta.compute((V, J), lambda v, j: ta.sum(H[i, j], i, where=v == P[K[i]]), name="out")
    pv = np.array([2, -1, 7, 0], np.int32)  # values outside [0, V) match no v
    want = np.zeros((V, J), np.float32)
    for i, k in enumerate(KV):
        if 0 <= pv[k] < V:
            want[pv[k]] += HV[i]
    vals = (KV, pv, HV)
    np.testing.assert_array_equal(ta.evaluate(out, {K: KV, P: pv, H: HV}), want)
    np.testing.assert_array_equal(ta.build([out], [K, P, H])(*vals), want)
