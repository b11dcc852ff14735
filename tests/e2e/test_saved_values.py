"""The default policy saves a transcendental value the forward computes anyway and the backward
would compute again (tensorad/training/saved_values.py, codegen/strategies/cost.py).

Oracles: NumPy formulas written here, float64 central finite differences, and the backward of
the ``recompute_all`` policy (which shares nothing); the structure of the backward's tensor
program (no ``exp`` left in it) shows what is saved, never a time.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from strategies import random_feed, random_program
from tensorad.codegen.strategies.cost import worth_saving
from tensorad.codegen.target import host_target

import tensorad as ta
from tensorad.ir.expr import var
from tensorad.ir.rewrite import tensor_graph, walk

nn = ta.topi.nn


def _ops_in_backward(f, op) -> int:
    """How many ``op`` nodes the backward kernel's tensor program computes."""
    cut = tensor_graph(f.plan.grads, stop=f.plan.saved)
    stop = set(f.plan.saved)
    return sum(1 for t in cut if not t.is_placeholder and t not in stop
               for b in t.op.body for n in walk(b) if n.op is op)


def _log_softmax_nll(rows=4, classes=7):
    Z, T = ta.placeholder((rows, classes), "float64", "Z"), ta.placeholder((rows, classes), "float64", "T")
    picked = ta.topi.multiply(T, nn.log_softmax(Z))
    return ta.topi.multiply(ta.topi.sum(picked), -1.0 / rows), Z, T


def _log_softmax_nll_np(z, t):
    s = z - z.max(1, keepdims=True)
    return -(t * (s - np.log(np.exp(s).sum(1, keepdims=True)))).sum() / z.shape[0]


def test_log_softmax_backward_reads_the_exp_its_forward_stored(rng, numeric_grad):
    Y, Z, T = _log_softmax_nll()
    f = ta.function(Y, [Z, T], wrt=[Z])
    again = ta.function(Y, [Z, T], wrt=[Z], policy="recompute_all")
    values = [t for t in f.saved if t.shape == Z.shape]
    assert len(values) == 1 and values[0].op.body[0].op is ta.Op.EXP
    assert _ops_in_backward(f, ta.Op.EXP) == 0 and _ops_in_backward(again, ta.Op.EXP) > 0
    assert f.plan.inputs == (1,)  # the backward reads T and the saved values, not Z
    # the forward with residuals computes each exp once: its row sum reads the stored values
    assert sum(1 for t in tensor_graph(list(f.plan.outputs) + list(f.plan.extras))
               if not t.is_placeholder for n in walk(t.op.body[0]) if n.op is ta.Op.EXP) == 1
    z = rng.normal(size=Z.shape) * 3
    t = np.eye(Z.shape[1])[rng.integers(0, Z.shape[1], Z.shape[0])]
    y, res = f.forward(z, t)
    np.testing.assert_allclose(y, _log_softmax_nll_np(z, t), rtol=1e-12)
    (gz,) = f.backward(res, np.float64(1.5))
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(gz, 1.5 * (p * t.sum(1, keepdims=True) - t) / Z.shape[0], rtol=1e-10)
    np.testing.assert_allclose(gz, numeric_grad(lambda a: _log_softmax_nll_np(a, t), [z], np.float64(1.5))[0],
                               rtol=1e-6, atol=1e-9)
    (gz2,) = again.backward(again.forward(z, t)[1], np.float64(1.5))
    np.testing.assert_allclose(gz, gz2, rtol=1e-12)


def test_the_cost_model_saves_transcendentals_and_recomputes_cheap_values():
    X = ta.placeholder((4, 8), "float32", "X")
    m = ta.placeholder((4,), "float32", "m")
    i, j = var("i", 0, 4), var("j", 0, 8)
    target = host_target()
    assert worth_saving(ta.exp(X[i, j] - m[i]), target)
    assert worth_saving(ta.tanh(X[i, j]), target)
    assert not worth_saving(ta.abs(X[i, j]), target)


def _norm_gelu_np(x, w):
    from math import erf, sqrt
    c = x - x.mean(1, keepdims=True)
    h = (c / np.sqrt((c * c).mean(1, keepdims=True) + 1e-5)) @ w.T
    return 0.5 * h * (1 + np.vectorize(lambda v: erf(v / sqrt(2)))(h))


def test_a_value_downstream_of_another_shared_value_is_shared(rng, numeric_grad):
    """``gelu(dense(layer_norm(X), W))``: the forward stores the layer norm's ``sqrt`` (rebuilding the
    layer norm and the product to read it) and the backward reads the forward's ``erf`` too.  The ``erf``
    read the rebuilt product, so it was compared with its candidate over the given one and never
    matched: the backward computed every ``erf`` again."""
    X, W = ta.placeholder((3, 6), "float64", "X"), ta.placeholder((5, 6), "float64", "W")
    one = ta.compute((6,), lambda i: ta.const(1.0, "float64"), "one")
    zero = ta.compute((6,), lambda i: ta.const(0.0, "float64"), "zero")
    Y = nn.gelu(nn.dense(nn.layer_norm(X, one, zero), W))
    f = ta.function(Y, [X, W])
    assert any(any(n.op is ta.Op.ERF for n in walk(t.op.body[0])) for t in f.saved)
    assert _ops_in_backward(f, ta.Op.ERF) == 0
    again = ta.function(Y, [X, W], policy="recompute_all")
    assert _ops_in_backward(again, ta.Op.ERF) > 0
    x, w, h = rng.normal(size=X.shape), rng.normal(size=W.shape), rng.normal(size=Y.shape)
    y, res = f.forward(x, w)
    np.testing.assert_allclose(y, _norm_gelu_np(x, w), rtol=1e-10, atol=1e-12)
    grads = f.backward(res, h)
    for g, want in zip(grads, numeric_grad(_norm_gelu_np, [x, w], h)):
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8)
    for g, want in zip(grads, again.backward(again.forward(x, w)[1], h)):
        np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-12)


def _attention(q, k, v):
    return nn.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("build", [_attention, lambda q, k, v: nn.softmax(q)])
def test_attention_and_softmax_backwards_read_the_stored_exp(build):
    """The forward stores ``exp(s - m)`` (its sum and division read it): the backward loads it,
    and no longer needs the scores or their maximum."""
    xs = [ta.placeholder((2, 5, 3), "float32", n) for n in "QKV"]
    Y = build(*xs)
    f = ta.function(Y, xs)
    assert _ops_in_backward(f, ta.Op.EXP) == 0
    assert _ops_in_backward(ta.function(Y, xs, policy="recompute_all"), ta.Op.EXP) > 0
    assert not any(t.op.is_reduction and t.op.body[0].arg.combiner.kind == "max" for t in f.saved)


def _softmax_head(x):
    return nn.softmax(x)


def _gelu_mlp(x, w1, w2):
    return nn.dense(nn.gelu(nn.dense(x, w1)), w2)


def _causal_attention(q, k, v):
    return nn.scaled_dot_product_attention(q, k, v, causal=True)


def _tanh_rows(x, w):
    k = ta.reduce_axis((0, x.shape[1]), "k")
    s = ta.compute((x.shape[0],), lambda i: ta.sum(ta.tanh(x[i, k] * w[k]), k), "s")
    return ta.compute(x.shape, lambda i, j: ta.tanh(x[i, j] * w[j]) * s[i], "y")


def _guarded_exp(x):
    """exp under a lazy choice: never shared (the forward does not compute it everywhere)."""
    k = ta.reduce_axis((0, x.shape[1]), "k")
    s = ta.compute((x.shape[0],), lambda i: ta.sum(
        ta.if_then_else(x[i, k] > 0, ta.exp(x[i, k]), x[i, k]), k), "s")
    return ta.compute((x.shape[0],), lambda i: s[i] * s[i], "y")


def _shifted_exp(x):
    """The backward reads ``exp(X[j])`` where the forward computed ``exp(X[i + k])``."""
    n = x.shape[0]
    k = ta.reduce_axis((0, 3), "k")
    return ta.compute((n - 2,), lambda i: ta.sum(ta.exp(x[i + k]) * ta.exp(x[i]), k), "y")


PROGRAMS = {
    "softmax": (_softmax_head, [(3, 6)]),
    "attention": (_attention, [(2, 5, 3), (2, 5, 3), (2, 5, 3)]),
    "gelu_mlp": (_gelu_mlp, [(5, 4), (6, 4), (3, 6)]),
    "causal_attention": (_causal_attention, [(2, 5, 3), (2, 5, 3), (2, 5, 3)]),
    "tanh_rows": (_tanh_rows, [(3, 5), (5,)]),
    "guarded_exp": (_guarded_exp, [(3, 5)]),
    "shifted_exp": (_shifted_exp, [(7,)]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_gradients_with_shared_values_match_recomputation_and_finite_differences(name, rng, numeric_grad):
    build, shapes = PROGRAMS[name]
    xs = [ta.placeholder(s, "float64", f"x{k}") for k, s in enumerate(shapes)]
    Y = build(*xs)
    f = ta.function(Y, xs)
    again = ta.function(Y, xs, policy="recompute_all")
    arrays = [rng.normal(size=s) for s in shapes]
    h = rng.normal(size=Y.shape)
    y, res = f.forward(*arrays)
    np.testing.assert_allclose(y, ta.evaluate(Y, dict(zip(xs, arrays))), rtol=1e-12)
    grads = f.backward(res, h)
    want = again.backward(again.forward(*arrays)[1], h)
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)

    def fn(*a):
        return ta.evaluate(Y, dict(zip(xs, a)))
    for g, w in zip(grads, numeric_grad(fn, arrays, h)):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8)


SETTINGS = dict(deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=30, **SETTINGS)
@given(random_program(dtype="float64", max_inputs=2, max_computes=3, depth=2))
def test_random_programs_default_policy_matches_recompute_all(program):
    """Forward with residuals and backward of the default policy (values shared where they
    qualify) against ``ta.evaluate`` and the ``recompute_all`` backward, on random programs."""
    inputs = [p for p in program.placeholders if p.dtype in ta.FLOAT_DTYPES]
    if not inputs:
        return
    y = program.output
    f = ta.function(y, program.placeholders, wrt=inputs)
    again = ta.function(y, program.placeholders, wrt=inputs, policy="recompute_all")
    feed = random_feed(program.placeholders, np.random.default_rng(3))
    arrays = [feed[p] for p in program.placeholders]
    h = np.random.default_rng(4).uniform(-1, 1, size=y.shape)
    out, res = f.forward(*arrays)
    np.testing.assert_allclose(out, ta.evaluate(y, feed), rtol=1e-9, atol=1e-9)
    for g, w in zip(f.backward(res, h), again.backward(again.forward(*arrays)[1], h)):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9)
