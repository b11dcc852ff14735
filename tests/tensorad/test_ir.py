"""The IR: hash-consing, immutability, truth values, dtypes, and the fold/rewrite traversals."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import tensorad as ta
from tensorad import ir
from tensorad.ir import MissingRuleError, Op


def test_structural_equality_is_identity():
    A = ta.placeholder((3, 3), name="A")
    i = ir.var("i", 0, 3)
    e1 = ta.exp(A[i, 2] * 2.0 + 1.0)
    e2 = ta.exp(A[i, 2] * 2.0 + 1.0)
    assert e1 is e2
    assert len({e1, e2}) == 1
    assert {e1: "x"}[e2] == "x"
    assert A[i, 2] in [A[i, 1], A[i, 2]]


def test_a_node_is_made_and_found_without_python_calls_and_its_entry_goes_with_it():
    # the table is a plain dict of weak references that know their key: making a node, and
    # finding one made already, calls no Python function outside expr.py (a
    # WeakValueDictionary's get, set and references' constructors were Python calls, two
    # thirds of a node's making and freeing); a dead node's entry goes at once, never a live one's
    import gc
    import os
    import sys

    from tensorad.ir import expr as E

    i = ir.var("i", 0, 3)
    calls: list[str] = []

    def profile(frame, event, arg):
        if event == "call":
            calls.append(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        made = E.Expr(Op.ADD, i.dtype, (i, i))
        found = E.Expr(Op.ADD, i.dtype, (i, i))
    finally:
        sys.setprofile(None)
    assert made is found and calls and {os.path.basename(f) for f in calls} == {"expr.py"}
    key = (Op.ADD, i.dtype, (id(i), id(i)), None)  # (its key, as Expr.__new__ makes it)
    E._drop(E._TABLE[key])  # (a live node's reference: kept)
    assert E._TABLE[key]() is made
    del made, found
    gc.collect()
    assert key not in E._TABLE
    again = E.Expr(Op.ADD, i.dtype, (i, i))
    assert E._TABLE[key]() is again and again.src == (i, i)


def test_equal_names_are_different_variables_and_placeholders():
    i1, i2 = ir.var("i", 0, 3), ir.var("i", 0, 3)
    assert i1 is not i2 and i1.arg.uid != i2.arg.uid
    A1, A2 = ta.placeholder((3,), name="A"), ta.placeholder((3,), name="A")
    assert A1 != A2 and A1[0] is not A2[0]


def test_constants_keep_type_apart():
    assert ir.const(1) is not ir.const(1.0)
    assert ir.const(1) is not ir.const(True)
    assert ir.const(1.0, "float32") is not ir.const(1.0, "float64")
    assert ir.const(1.0, "float32") is ir.const(1, "float32")


def test_nodes_are_immutable():
    e = ta.placeholder((2,), name="A")[0] + 1.0
    with pytest.raises(AttributeError, match="immutable"):
        e.op = Op.SUB
    with pytest.raises(AttributeError):
        e.dtype = "float64"


def test_bool_of_eq_is_identity_and_other_bools_raise():
    A = ta.placeholder((3,), name="A")
    a, b = A[0] + 1.0, A[1] + 1.0
    assert isinstance(a == b, ir.Expr) and (a == b).op is Op.EQ
    assert bool(a == (A[0] + 1.0)) is True
    assert bool(a == b) is False
    assert bool(a != b) is True
    for cond in (a < b, a <= b, a > b, a >= b, (a < b) & (a > b), ~(a < b), a + b):
        with pytest.raises(TypeError, match="ta.select"):
            bool(cond)
    assert bool(ir.TRUE) and not bool(ir.FALSE)


def test_an_expression_is_not_iterable():
    with pytest.raises(TypeError):
        list(ta.placeholder((2,), name="A")[0])


def test_pickle_round_trip_gives_the_same_node():
    A = ta.placeholder((3,), name="A")
    e = ta.sigmoid(A[1]) / 3.0
    assert pickle.loads(pickle.dumps(e)) is e


def test_dtype_promotion_is_explicit():
    A = ta.placeholder((3,), "float64", name="A")
    i = ir.var("i", 0, 3)
    e = A[i] + i  # int32 index meets float64: the index is cast
    assert e.dtype == "float64"
    assert e.src[1].op is Op.CAST and e.src[1].src[0] is i
    assert (i + 2).dtype == "int32" and (i + 2).src[1] is ir.const(2)
    assert ta.exp(i).dtype == "float32"  # math on integers computes in float32
    assert ta.power(i, 2).dtype == "float32"
    assert (A[i] > 0.0).dtype == "bool"
    assert ta.cast("float64", A[i]) is A[i]  # a no-op cast builds nothing


def test_integer_true_division_is_an_error():
    i = ir.var("i", 0, 3)
    with pytest.raises(TypeError, match="//"):
        i / 2
    assert (i // 2).op is Op.FLOORDIV and (i % 2).op is Op.MOD


def test_reads_are_int32_indexed():
    A = ta.placeholder((3,), name="A")
    j = ir.var("j", 0, 3, dtype="int64")
    r = A[j]
    assert r.op is Op.READ and r.src[0].dtype == "int32" and r.arg is A


def test_walk_is_post_order_and_visits_shared_nodes_once():
    A = ta.placeholder((3,), name="A")
    x = A[0]
    e = (x + 1.0) * (x + 1.0)
    nodes = list(ir.walk(e))
    assert nodes[-1] is e
    assert len(nodes) == len(set(nodes))
    assert nodes.index(x) < nodes.index(x + 1.0) < nodes.index(e)



def test_walk_is_the_recursive_left_to_right_post_order():
    # (the iterative walk must keep the order every pass and printer relies on)
    A = ta.placeholder((3,), name="A")
    i, j = ir.var("i", 0, 3), ir.var("j", 0, 3)
    x, y = A[i], A[j]
    s = x * y + 1.0
    e = ta.select(x < y, s * s, (y - x) * s) + ta.exp(s) * x

    def reference(n, seen, out):
        if n in seen:
            return out
        seen.add(n)
        for c in n.src:
            reference(c, seen, out)
        out.append(n)
        return out

    for root in (e, s, x, i, ir.const(2.0)):
        assert list(ir.walk(root)) == reference(root, set(), [])

def test_fold_with_a_table_and_a_missing_rule():
    i = ir.var("i", 0, 9)
    e = (i + 2) * 3
    table = {Op.VAR: lambda n: 4, Op.CONST: lambda n: n.arg,
             Op.ADD: lambda n, a, b: a + b, Op.MUL: lambda n, a, b: a * b}
    assert ir.fold(e, table) == 18
    with pytest.raises(MissingRuleError, match="SUB"):
        ir.fold(i - 1, table)


def test_fold_and_rewrite_handle_deep_expressions():
    i = ir.var("i", 0, 9)
    e = i
    for _ in range(5000):
        e = e + 1
    assert ir.fold(e, {Op.VAR: lambda n: 0, Op.CONST: lambda n: n.arg,
                       Op.ADD: lambda n, a, b: a + b}) == 5000
    j = ir.var("j", 0, 9)
    assert ir.free_vars(ir.substitute(e, {i: j})) == [j]


def test_rewrite_to_a_fixed_point():
    i = ir.var("i", 0, 9)
    zero = ir.const(0)

    def rules(n):  # x + 0 -> x ; x * 1 -> x
        if n.op is Op.ADD and n.src[1] is zero:
            return n.src[0]
        if n.op is Op.MUL and n.src[1] is ir.const(1):
            return n.src[0]
        return None

    assert ir.rewrite(((i + 0) * 1 + 0) * 1, rules) is i


def test_free_vars_exclude_reduce_axes():
    A = ta.placeholder((3, 3), name="A")
    i = ir.var("i", 0, 3)
    k = ta.reduce_axis((0, 3), "k")
    red = ta.sum(A[i, k], axis=k)
    assert ir.free_vars(red) == [i]


def test_tensor_graph_orders_producers_first_and_is_deterministic():
    A = ta.placeholder((3,), name="A")
    B = ta.placeholder((3,), name="B")
    C = ta.compute((3,), lambda i: A[i] * B[i], name="C")
    D = ta.compute((3,), lambda i: C[i] + A[i], name="D")
    E = ta.compute((3,), lambda i: D[i] - C[i], name="E")
    graph = ir.tensor_graph([E])
    names = [t.name for t in graph]
    assert names == ["A", "B", "C", "D", "E"]
    assert all(names.index(d.name) < names.index(t.name)
               for t in graph if not t.is_placeholder for d in ir.op_reads(t.op))
    assert ir.tensor_graph([E]) == graph
    assert ir.placeholders([E]) == [A, B]


def test_reducer_instances_are_cached_so_equal_reductions_hash_cons():
    A = ta.placeholder((3, 3), name="A")
    i = ir.var("i", 0, 3)
    k = ta.reduce_axis((0, 3), "k")
    assert ta.sum(A[i, k], axis=k) is ta.sum(A[i, k], axis=k)
    assert ta.sum(A[i, k], axis=k) is not ta.max(A[i, k], axis=k)


def test_tensor_attributes():
    X = ta.placeholder((2, 5), "float64", name="X")
    Y = ta.compute((5,), lambda j: X[0, j] * 2.0, name="Y", tag="elemwise")
    assert X.shape == (2, 5) and X.ndim == 2 and X.dtype == "float64" and X.name == "X"
    assert Y.shape == (5,) and Y.dtype == "float64" and Y.op.tag == "elemwise"
    assert isinstance(Y.shape[0], int) and len(Y) == 5
    s = ta.placeholder((), name="s")
    assert s.shape == () and s.ndim == 0
    with pytest.raises(TypeError):
        len(s)


def test_numpy_scalars_and_dtypes_are_accepted():
    X = ta.placeholder((np.int64(3),), np.dtype("float32"), name="X")
    assert X.shape == (3,) and X.dtype == "float32"
    e = X[np.int32(1)] * np.float32(2.0)
    assert e.dtype == "float32"


def test_tensor_and_op_hashes_are_computed_once(monkeypatch):
    # compile time: every table of the compiler is keyed by tensors and ops, and the generated
    # dataclass __hash__ rebuilt the field tuple (op -> provenance -> role) at each lookup
    from tensorad.ir.tensor import Provenance

    calls = {"n": 0}
    real = Provenance.__hash__

    def counting(self):
        calls["n"] += 1
        return real(self)

    monkeypatch.setattr(Provenance, "__hash__", counting)
    X = ta.placeholder((16,), "float64", name="X")
    Y = X
    for k in range(20):
        Y = (lambda P: ta.compute((16,), lambda i: ta.tanh(P[i]) * 0.9 + P[i], name=f"c{k}"))(Y)
    L = ta.compute((), lambda: Y[0] + Y[9], name="L")
    (g,) = ta.gradient(L, [X])
    ta.lower([g], [X])
    ops = {t.op for t in __import__("tensorad.ir.rewrite", fromlist=["x"]).tensor_graph([g])}
    assert calls["n"] <= 4 * len(ops) + 100, (calls["n"], len(ops))


def test_a_kept_hash_is_read_without_recomputing_it(monkeypatch):
    # every table of the optimizer is keyed by tensors and ops: once kept, a hash is one
    # attribute read (the helper that computes and keeps it is not called again)
    from tensorad.ir import tensor as tensor_mod

    X = ta.placeholder((4,), name="X")
    Y = ta.compute((4,), lambda i: X[i] * 2.0, name="Y")
    first = (hash(Y), hash(Y.op), hash(X.op))
    calls = []
    real = tensor_mod._compute_hash
    monkeypatch.setattr(tensor_mod, "_compute_hash", lambda o: calls.append(o) or real(o))
    assert (hash(Y), hash(Y.op), hash(X.op)) == first and not calls
    Z = ta.compute((4,), lambda i: X[i] * 3.0, name="Z")
    assert hash(Z) == hash((Z.op, 0)) and len(calls) == 2  # (computed once: tensor and op)


@pytest.mark.slow
def test_a_hashed_tensor_pickles_without_its_hash():
    # string hashes differ between processes: a kept hash must not travel with the tensor
    import subprocess
    import sys

    code = r"""
import pickle, sys
import tensorad as ta
if sys.argv[1] == "dump":
    X = ta.placeholder((4,), "float64", name="X")
    Y = ta.compute((4,), lambda i: X[i] * 2.0, name="Y")
    hash(Y), hash(Y.op), hash(X.op)
    sys.stdout.buffer.write(pickle.dumps((Y, X)))
else:
    Y, X = pickle.loads(sys.stdin.buffer.read())
    p, o = X.op, Y.op
    assert hash(p) == hash((p.name, p.shape, p.dtype, p.uid))
    assert hash(o) == hash((o.name, o.tag, o.axes, o.body, o.attrs, o.provenance))
    assert hash(Y) == hash((o, Y.value_index))
    print("ok")
"""
    env = dict(__import__("os").environ, PYTHONHASHSEED="1")
    data = subprocess.run([sys.executable, "-c", code, "dump"], capture_output=True, env=env,
                          check=True).stdout
    env["PYTHONHASHSEED"] = "2"
    out = subprocess.run([sys.executable, "-c", code, "load"], input=data, capture_output=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == b"ok", out.stderr[-2000:]


def test_copies_are_fresh_variables_of_the_same_names_ranges_and_dtypes_and_box_counts_their_points():
    """``ir.expr.copies`` (the one helper passes and autodiff use for fresh axes) keeps each variable's
    name, range and dtype and shares no identity with it; ``box`` is the product of the extents."""
    from tensorad.ir.expr import box, copies, var

    axes = (var("i", 0, 3), var("j", 2, 7, "int64"))
    new = copies(axes)
    assert [(v.name, v.lo, v.hi, v.dtype) for v in new] == [("i", 0, 3, "int32"), ("j", 2, 7, "int64")]
    assert all(a is not b for a, b in zip(axes, new))
    assert box(axes) == 3 * 5 == box(new) and box(()) == 1
