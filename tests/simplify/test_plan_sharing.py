"""Elimination plans shared between sums equal up to their variables (simplify/sums/plan_key.py).

A plan renamed from another sum's must be the plan isl would give for the sum's own variables.
The oracles: the plan made without sharing (``share_plans=False`` through the context), for
variables chosen so that a sequential renaming would be wrong, and the optimizer's printed
output on real gradients with sharing switched off.  The counts say the sharing happens.
"""

from __future__ import annotations

import simplify_workloads as W
from tensorad.simplify import Optimizer
from tensorad.simplify.context import OptimizerContext
from tensorad.simplify.sums.eliminate import make_plan

import tensorad as ta
from tensorad.autodiff import jacobian_recursive
from tensorad.ir.expr import var


def _plan(outer, rvars, affine, share):
    ctx = OptimizerContext(share_plans=share)
    return make_plan(outer, rvars, affine, ctx=ctx), ctx


def test_a_renamed_plan_is_the_plan_of_its_own_variables():
    # i0, i1, i2 alike (name, range) and made in that order: the question over (i1, i2) has
    # the shape of the one over (i0, i1), and i1 is both a new and an old variable -- renaming
    # one after the other would send k2 to i2.
    i0, i1, i2 = (var("i", 0, 8) for _ in range(3))
    k, k2 = var("k", 0, 16), var("k", 0, 16)
    ctx = OptimizerContext()
    first = make_plan([i0, i1], [k], [k == i0 + i1], ctx=ctx)
    second = make_plan([i1, i2], [k2], [k2 == i1 + i2], ctx=ctx)
    assert ctx.counts["plan"] == 1 and ctx.counts["plan renamed"] == 1
    alone, _ = _plan([i1, i2], [k2], [k2 == i1 + i2], share=False)
    assert second == alone
    assert dict(second.mapping)[k2] is dict(alone.mapping)[k2]
    assert dict(first.mapping)[k] is not dict(second.mapping)[k2]


def test_a_deskewed_variable_is_made_again_for_each_sum():
    # a window sum: kh deskewed to a fresh variable, which two sums must not share
    h, oh = var("h", 0, 16), var("oh", 0, 7)
    h2, oh2 = var("h", 0, 16), var("oh", 0, 7)
    ctx = OptimizerContext()
    a = make_plan([h], [oh], [h >= 2 * oh, h <= 2 * oh + 2], ctx=ctx)
    b = make_plan([h2], [oh2], [h2 >= 2 * oh2, h2 <= 2 * oh2 + 2], ctx=ctx)
    alone, _ = _plan([h2], [oh2], [h2 >= 2 * oh2, h2 <= 2 * oh2 + 2], share=False)
    assert ctx.counts["plan renamed"] == 1
    assert a.rvars and a.rvars[0] is not oh  # (deskewed: a new variable)
    assert b.rvars[0] is not a.rvars[0]
    new, own = b.rvars[0], alone.rvars[0]
    assert (new.name, new.lo, new.hi) == (own.name, own.lo, own.hi)
    assert str(b.cond) == str(alone.cond)
    assert [str(v) for _, v in b.mapping] == [str(v) for _, v in alone.mapping]


def _transformer():
    from benchmarks import sys_tensorad, workloads

    w = workloads.BY_NAME["transformer_block"]
    ints = w.params.get("ints", {})
    p = {k: ta.placeholder(s, "int32" if k in ints else "float32", k)
         for k, s in w.input_shapes(tiny=True).items()}
    Y = sys_tensorad.topi_forward(w.kind, p, w.params)
    return Y, [p[g] for g in w.grads]


def _gradients(build, share: bool) -> tuple[str, OptimizerContext]:
    Y, inputs = build()
    opt = Optimizer(share_plans=share)
    grads = opt.finish(jacobian_recursive(Y, inputs, ta.placeholder(Y.shape, name="H"), optimizer=opt))
    return "\n".join(ta.PrintTensorRecursively(g) for g in grads), opt.context


def test_the_transformer_blocks_gradient_is_the_same_without_plan_sharing():
    # the time bar: the block's split terms and adjoints asked isl for 75 plans, 35 of
    # them different up to their variables.
    shared, ctx = _gradients(_transformer, True)
    alone, ctx_alone = _gradients(_transformer, False)
    assert shared == alone
    assert ctx_alone.counts["plan"] >= 70
    assert ctx.counts["plan"] <= 40 and ctx.counts["plan renamed"] >= 30
    # isl asked only about variables a condition mentions
    assert ctx.counts["solve"] <= 180 and ctx.counts["lower bounds"] <= 12


def test_a_variable_no_condition_mentions_is_kept_without_asking_isl():
    i, j, k = var("i", 0, 8), var("j", 0, 8), var("k", 0, 5)
    for share in (True, False):
        plan, ctx = _plan([i, j], [k], [i <= j], share)
        assert plan.rvars == (k,) and not plan.mapping and ctx.counts["solve"] == 0
    one = var("u", 2, 3)  # a single value: determined, so isl is asked
    plan, ctx = _plan([i], [one, k], [i <= 6], True)
    assert dict(plan.mapping)[one].op.name == "CONST" and plan.rvars == (k,)
    assert ctx.counts["solve"] >= 1


def test_work_workloads_are_the_same_without_plan_sharing():
    for name in ("causal_attention", "upsampling_bilinear", "group_norm(G=2)", "max_pool(k=3,s=2,p=0)"):
        wl = next(w for w in W.all_workloads() + W.family_workloads() if w.name == name)

        def build(wl=wl):
            return wl.output, wl.inputs

        shared, ctx = _gradients(build, True)
        alone, _ = _gradients(build, False)
        assert shared == alone, name


def _tanh_grid_chain(n: int):
    """``n`` links ``tanh(P) * 0.9`` over a 5 x 6 grid; the loss reads two points, so every
    adjoint is zero but at ``(i, j) = (0, 1), (2, 4)``: a guard over two axes, renamed."""
    X = ta.placeholder((5, 6), "float64", name="X")
    Y = X
    for k in range(n):
        Y = (lambda P: ta.compute((5, 6), lambda i, j: ta.tanh(P[i, j]) * 0.9, name=f"t{k}"))(Y)
    return X, ta.compute((), lambda: Y[0, 1] + Y[2, 4] * 2.0, name="L")


def test_a_lifted_guard_renamed_is_the_guard_of_its_own_axes():
    import numpy as np

    printed = {}
    for share in (True, False):
        X, L = _tanh_grid_chain(6)
        opt = Optimizer(share_plans=share)
        (g,) = opt.finish(jacobian_recursive(L, [X], None, optimizer=opt))
        printed[share] = ta.PrintTensorRecursively(g)
        if share:
            assert opt.context.counts["box guard"] <= 3, opt.context.counts  # (of 6 links)
            x = np.linspace(-1, 1, 30).reshape(5, 6)
            y, d = x.copy(), np.ones((5, 6))
            for _ in range(6):  # d/dx of 0.9 tanh(y): 0.9 (1 - tanh(y)^2)
                y, d = 0.9 * np.tanh(y), d * 0.9 * (1 - np.tanh(y) ** 2)
            want = np.zeros((5, 6))
            want[0, 1], want[2, 4] = d[0, 1], 2 * d[2, 4]
            np.testing.assert_allclose(ta.evaluate(g, {X: x}), want, rtol=1e-12)
    assert printed[True] == printed[False]


def _affinity_questions(monkeypatch) -> list:
    """The conditions isl is asked whether it represents them (``IndexSpace.is_affine``)."""
    from tensorad.poly.affine import IndexSpace

    asked: list = []
    real = IndexSpace.is_affine
    monkeypatch.setattr(IndexSpace, "is_affine", lambda self, c: asked.append(c) or real(self, c))
    return asked


def test_an_affinity_answer_is_shared_only_by_conditions_equal_up_to_renaming(monkeypatch):
    from tensorad.simplify.sums.eliminate import split_affine

    asked = _affinity_questions(monkeypatch)
    ctx = OptimizerContext()
    i0, i1, i2 = (var("i", 0, 8) for _ in range(3))
    assert split_affine([(i0 == 2) | (i0 == 5)], [i0], ctx) == ([(i0 == 2) | (i0 == 5)], [])
    assert split_affine([(i1 == 2) | (i1 == 5)], [i1], ctx) == ([(i1 == 2) | (i1 == 5)], [])
    assert len(asked) == 1  # (the second is the first renamed)
    # a constant, an operation or a range apart: asked again, answered for itself
    assert split_affine([(i2 == 3) | (i2 == 5)], [i2], ctx)[0] == [(i2 == 3) | (i2 == 5)]
    assert split_affine([i2 * i2 == 4], [i2], ctx) == ([], [i2 * i2 == 4])
    j = var("i", 0, 9)
    assert split_affine([(j == 2) | (j == 5)], [j], ctx)[0] == [(j == 2) | (j == 5)]
    assert len(asked) == 4 and ctx.counts["affine test"] == 4


def test_a_long_chains_adjoints_ask_isl_about_their_guard_once(monkeypatch):
    import numpy as np

    asked = _affinity_questions(monkeypatch)
    printed = {}
    for share in (True, False):
        asked.clear()
        X, L = _tanh_grid_chain(12)
        opt = Optimizer(share_plans=share)
        (g,) = opt.finish(jacobian_recursive(L, [X], None, optimizer=opt))
        printed[share] = ta.PrintTensorRecursively(g)
        if share:
            assert len(asked) <= 4, len(asked)  # (not once per link: 12 and more)
    assert printed[True] == printed[False]
    x = np.linspace(-1, 1, 30).reshape(5, 6)
    y, d = x.copy(), np.ones((5, 6))
    for _ in range(12):
        y, d = 0.9 * np.tanh(y), d * 0.9 * (1 - np.tanh(y) ** 2)
    want = np.zeros((5, 6))
    want[0, 1], want[2, 4] = d[0, 1], 2 * d[2, 4]
    np.testing.assert_allclose(ta.evaluate(g, {X: x}), want, rtol=1e-12)
