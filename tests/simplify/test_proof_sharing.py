"""Zero-proofs of one optimizer call share their conversions without changing any answer.

:class:`tensorad.simplify.zeros.polynomial.ProofMemo` keeps every node a proof converted; a later
proof of the call replays the kept nodes instead of converting them again, spending its own
expansion budget node by node as converting them would.  The oracle here is the same proof
run alone (a fresh memo, nothing replayed): its answer *and* the budget it spent must be the
same, at every budget from nothing to the default -- so a replay runs out of budget at the same
node, and an atom whose inlining the budget would cut short is spelled as alone.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorad.simplify.program as program
import tensorad.simplify.sums.factor as factor
import tensorad.simplify.zeros.polynomial as polynomial
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples, random_program
from tensorad.simplify import Optimizer
from tensorad.simplify.context import OptimizerContext
from tensorad.simplify.zeros.refute import Refuter

import tensorad as ta
from tensorad.ir import Op

_FAILS = (polynomial._TooBig, ZeroDivisionError, OverflowError, ValueError)


def _alone(e, ctx) -> tuple[bool, int]:
    """The proof of ``e`` with nothing shared: its answer and the expansions it spent."""
    b = polynomial._Builder(ctx, polynomial.ProofMemo(), replay=False)
    try:
        out = not b.poly(e)
    except _FAILS:
        out = False
    return out, b.expansions


class _Recorder:
    """Every proof of a call next to the same proof alone; counts the nodes replayed."""

    def __init__(self, monkeypatch) -> None:
        self.pairs: list[tuple[tuple[bool, int], tuple[bool, int]]] = []
        self.layered: list[tuple[bool, bool]] = []  # a layered proof's answer, and alone
        self.replayed = 0
        real_builder, real_replay = polynomial._Builder, polynomial._Builder._replay
        built: list = []

        def replay(b, key):
            self.replayed += 1
            return real_replay(b, key)

        def make(*a, **k):
            b = real_builder(*a, **k)
            built.append(b)
            return b

        def proved(e, ctx=None):
            if ctx is not None and e in ctx.zero:
                return ctx.zero[e]
            built.clear()
            out = real_prove(e, ctx)
            full = [b for b in built if b.depths is None]
            if full:  # (the last builder answered: the first one's replay may have been cut)
                self.pairs.append(((out, full[-1].expansions), _alone(e, ctx)))
            return out

        def layered(e, ctx=None):  # (a layered proof, then the same alone: a fresh memo)
            out = real_layered(e, ctx)
            if ctx is not None:
                self.layered.append((out, real_layered(e, None)))
            return out

        real_prove, real_layered = polynomial.provably_zero, polynomial._layered
        monkeypatch.setattr(polynomial, "_layered", layered)
        monkeypatch.setattr(Refuter, "refutes", lambda self, e, steps=None: False)  # (every proof runs,
        monkeypatch.setattr(polynomial, "_quick", lambda e, ctx: None)  # in full)
        monkeypatch.setattr(polynomial._Builder, "_replay", replay)
        monkeypatch.setattr(polynomial, "_Builder", make)
        for module in (polynomial, factor, program):
            monkeypatch.setattr(module, "provably_zero", proved)


def _chain():
    """Sums over a chain of cheap tensors: proofs that reach the same nodes, some zero."""
    A = ta.placeholder((3, 5), name="A")
    T1 = ta.compute((3, 5), lambda i, j: A[i, j] * 2.0 + 1.0, name="T1")
    T2 = ta.compute((3, 5), lambda i, j: T1[i, j] * A[i, j], name="T2")
    T3 = ta.compute((3, 5), lambda i, j: T2[i, j] - T1[i, j], name="T3")
    k = ta.reduce_axis((0, 5), "k")
    S = ta.compute((3,), lambda i: ta.sum(T3[i, k] * A[i, k], k), name="S")
    j = ta.reduce_axis((0, 5), "j")
    return [
        ta.sum(T3[0, j] * A[0, j] + ta.exp(T3[0, j]), j),  # not zero: converts T3's chain
        ta.sum(T3[0, j] * A[0, j], j) - S[0],  # zero: the same nodes, then S's sum
        ta.sum(ta.exp(T2[0, j]) * T3[0, j] - T3[0, j] * ta.exp(T2[0, j]), j),  # zero (atoms)
        ta.sum(T3[0, j] * A[0, j] - T1[0, j], j),  # not zero
        ta.sum(ta.exp(T3[1, j]) / S[1] - ta.exp(T3[1, j]) * (1.0 / S[1]), j),  # zero
    ]


@pytest.mark.parametrize("budget", range(0, 16))
def test_shared_proofs_answer_and_spend_as_alone(monkeypatch, budget):
    monkeypatch.setattr(polynomial, "MAX_EXPANSIONS", budget)
    rec = _Recorder(monkeypatch)
    ctx = OptimizerContext()
    for e in _chain():
        polynomial.provably_zero(e, ctx)
    assert len(rec.pairs) == 5
    for shared, alone in rec.pairs + rec.layered:
        assert shared == alone
    if budget >= 12:
        assert [p[0][0] for p in rec.pairs] == [False, True, True, False, True]
        assert rec.replayed > 0  # (the later proofs did share)


@pytest.mark.parametrize("budget", [2, 7, 64])
@pytest.mark.parametrize("layer", ["softmax", "layer_norm", "attention"])
def test_a_layers_proofs_answer_and_spend_as_alone(monkeypatch, layer, budget):
    monkeypatch.setattr(polynomial, "MAX_EXPANSIONS", budget)
    rec = _Recorder(monkeypatch)
    if layer == "attention":
        Q, K, V = (ta.placeholder((2, 5, 4), name=n) for n in "QKV")
        Y, inputs = ta.topi.nn.scaled_dot_product_attention(Q, K, V, causal=True), [Q, K, V]
    else:
        X = ta.placeholder((3, 6), name="X")
        Y = ta.topi.nn.softmax(X) if layer == "softmax" else \
            ta.topi.nn.layer_norm(X, ta.placeholder((6,), name="g"), ta.placeholder((6,), name="b"))
        inputs = [X]
    opt = Optimizer()
    H = ta.placeholder(Y.shape, name="H")
    from tensorad.autodiff import jacobian_recursive
    opt.finish(jacobian_recursive(Y, inputs, H, optimizer=opt))
    assert rec.pairs
    for shared, alone in rec.pairs + rec.layered:
        assert shared == alone


@pytest.mark.slow
def test_the_transformer_blocks_proofs_share_their_conversions(monkeypatch):
    # the bar (differentiate + optimize any benchmark layer quickly): the Transformer
    # block's 76 zero-proofs converted 11,688 nodes one by one (5,185 reads); sharing them
    # converts 8,542 (3,736 reads) and replays the rest.  The shapes do not change the proofs.
    from benchmarks import sys_tensorad, workloads

    converted = []
    real = polynomial._Builder._poly
    monkeypatch.setattr(Refuter, "refutes", lambda self, e, steps=None: False)  # (every proof runs,
    monkeypatch.setattr(polynomial, "_quick", lambda e, ctx: None)  # in full)
    monkeypatch.setattr(polynomial, "_layered", lambda e, ctx: False)  # (the full proofs' sharing)
    monkeypatch.setattr(polynomial._Builder, "_poly", lambda b, e: converted.append(e.op) or real(b, e))
    w = workloads.BY_NAME["transformer_block"]
    ints = w.params.get("ints", {})
    p = {k: ta.placeholder(s, "int32" if k in ints else "float32", k)
         for k, s in w.input_shapes(tiny=True).items()}
    Y = sys_tensorad.topi_forward(w.kind, p, w.params)
    ta.JacobianRecursive(Y, [p[g] for g in w.grads], ta.placeholder(Y.shape, name="H"))
    assert 1000 < len(converted) <= 9000
    assert sum(op is Op.READ for op in converted) <= 4000


@settings(max_examples=examples(40), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(random_program(dtype="float64", max_inputs=3, max_computes=4, depth=2), st.sampled_from([3, 64]))
def test_random_programs_proofs_answer_and_spend_as_alone(program, budget):
    inputs = [p for p in program.placeholders if p.dtype in ta.FLOAT_DTYPES]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(polynomial, "MAX_EXPANSIONS", budget)
        rec = _Recorder(mp)
        ta.JacobianRecursive(program.output, inputs, ta.placeholder(program.output.shape, "float64", "H"))
    for shared, alone in rec.pairs + rec.layered:
        assert shared == alone


def _mean_chain(n: int):
    """``n`` links ``P - mean(P)`` and ``tanh(P) * 0.9`` over 8 points; a loss at two."""
    X = ta.placeholder((8,), "float64", name="X")
    Y = X
    for k in range(n):
        if k % 4 == 3:
            r = ta.reduce_axis((0, 8), name="r")
            m = (lambda P, ax: ta.compute((), lambda: ta.sum(P[ax], axis=ax) * 0.125, name=f"m{k}"))(Y, r)
            Y = (lambda P, M: ta.compute((8,), lambda i: P[i] - M(), name=f"c{k}"))(Y, m)
        else:
            Y = (lambda P: ta.compute((8,), lambda i: ta.tanh(P[i]) * 0.9, name=f"t{k}"))(Y)
    return X, ta.compute((), lambda: Y[0] + Y[5] * 2.0, name="L")


def _mean_chain_loss(x, n: int) -> float:
    y = x.copy()
    for k in range(n):
        y = y - y.mean() if k % 4 == 3 else 0.9 * np.tanh(y)
    return y[0] + 2.0 * y[5]


def test_the_proofs_of_a_long_chain_walk_each_body_for_its_sums_once(monkeypatch):
    walked = []
    real = polynomial.walk
    monkeypatch.setattr(polynomial, "walk", lambda x: walked.append(x) or real(x))
    n = 96
    X, L = _mean_chain(n)
    (g,) = ta.gradient(L, [X])
    assert len(walked) <= 6 * n, len(walked)  # (430; each proof walked its nearest bodies: 10,837)
    x = np.linspace(-1, 1, 8)
    h, want = 1e-6, np.zeros(8)
    for j in range(8):
        e = np.zeros(8)
        e[j] = h
        want[j] = (_mean_chain_loss(x + e, n) - _mean_chain_loss(x - e, n)) / (2 * h)
    np.testing.assert_allclose(ta.evaluate(g, {X: x}), want, rtol=1e-5, atol=1e-9)
