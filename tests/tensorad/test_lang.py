"""The language (API.md section 1): compute, reduce axes, reducers, lifting, determinism."""

from __future__ import annotations

import numpy as np

import tensorad as ta
from tensorad.ir import Op
from tensorad.lang import make_compute


def test_compute_names_axes_after_the_lambda_and_ranges_them():
    A = ta.placeholder((3, 4), name="A")
    T = ta.compute((4, 3), lambda row, col: A[col, row], name="T")
    assert [a.name for a in T.op.axes] == ["row", "col"]
    assert [a.dom for a in T.op.axes] == [(0, 4), (0, 3)]
    S = ta.compute((2, 2), lambda *idx: A[idx[0], idx[1]], name="S")
    assert len(S.op.axes) == 2


def test_reduce_axis_is_a_ranged_variable():
    k = ta.reduce_axis((2, 7), name="k")
    assert k.op is Op.VAR and k.dom == (2, 7) and k.extent == 5 and k.var is k


def test_tuple_body_gives_tensors_sharing_one_op():
    A = ta.placeholder((3,), name="A")
    P, Q, R = ta.compute((3,), lambda i: (A[i], A[i] * 2.0, ta.cast("int32", i)), name="PQR")
    assert P.op is Q.op is R.op
    assert [t.value_index for t in (P, Q, R)] == [0, 1, 2]
    assert R.dtype == "int32" and P.dtype == "float32"


def test_multi_value_reduction_is_one_op():
    A = ta.placeholder((3, 4), name="A")
    k = ta.reduce_axis((0, 4), "k")
    argmax = ta.comm_reducer(
        lambda x, y: (ta.select(x[1] >= y[1], x[0], y[0]), ta.select(x[1] >= y[1], x[1], y[1])),
        lambda t0, t1: (ta.const(-1, t0), ta.min_value(t1)), name="argmax")
    idx, val = ta.compute((3,), lambda i: argmax((k, A[i, k]), axis=k), name="am")
    assert idx.op is val.op and idx.op.is_reduction
    assert idx.op.reduce_axes == (k,)
    assert idx.dtype == "int32" and val.dtype == "float32"


def test_fidentity_receives_the_dtype_strings():
    seen = []

    def fidentity(*dtypes):
        seen.append(dtypes)
        return tuple(ta.const(0, d) for d in dtypes)

    pair_sum = ta.comm_reducer(lambda x, y: (x[0] + y[0], x[1] + y[1]), fidentity, name="pair_sum")
    A = ta.placeholder((3,), "float64", name="A")
    k = ta.reduce_axis((0, 3), "k")
    ta.compute((), lambda: pair_sum((A[k], k), axis=k), name="ps")
    assert seen == [("float64", "int32")]


def test_nested_reductions_are_lifted_into_their_own_tensors():
    A = ta.placeholder((3, 4), name="A")
    k = ta.reduce_axis((0, 4), "k")
    k2 = ta.reduce_axis((0, 4), "k2")
    M = ta.compute((3,), lambda i: ta.sum(A[i, k], axis=k) / 4.0 - ta.max(A[i, k2], axis=k2), name="M")
    body = M.op.body[0]
    assert all(n.op is not Op.REDUCE for n in ta.ir.walk(body))
    lifted = [t for t in ta.ir.op_reads(M.op) if not t.is_placeholder]
    assert [t.name for t in lifted] == ["M.red", "M.red2"]
    assert all(t.op.is_reduction and t.shape == (3,) for t in lifted)
    # the lifted tensor has its own axes, not M's
    assert not set(lifted[0].op.axes) & set(M.op.axes)


def test_a_whole_body_reduction_is_not_lifted():
    A = ta.placeholder((3, 4), name="A")
    k = ta.reduce_axis((0, 4), "k")
    S = ta.compute((3,), lambda i: ta.sum(A[i, k], axis=k), name="S")
    assert S.op.body[0].op is Op.REDUCE
    assert ta.ir.op_reads(S.op) == [A]


def test_reduction_in_a_where_condition_is_lifted():
    A = ta.placeholder((3, 4), name="A")
    k = ta.reduce_axis((0, 4), "k")
    k2 = ta.reduce_axis((0, 4), "k2")
    S = ta.compute((3,), lambda i: ta.sum(A[i, k], axis=k, where=A[i, k] < ta.max(A[i, k2], axis=k2)),
                   name="S")
    assert S.op.body[0].op is Op.REDUCE
    a = np.array([[1, 2, 3, 4], [4, 4, 1, 0], [2, 2, 2, 2]], np.float32)
    np.testing.assert_array_equal(ta.evaluate(S, {A: a}), [6, 1, 0])


def test_make_compute_builds_from_axis_variables():
    A = ta.placeholder((3,), name="A")
    i = ta.ir.var("i", 0, 3)
    (T,) = make_compute("T", (i,), (A[i] + 1.0,))
    assert T.shape == (3,) and T.op.axes == (i,)
    np.testing.assert_array_equal(ta.evaluate(T, {A: np.arange(3, dtype=np.float32)}), [1, 2, 3])


def test_select_and_if_then_else_unify_branches():
    A = ta.placeholder((3,), "float64", name="A")
    s = ta.select(A[0] > 0.0, A[1], 1)
    assert s.op is Op.SELECT and s.dtype == "float64"
    t = ta.if_then_else(A[0] > 0.0, 0, A[2])
    assert t.op is Op.IF_THEN_ELSE and t.dtype == "float64"


def test_min_value_and_max_value_constants():
    assert ta.min_value("float32").arg == -np.inf
    assert ta.max_value("int32").arg == np.iinfo(np.int32).max
    assert ta.min_value("int64").dtype == "int64"


def _build_program():
    X = ta.placeholder((4, 6), name="X")
    W = ta.placeholder((5, 6), name="W")
    k = ta.reduce_axis((0, 6), "k")
    Y = ta.compute((4, 5), lambda i, j: ta.sum(X[i, k] * W[j, k], axis=k), name="Y")
    k2 = ta.reduce_axis((0, 5), "k")
    m = ta.compute((4,), lambda i: ta.max(Y[i, k2], axis=k2), name="m")
    Z = ta.compute((4, 5), lambda i, j: ta.exp(Y[i, j] - m[i]) / (ta.sum(Y[i, k2], axis=k2) + 1.0),
                   name="Z")
    return Z


def test_building_the_same_program_twice_prints_the_same_text():
    first, second = _build_program(), _build_program()
    assert first.op is not second.op  # fresh variables and placeholders ...
    assert ta.PrintTensorRecursively(first) == ta.PrintTensorRecursively(second)  # ... same text
    assert [t.name for t in ta.ir.tensor_graph([first])] == [t.name for t in ta.ir.tensor_graph([second])]


def test_compute_with_zero_extent():
    A = ta.placeholder((3,), name="A")
    Z = ta.compute((0, 2), lambda i, j: A[i] * 2.0, name="Z")
    out = ta.evaluate(Z, {A: np.ones(3, np.float32)})
    assert out.shape == (0, 2) and out.dtype == np.float32


def test_a_body_without_nested_reductions_is_walked_not_rewritten(monkeypatch):
    """Building a compute checks its bodies in one walk each; only a body with a nested
    reduction is rewritten (lifting), so a pass's many ops are not rebuilt node by node."""
    import tensorad.lang.tensor_lang as tl

    rewrites, walks = [], []
    real_rewrite, real_walk = tl.rewrite, tl.walk
    monkeypatch.setattr(tl, "rewrite", lambda *a, **k: rewrites.append(1) or real_rewrite(*a, **k))
    monkeypatch.setattr(tl, "walk", lambda *a, **k: walks.append(1) or real_walk(*a, **k))
    A = ta.placeholder((3, 4), name="A")
    k = ta.reduce_axis((0, 4), "k")
    ta.compute((3,), lambda i: ta.sum(A[i, k] * 2.0, axis=k, where=k < 3), name="S")
    ta.compute((3, 4), lambda i, j: A[i, j] * A[i, 0] + 1.0, name="E")
    assert rewrites == [] and len(walks) == 2  # (before: a rewrite and three walks per body)
    k2 = ta.reduce_axis((0, 4), "k2")
    M = ta.compute((3,), lambda i: ta.sum(A[i, k2], axis=k2) / 4.0, name="M")
    assert rewrites and [t.name for t in ta.ir.op_reads(M.op)] == ["M.red"]


def test_axis_names_of_plain_functions_are_read_without_inspect(monkeypatch):
    # inspect.signature cost more than the rest of defining a small compute (a 10,000-op chain's
    # define phase): a plain function's positional names come from its code object, the same
    # names inspect gives; anything else still asks inspect
    import functools
    import inspect

    from tensorad.lang import tensor_lang

    def positional(i, j, /, k, m=1, *rest, key=2, **kw):
        return i

    def star(*idx):
        return idx[0]

    def none(*, key=2):
        return 0.0

    class Call:
        def __call__(self, a, b):
            return a

        def method(self, p, q):
            return p

    @functools.wraps(positional)
    def wrapper(x, y):
        return x

    def reference(fn):  # (the rule before: inspect's parameters)
        params = list(inspect.signature(fn).parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return ([p.name for p in positional], sum(p.default is p.empty for p in positional),
                bool(params) and params[0].kind is inspect.Parameter.VAR_POSITIONAL)

    plain = [positional, star, none, lambda: 0.0, lambda i, j: i]
    other = [Call(), Call().method, wrapper, functools.partial(positional, 1)]
    want = [reference(fn) for fn in plain + other]
    calls = []
    monkeypatch.setattr(inspect, "signature", lambda fn, *a, **k: calls.append(fn) or _signature(fn, *a, **k))
    X = ta.placeholder((3, 4), "float32", "X")
    Y = ta.compute((3, 4), lambda row, col: X[row, col] * 2.0, "Y")
    assert [a.name for a in Y.op.axes] == ["row", "col"] and calls == []
    got = [tensor_lang._positional(fn) for fn in plain + other]
    assert got == want
    assert calls == other  # (the plain functions' names came from their code)


_signature = __import__("inspect").signature
