# ruff: noqa: E501  (the fuzzer's program, as it drew it)
"""An operand shared out of a reduction over an empty box.

``Y = sum(K[i], axis=[r3, r4], where=g(L[r3 + 3]))`` with ``r4`` in ``[0, 0)``: the sum is its
identity and reads nothing, so liveness dropped the ops only its ``where`` names (``t0`` and a
layer norm's statistics) -- but ``codegen/passes/shared_windows.py`` still found the layer norm's
compound operand in that body and computed it in a nest of its own, reading ``t0``, which had
no buffer: ``KeyError`` out of ``ta.build`` with default options (on an AMD EPYC
with AVX-512, check ``split``; the forward alone fails the same way).
The pass now skips bodies that are empty reductions.  Oracles: zeros (a sum over nothing),
``ta.evaluate``, and the fuzzer's checks.
"""

import numpy as np

import tensorad as ta
from fuzz.checks import run_checks
from fuzz.program import PRELUDE


def _program():
    X = ta.placeholder((3,), "float64", name="X")
    K = ta.placeholder((5,), "float64", name="K")
    r0 = ta.reduce_axis((0, 3), name="r0")
    t0 = ta.compute((1,), lambda i: ta.max(X[r0] * 2.0, axis=[r0]), name="t0")
    L = ta.topi.nn.layer_norm(t0, ndim=1)
    r3, r4 = ta.reduce_axis((1, 4), name="r3"), ta.reduce_axis((0, 0), name="r4")
    guard = ta.if_then_else((r3 + 3 >= 0) & (r3 + 3 < 1), L[r3 + 3], 0.0) > 0.0
    Y = ta.compute((5,), lambda i: ta.sum(K[i] * 1.0, axis=[r3, r4], where=guard), name="Y")
    return X, K, Y


def test_a_sum_over_an_empty_box_builds_and_is_zero():
    X, K, Y = _program()
    x, k = np.array([0.5, -1.0, 2.0]), np.arange(5.0)
    got = ta.build([Y], [X, K])(x, k)
    np.testing.assert_array_equal(got, np.zeros(5))
    np.testing.assert_array_equal(ta.evaluate(Y, {X: x, K: k}), np.zeros(5))


def test_its_gradient_builds_and_is_zero():
    X, K, Y = _program()
    H = ta.placeholder((5,), "float64", name="H")
    gX, gK = ta.JacobianRecursive(Y, [X, K], H)
    got = ta.build([gX, gK], [X, K, H])(np.array([0.5, -1.0, 2.0]), np.arange(5.0), np.ones(5))
    np.testing.assert_array_equal(got[0], np.zeros(3))
    np.testing.assert_array_equal(got[1], np.zeros(5))


SOURCE = "import tensorad as ta\n\nDT = 'float64'\n" + PRELUDE + """
x0 = ta.placeholder((1, 1), DT, name='x0')
x1 = ta.placeholder((1,), DT, name='x1')
k0 = ta.compute((3, 2), lambda i0, i1: ta.select(ta.cast('int64', i0 * -1 - 3) < ta.cast('int64', (x1[(i1 + -3) % 1]) * -7.5), ta.cast('int64', i0 * -1 - 3), ta.cast('int64', (x1[(i1 + -3) % 1]) * -7.5) * 2), name='k0')
r0 = ta.reduce_axis((0, 3), name='r0')
t0 = ta.compute((1,), lambda i0: ta.max(ta.cast(DT, k0[(i0 * 1073741824 + -3) % 3, (r0 + -3) // 2 % 2]), axis=[r0], where=r0 >= i0 + 1), name='t0')
L1 = ta.topi.nn.layer_norm(t0, ndim=1)
r3 = ta.reduce_axis((1, 4), name='r3')
r4 = ta.reduce_axis((0, 0), name='r4')
t3 = ta.compute((5,), lambda i0: MYSUM(ta.cast(DT, k0[ta.cast('int32', ta.cast('int64', i0) * 3 % 3), i0 + 0]), axis=[r3, r4], where=(ta.if_then_else((r3 + 3 >= 0) & (r3 + 3 < 1), L1[r3 + 3], 0.0)) > 0.0), name='t3')
INPUTS = [x0, x1]
TENSORS = [k0, t0, L1, t3]
OUT = t3
"""


def test_the_fuzzed_program_passes_every_check():
    job = dict(source=SOURCE, source64=SOURCE, dtype="float64", options={}, data="smooth", seed=600953,
               safe=True, checks=["forward", "checked", "optimizer", "jvp", "split"], all_outputs=True,
               calling="threads", torch=None)
    results = list(run_checks(job))
    assert all(r["status"] == "ok" for r in results), results
