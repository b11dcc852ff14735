"""Nonzeroness conditions, simplification under facts, and splitting sums into terms."""

from __future__ import annotations

import itertools

import numpy as np
from tensorad.simplify import assume, simplify_expr
from tensorad.simplify.algebra.consts import evaluate_scalar
from tensorad.simplify.sums.split import expand, group_terms
from tensorad.simplify.zeros.nonzero import nonzero

import tensorad as ta
from tensorad.ir import TRUE, var

IV, JV = var("i", 0, 6), var("j", 0, 6)
X, Y = var("x", dtype="float32"), var("y", dtype="float32")


def test_nonzeroness_rules():
    a = ta.select(IV == JV, X, 0.0)
    b = ta.select(IV < 3, Y, 0.0)
    assert nonzero(a * b) is simplify_expr((IV == JV) & (IV < 3))
    assert nonzero(a + b) is simplify_expr((IV == JV) | (IV < 3))
    assert nonzero(-a / Y) is simplify_expr(IV == JV)
    assert nonzero(ta.tanh(a)) is simplify_expr(IV == JV)
    assert nonzero(ta.exp(a)) is TRUE
    assert nonzero(ta.cast("float32", IV < JV) * X) is simplify_expr(IV < JV)
    assert nonzero(ta.const(0.0)) is ta.const(False)


def test_nonzeroness_is_sound_at_every_point():
    exprs = [ta.select(IV == JV, X, 0.0) * ta.select(IV < 3, Y, 0.0) - ta.if_then_else(JV > 4, X, 0.0),
             ta.sqrt(ta.abs(ta.select(IV + JV == 5, X, 0.0))), ta.select(IV < JV, 0.0, Y) / (X + 3.0)]
    for e in exprs:
        nz = nonzero(e)
        for i, j in itertools.product(range(6), repeat=2):
            env = {IV: i, JV: j, X: np.float32(1.5), Y: np.float32(-2.0)}
            if not evaluate_scalar(nz, env):
                assert evaluate_scalar(e, env) == 0, (e, nz, env)


def test_nonzeroness_of_a_read_is_the_guard_of_the_tensor_read():
    A = ta.placeholder((6,), name="A")
    P = ta.compute((8,), lambda p: ta.if_then_else((p >= 1) & (p < 7), A[p - 1], 0.0), name="P")
    assert str(nonzero(P[IV + 2])) == "(i <= 4)"  # 1 <= i + 2 always holds


def test_assume_removes_the_guards_the_facts_decide():
    e = ta.select(IV == JV, X, 0.0) + ta.select(IV != JV, Y, 0.0)
    assert assume(e, [simplify_expr(IV == JV)]) is X


def test_expand_distributes_products_and_choices():
    d1 = ta.select(IV == JV, 1.0, 0.0)
    d2 = ta.select(IV + JV == 5, 1.0, 0.0)
    terms = expand(X * (d1 + d2) - ta.select(IV < 2, X, Y))
    assert len(terms) == 4
    groups = group_terms(simplify_expr(X * (d1 + d2)))
    assert [str(nz) for nz, _ in groups] == ["(i == j)", "((i + j) == 5)"]
    assert group_terms(simplify_expr(X * d1 + Y * d1)) is None  # one group: nothing to split


def test_a_tensors_guard_is_found_once_per_call(monkeypatch):
    # the optimizer asks for the nonzeroness of the same adjoint bodies again and again (519
    # guards of 74 tensors in the Transformer block's call): with a context, each tensor's
    # guard is computed once and each node's value is kept, with the same answers as without
    import importlib

    from tensorad.simplify import OptimizerContext

    nz = importlib.import_module("tensorad.simplify.zeros.nonzero")
    A = ta.placeholder((6, 6), name="A")
    T = ta.compute((6, 6), lambda i, j: ta.select(i <= j, A[i, j], 0.0), name="T")
    U = ta.compute((6,), lambda i: ta.select(i < 4, A[i, 0], 0.0), name="U")
    asked = [T[IV, JV] * X, T[JV, IV] + U[IV], U[JV] * T[IV, JV], T[IV, JV] * X]
    alone = [nonzero(e) for e in asked]
    guards = []
    real = nz._own_guard  # (where a guard is computed; a lookup of the call's table is not)
    monkeypatch.setattr(nz, "_own_guard", lambda t, table: guards.append(t) or real(t, table))
    ctx = OptimizerContext()
    assert [nonzero(e, ctx) for e in asked] == alone
    assert sorted(t.op.name for t in guards) == ["A", "T", "U"]  # (each once: A, a placeholder, too)


def test_a_sums_guard_is_what_every_disjunct_of_its_condition_requires():
    """A where-condition ``(p >= 1 && k < 2) || (p >= 1 && k > 4)`` is zero outside ``p >= 1``
    whatever ``k``: a read of the sum is nonzero only there."""
    A = ta.placeholder((8,), name="A")
    k = ta.reduce_axis((0, 8), name="k")
    S = ta.compute((8,), lambda p: ta.sum(A[k], axis=k, where=((p >= 1) & (k < 2)) | ((p >= 1) & (k > 4))),
                   name="S")
    assert str(nonzero(S[IV])) == "(1 <= i)"


def test_a_tensor_of_guarded_pieces_is_zero_outside_their_union():
    """An adjoint is often a guarded piece plus a scatter-add, ``if_then_else(i < 2, A[i], 0) + S[i]``
    with ``S`` a sum whose where-condition holds only at ``i >= 5``: the tensor is zero outside
    ``i < 2 || i >= 5``.  Its guard was taken only from a body that *is* a choice, so a read of such a
    tensor counted as nonzero everywhere, and a sum over it ran over the whole box.  A part that reads
    data (``A[i] > 0``) says nothing and is dropped; a chain of tensors is walked without recursion."""
    A = ta.placeholder((8,), name="A")
    k = ta.reduce_axis((0, 8), name="k")
    S = ta.compute((8,), lambda p: ta.sum(A[k], axis=k, where=(p >= 5) & (k < p)), name="S")
    T = ta.compute((8,), lambda i: ta.if_then_else(i < 2, A[i], 0.0) + S[i], name="T")
    assert nonzero(T[IV] * X) is simplify_expr((IV < 2) | (IV >= 5))
    D = ta.compute((8,), lambda i: ta.select(A[i] > 0.0, T[i], 0.0) * 2.0, name="D")
    assert nonzero(D[IV]) is simplify_expr((IV < 2) | (IV >= 5))
    E = ta.compute((8,), lambda i: ta.select(A[i] > 0.0, A[i], 0.0), name="E")
    assert nonzero(E[IV]) is TRUE
    C = T
    for n in range(3000):  # (a guard per link, none by recursion)
        C = ta.compute((8,), lambda i, C=C: C[i] * 0.5, name=f"c{n}")
    assert nonzero(C[IV]) is simplify_expr((IV < 2) | (IV >= 5))


def test_a_reduction_that_keeps_zeros_is_zero_where_every_term_is():
    """A combiner that folds zero terms to zero from a zero identity (a sum; the added part of a
    recurrence's pairs ``(a, b)``, ``b' = a_y b_x + b_y``) gives zero at an output whose terms are all
    zero: ``sum_k G[i, k]`` with ``G`` zero outside ``i < 3`` is zero outside ``i < 3``, and so is the
    recurrence of such terms.  The recurrence's product part (identity 1) and a max (identity ``-inf``)
    may be nonzero anywhere."""
    A = ta.placeholder((6, 6), name="A")
    k = ta.reduce_axis((0, 6), name="k")
    G = ta.compute((6, 6), lambda i, j: ta.select(i < 3, A[i, j], 0.0), name="G")
    S = ta.compute((6,), lambda i: ta.sum(G[i, k], axis=k), name="S")
    M = ta.compute((6,), lambda i: ta.max(G[i, k], axis=k), name="M")
    pairs = ta.comm_reducer(lambda x, y: (x[0] * y[0], y[0] * x[1] + y[1]),
                            lambda a, b: (ta.const(1.0, a), ta.const(0.0, b)), name="pairs")
    P, B = ta.compute((6,), lambda i: pairs((A[i, k], G[i, k]), axis=k), name="R")
    assert nonzero(S[IV]) is simplify_expr(IV < 3)
    assert nonzero(B[IV]) is simplify_expr(IV < 3)
    assert nonzero(P[IV]) is TRUE
    assert nonzero(M[IV]) is TRUE
