"""Guard lifting shared between bodies equal up to renaming (simplify/sums/lift_sharing.py), and one
zero-proof for a sum and its scaled forms (polynomial.unscaled).

Counted, never timed.  The oracles: the optimizer's printout with sharing switched off
(``share_plans=False``), and the gradient of a chain of ``c * tanh`` steps from its NumPy
formula.  Bodies that differ only in a constant's bits, a shape or a dtype must not share.
"""

from __future__ import annotations

import numpy as np
from tensorad.simplify import Optimizer
from tensorad.simplify.context import OptimizerContext
from tensorad.simplify.zeros.polynomial import provably_zero

import tensorad as ta
from tensorad.autodiff import jacobian_recursive


def _step(P, c: float, name: str):
    return ta.compute(P.shape, lambda i: ta.tanh(P[i]) * c, name=name)


def _total(f, B, q):
    return ta.compute((), lambda: ta.sum(f(B[q]), axis=q)).op.body[0]


def _steps(X, consts, tag: str = ""):
    Y = X
    for k, c in enumerate(consts):
        Y = _step(Y, c, f"t{tag}{k}")
    return Y


def _gradient(consts, share: bool = True, other: dict | None = None):
    """The gradient of ``Y[0] + Y[9]``, ``Y`` a chain of ``Y = c * tanh(Y)`` steps from a
    16-vector ``X``; ``other``: a second chain (its input's ``size`` and ``dtype``, its
    ``consts``) whose elements 0 and 9 the loss adds."""
    X = ta.placeholder((16,), "float64", name="X")
    Y, inputs = _steps(X, consts), [X]
    if other is None:
        L = ta.compute((), lambda: Y[0] + Y[9], name="L")
    else:
        X2 = ta.placeholder((other["size"],), other["dtype"], name="X2")
        Y2, inputs = _steps(X2, other["consts"], "b"), [X, X2]
        L = ta.compute((), lambda: Y[0] + Y[9] + ta.cast("float64", Y2[0] + Y2[9]), name="L")
    H = ta.placeholder((), "float64", name="H")
    opt = Optimizer(share_plans=share)
    grads = opt.finish(jacobian_recursive(L, inputs, H, optimizer=opt))
    return X, H, grads, opt.context


def _text(grads) -> str:
    return "\n".join(ta.PrintTensorRecursively(g) for g in grads)


def test_a_chains_adjoints_are_lifted_once_and_renamed():
    X, H, g, ctx = _gradient([0.9] * 24)
    assert ctx.lifts.lifted <= 4 and ctx.lifts.renamed >= 20  # (was one lifting per adjoint)
    assert _text(g) == _text(_gradient([0.9] * 24, share=False)[2])


def test_shared_lifting_gives_the_chains_gradient():
    consts = [0.9, 1.1] * 6
    X, H, (g,), _ = _gradient(consts)
    x = np.random.default_rng(0).standard_normal(16)
    y, d = x.copy(), np.ones(16)
    for c in consts:  # d/dx of c * tanh(y) chained; the loss reads elements 0 and 9
        d, y = d * c * (1 - np.tanh(y) ** 2), c * np.tanh(y)
    want = np.zeros(16)
    want[[0, 9]] = d[[0, 9]]
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: np.array(1.0)}), want, rtol=1e-12)


def test_bodies_differing_in_a_constant_a_shape_or_a_dtype_are_not_shared():
    # two chains, the second's steps like the first's but for one thing: its adjoints must be
    # lifted on their own (a chain like the first: renamed from the first's)
    consts = [0.9] * 8
    same = _gradient(consts, other=dict(size=16, dtype="float64", consts=consts))[3].lifts.lifted
    nudged = [float(np.nextafter(0.9, 1.0))] * 8  # (the next double: 0.9 in every printout)
    for what, other in {"constant": dict(size=16, dtype="float64", consts=nudged),
                        "shape": dict(size=24, dtype="float64", consts=consts),
                        "dtype": dict(size=16, dtype="float32", consts=consts)}.items():
        X, H, g, ctx = _gradient(consts, other=other)
        assert ctx.lifts.lifted > same, what
        assert _text(g) == _text(_gradient(consts, share=False, other=other)[2]), what


def _sums(P, forms):
    """``sum_q B[q]`` in each of ``forms`` (``B = 2P - P - P``, zero only through ``A = 2P``'s
    body, which simplification does not see through)."""
    A = ta.compute((16,), lambda i: P[i] * 2.0, name="A")
    B = ta.compute((16,), lambda i: A[i] - P[i] - P[i], name="B")
    q = ta.reduce_axis((0, 16), name="q")
    return [_total(f, B, q) for f in forms]


def test_a_sum_and_its_scaled_forms_are_one_proof():
    P = ta.placeholder((16,), "float64", name="P")
    forms = [lambda b: b, lambda b: -b, lambda b: -b * 0.0625, lambda b: 2.0 * b]
    alone = OptimizerContext()
    assert provably_zero(_sums(P, forms[:1])[0], alone)
    ctx = OptimizerContext()
    assert all(provably_zero(s, ctx) for s in _sums(P, forms))
    assert ctx.counts == alone.counts and ctx.refuter.counts == alone.refuter.counts  # (was one per form)
    S = ta.compute((16,), lambda i: P[i] * 1.0 + 1.0, name="S")
    q = ta.reduce_axis((0, 16), name="q")
    for c, zero in ((3.0, False), (0.0, True), (float("inf"), False)):
        e = _total(lambda s, c=c: s * c, S, q)
        assert provably_zero(e, OptimizerContext()) is zero, c
