"""The bar on the operator families: the optimized gradient's work is at most 1.1x the
hand-written formula stated with each workload in ``workloads.py`` (normalizations, variance,
upsampling, causal attention, a head that depends on none of the other axes), and it computes
the values of the unoptimized gradient."""

from __future__ import annotations

import numpy as np
import pytest
import simplify_workloads as W

import tensorad as ta
from tensorad.ir import placeholders

FAMILIES = {w.name: w for w in W.family_workloads()}


def _check(wl: W.Workload) -> None:
    H = ta.placeholder(wl.output.shape, name="H")
    grads = ta.JacobianRecursive(wl.output, wl.inputs, H)
    raw = ta.JacobianRecursive(wl.output, wl.inputs, H, optimize=False)
    rng = np.random.default_rng(3)
    feed = {x: rng.standard_normal(x.shape).astype(np.float32) for x in placeholders(raw)}
    for got, want in zip(ta.evaluate(grads, feed), ta.evaluate(raw, feed)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    work = ta.lower(grads, placeholders(grads)).work
    assert work <= 1.1 * wl.hand_work, f"{wl.name}: work {work} > 1.1 x {wl.hand_work} ({wl.formula})"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_reaches_hand_work(name):
    _check(FAMILIES[name])


def test_hvp_of_dense_tanh_shares_the_tangent_of_the_shared_intermediate():
    """Second order: the Hessian-vector product of ``sum(tanh(X W^T))`` by forward-over-reverse.
    Hand: Z = X W^T, Zdot = sum_i (vX W + X vW) (the tangent of Z, which both gradients read:
    computed once), HvX = sum_o (dZdot W + dZ vW), HvW = sum_b (dZdot^T X + dZ^T vX), with the
    elementwise dZ = 1 - tanh(Z)^2 and dZdot = -2 tanh(Z) (1 - tanh(Z)^2) Zdot fused into them:
    4*b*o*i + b*o."""
    b, n_in, n_out = 4, 6, 5
    X, Wt = ta.placeholder((b, n_in), name="X"), ta.placeholder((n_out, n_in), name="W")
    vX, vW = ta.placeholder(X.shape, name="vX"), ta.placeholder(Wt.shape, name="vW")
    loss = ta.topi.sum(ta.topi.tanh(ta.topi.nn.dense(X, Wt)))
    hv = ta.hessian_vector_product(loss, [X, Wt], [vX, vW])
    raw = ta.hessian_vector_product(loss, [X, Wt], [vX, vW], optimize=False)
    rng = np.random.default_rng(5)
    feed = {x: rng.standard_normal(x.shape).astype(np.float32) for x in (X, Wt, vX, vW)}
    for got, want in zip(ta.evaluate(hv, feed), ta.evaluate(raw, feed)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
    hand = 4 * b * n_out * n_in + b * n_out
    work = ta.lower(hv, placeholders(hv)).work
    assert work <= 1.1 * hand, f"HVP work {work} > 1.1 x {hand}"


@pytest.mark.parametrize("lifted", [False, True], ids=["scaled_tensor", "lifted_sum"])
def test_rowmax_adjoint_cancels_whatever_the_spelling_of_the_softmax_input(lifted):
    """The softmax does not depend on its row max, so no winner reduction and no adjoint of the
    max may remain: the polynomial sees ``exp(scaled - m)`` and ``exp(scores / 8 - m)`` as one
    atom, and ``if_then_else(j <= i, x, 0)`` as ``x`` inside a sum over ``j <= i``."""
    out, inputs, H = W.hand_causal_attention(7, 3, lifted)
    grads = ta.JacobianRecursive(out, inputs, H)
    from tensorad.ir import tensor_graph

    kinds = {t.op.body[0].arg.combiner.kind for t in tensor_graph(grads)
             if not t.is_placeholder and t.op.is_reduction}
    assert kinds == {"sum", "max"}, kinds  # the forward max only: no winner (argmax) reduction
    assert sum(1 for t in tensor_graph(grads) if not t.is_placeholder and t.op.is_reduction
               and t.op.body[0].arg.combiner.kind == "max") == 1
    raw = ta.JacobianRecursive(out, inputs, H, optimize=False)
    rng = np.random.default_rng(7)
    feed = {x: rng.standard_normal(x.shape).astype(np.float32) for x in placeholders(raw)}
    for got, want in zip(ta.evaluate(grads, feed), ta.evaluate(raw, feed)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("lifted", [False, True], ids=["scaled_tensor", "lifted_sum"])
def test_hand_written_causal_attention_reaches_hand_work(lifted):
    """The same hand formula as the topi workload (``causal_attention`` in workloads.py):
    the scores are materialized, and every reader reads them where ``j <= i`` only, so they
    are computed on the triangle (codegen/passes/footprint.py), not on the square."""
    n, d = 9, 4
    out, inputs, H = W.hand_causal_attention(n, d, lifted)
    grads = ta.JacobianRecursive(out, inputs, H)
    t = n * (n + 1) // 2
    hand = 5 * t * d + 5 * t
    work = ta.lower(grads, placeholders(grads)).work
    assert work <= 1.1 * hand, f"hand-written causal attention: work {work} > 1.1 x {hand}"
    kernel = ta.build(grads, placeholders(grads))
    rng = np.random.default_rng(11)
    feed = {x: rng.standard_normal(x.shape).astype(np.float32) for x in placeholders(grads)}
    got = kernel(*[feed[x] for x in placeholders(grads)])
    raw = ta.JacobianRecursive(out, inputs, H, optimize=False)
    for g, want in zip(got, ta.evaluate(raw, feed)):
        np.testing.assert_allclose(g, want, rtol=2e-4, atol=2e-5)


def _pairs(size: int, out: int, window: int, pad: int) -> int:
    return sum(1 for o in range(out) for k in range(window) if 0 <= o + k - pad < size)


def _hvp_conv():
    n, c, h, w, f, k = 2, 3, 7, 6, 4, 3
    X, Wt = ta.placeholder((n, c, h, w), name="X"), ta.placeholder((f, c, k, k), name="W")
    Z = ta.topi.nn.conv2d(X, Wt, 1, 1, 1)
    oh, ow = Z.shape[2:]
    taps = n * f * c * _pairs(h, oh, k, 1) * _pairs(w, ow, k, 1)  # valid (output, tap) pairs
    # Z, Zdot = conv(vX, W) + conv(X, vW) (one sum), HvX = conv^T(dZdot, W) + conv^T(dZ, vW),
    # HvW = corr(dZdot, X) + corr(dZ, vX): 4 passes over the taps; dZ, dZdot elementwise (N*F*OH*OW)
    return ta.topi.sum(ta.topi.tanh(Z)), [X, Wt], 4 * taps + n * f * oh * ow


def _hvp_softmax_ce():
    b, m = 4, 7
    X, T = ta.placeholder((b, m), name="X"), ta.placeholder((b, m), name="T")
    ls = ta.topi.nn.log_softmax(X)
    loss = ta.topi.sum(ta.compute((b, m), lambda i, j: T[i, j] * ls[i, j], name="TL"))
    # grad = T - p t with t = sum_j T, p = softmax(X); Hv = -t p (v - sum_j p v):
    # max, sum exp, sum v exp (the tangent of the sum), t, Hv: 5*b*m
    return loss, [X], 5 * b * m


@pytest.mark.parametrize("case", [_hvp_conv, _hvp_softmax_ce], ids=["conv+tanh", "softmax_cross_entropy"])
def test_hvp_family_reaches_hand_work(case):
    loss, inputs, hand = case()
    vs = [ta.placeholder(x.shape, name=f"v{x.name}") for x in inputs]
    hv = ta.hessian_vector_product(loss, inputs, vs)
    raw = ta.hessian_vector_product(loss, inputs, vs, optimize=False)
    rng = np.random.default_rng(9)
    feed = {x: rng.standard_normal(x.shape).astype(np.float32) for x in placeholders(raw)}
    for got, want in zip(ta.evaluate(hv, feed), ta.evaluate(raw, feed)):
        np.testing.assert_allclose(got, want, rtol=5e-4, atol=5e-4)
    work = ta.lower(hv, placeholders(hv)).work
    assert work <= 1.1 * hand, f"HVP work {work} > 1.1 x {hand}"
