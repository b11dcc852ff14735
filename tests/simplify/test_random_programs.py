"""Random well-formed programs: optimized gradients equal unoptimized ones and stay in bounds."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from strategies import examples, random_feed, random_program

import tensorad as ta
from tensorad.ir import placeholders, tensor_graph
from tensorad.lang import check_op_bounds

F = "float64"


@settings(max_examples=examples(120), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(random_program(dtype=F, max_inputs=3, max_computes=4, depth=2))
def test_random_program_gradients(program):
    inputs = [p for p in program.placeholders if p.dtype in ta.FLOAT_DTYPES]
    y = program.output
    h = ta.placeholder(y.shape, F, name="H")
    grads = ta.JacobianRecursive(y, inputs, h)
    raw = ta.JacobianRecursive(y, inputs, h, optimize=False)
    for t in tensor_graph(grads):
        if not t.is_placeholder:
            check_op_bounds(t.op)
    feed = random_feed(sorted(set(placeholders(raw)) | set(placeholders(grads)), key=lambda t: t.name),
                       np.random.default_rng(0))
    for got, want in zip(ta.evaluate(grads, {p: feed[p] for p in placeholders(grads)}),
                         ta.evaluate(raw, {p: feed[p] for p in placeholders(raw)})):
        # a symbolic zero is a strong zero: where the unoptimized gradient is 0 * inf = NaN,
        # the optimized one may be 0 (see simplify/algebra/rules.py)
        ok = np.isfinite(want)
        np.testing.assert_allclose(np.asarray(got)[ok], np.asarray(want)[ok], rtol=1e-9, atol=1e-9)


@settings(max_examples=examples(30), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(random_program(dtype=F, max_inputs=2, max_computes=3, depth=2))
def test_random_program_second_order(program):
    inputs = [p for p in program.placeholders if p.dtype in ta.FLOAT_DTYPES]
    y = program.output
    h = ta.placeholder(y.shape, F, name="H")
    g = ta.JacobianRecursive(y, inputs, h)[0]
    h2 = ta.placeholder(g.shape, F, name="H2")
    grads = ta.JacobianRecursive(g, inputs + [h], h2)
    raw = ta.JacobianRecursive(ta.JacobianRecursive(y, inputs, h, optimize=False)[0], inputs + [h], h2,
                               optimize=False)
    feed = random_feed(sorted(set(placeholders(raw)) | set(placeholders(grads)), key=lambda t: t.name),
                       np.random.default_rng(0))
    for got, want in zip(ta.evaluate(grads, {p: feed[p] for p in placeholders(grads)}),
                         ta.evaluate(raw, {p: feed[p] for p in placeholders(raw)})):
        ok = np.isfinite(want)
        np.testing.assert_allclose(np.asarray(got)[ok], np.asarray(want)[ok], rtol=1e-9, atol=1e-9)
