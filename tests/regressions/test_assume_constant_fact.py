"""A Hessian-vector product never finished defining.

The HVP of a ``min`` whose body is multiplied by a sum of constants (an inner ``sum`` whose
only read lies outside its guard, so its tangent is zero) made a tangent whose nonzeroness
simplified to ``False``.  ``simplify.nonzero.assume`` turned each fact ``f`` into
``f -> True`` and its negation into ``-> False``; the fact ``False`` so became
``False -> True`` beside ``True -> False``, and the rewrite swapped the two constants
without end.  A constant fact now adds nothing (``True``) or leaves the expression as it is
(``False``: no point is left, the caller's plan finds the empty domain).
"""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
from tensorad.simplify.zeros.nonzero import assume

import tensorad as ta
from tensorad.ir.expr import FALSE, TRUE, var

F = "float64"


def test_assume_with_a_constant_fact_leaves_the_expression():
    i = var("i", 0, 8)
    e = ta.select(i < 3, ta.const(1.0, F), ta.const(0.0, F))
    assert assume(e, [FALSE]) is e
    assert assume(e, [TRUE]) is e
    assert assume(e, [TRUE, i < 3]) == ta.const(1.0, F)  # the real fact still applies


def _program():
    x0 = ta.placeholder((5,), F, name="x0")
    x1 = ta.placeholder((1,), F, name="x1")
    x2 = ta.placeholder((5,), F, name="x2")
    r0 = ta.reduce_axis((0, 5), name="r0")
    r2 = ta.reduce_axis((1, 4), name="r2")
    inner = ta.sum(ta.if_then_else(r2 < 1, x1[r2], -1.0), axis=[r2])  # = -3, tangent 0
    t0 = ta.compute((), lambda: ta.min(
        (x0[r0] - ta.maximum(ta.cast(F, r0 * 3 - 4), x0[r0])) * inner, axis=[r0], where=x2[r0] > 0.0),
        name="t0")
    return [x0, x1, x2], t0


def _define_hvp(queue) -> None:
    inputs, t0 = _program()
    vs = [ta.placeholder(x.shape, F, name=f"v{k}") for k, x in enumerate(inputs)]
    hvp = ta.hessian_vector_product(t0, inputs, vs)
    rng = np.random.default_rng(0)
    feed = {x: rng.uniform(-1, 1, x.shape) for x in inputs + vs}
    feed[inputs[2]] = np.array([1.0, -1.0, 1.0, 1.0, 1.0])
    queue.put([np.asarray(v) for v in ta.evaluate(hvp, feed)] + [np.asarray(v) for v in ta.build(
        hvp, inputs + vs)(*[feed[x] for x in inputs + vs])])


def test_hvp_of_a_min_scaled_by_a_constant_sum_finishes_and_is_right():
    """Defined in a child process, so that a relapse fails in 60 s instead of hanging."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_define_hvp, args=(queue,))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        raise AssertionError("the HVP did not finish defining in 60 s")
    values = queue.get(timeout=5)
    # f = min over r with x2[r] > 0 of 3 * max(3r - 4 - x0[r], 0): piecewise linear in x0 and
    # constant in x1, x2, so H v = 0 wherever f is twice differentiable (the data's point is)
    for v in values:
        np.testing.assert_array_equal(v, np.zeros_like(v))
