"""A fused pass whose column sums add into partial columns keeps those temporaries when its float32
sums are blocked.

A group norm's gradient runs its statistics, ``dX`` and the column sums ``dgamma``, ``dbeta`` in one
parallel pass, each chunk of rows adding into partial columns the nest owns.  Blocking the pass's long
float32 sums (and fusing a fill into a nest, or bounding its rows at runtime) rebuilt the nest without
its temporaries, so the program did not allocate them and ``ta.build`` failed with a ``KeyError`` on
``gamma.grad.partial``."""

import numpy as np
from tensorad.codegen.program import Nest

import tensorad as ta

TARGET = "llvm -mcpu=haswell"


def _group_norm_grads():
    X = ta.placeholder((2, 8, 70, 70), "float32", "X")
    gamma = ta.placeholder((8,), "float32", "gamma")
    beta = ta.placeholder((8,), "float32", "beta")
    Y = ta.topi.nn.group_norm(X, 4, gamma, beta)
    H = ta.placeholder(Y.shape, "float32", "H")
    return [X, gamma, beta, H], list(ta.JacobianRecursive(Y, [X, gamma, beta], H))


def test_the_fused_pass_keeps_its_partial_columns_among_the_program_temporaries():
    inputs, grads = _group_norm_grads()
    program = ta.lower(grads, inputs, target=TARGET, parallel_min_work=0).program
    own = [b for st in program.steps if isinstance(st, Nest) for b in st.temps]
    assert {b.name for b in own} == {"gamma.grad.partial", "beta.grad.partial"}
    assert all(b in program.temps for b in own)


def test_the_group_norm_gradient_builds_and_matches_the_evaluator():
    inputs, grads = _group_norm_grads()
    kernel = ta.build(grads, inputs, target=TARGET, parallel_min_work=0)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(t.shape).astype(np.float32) for t in inputs]
    got = kernel(*arrays)
    want = ta.evaluate(grads, {t: a.astype(np.float64) for t, a in zip(inputs, arrays)})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)
