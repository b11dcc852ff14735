"""Leading loops built outside isl's AST builder (:func:`tensorad.codegen.loops.isl_ast._peel`).

A time dimension that every statement of a nest scans by one of its own variables over the
same range, and that no other constraint mentions (a batch or channel loop), is a plain loop
around the rest; isl is asked to scan only the rest, which costs it about half the time on a
convolution gradient's nests.  The loops must be exactly those isl builds for the whole
schedule: programs are lowered with and without the peeling and their loop programs compared
as text; the dimensions isl sees are counted; values are checked against NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.codegen.loops import isl_ast as islast
from tensorad.codegen.loops.domain import PolyStmt
from tensorad.codegen.loops.work import count_work
from tensorad.codegen.program import Buffer, Store

import tensorad as ta
from tensorad.ir.expr import var
from tensorad.poly.affine import IndexSpace

F64 = "float64"


def _conv_relu_grad(stride: int, shape=(2, 3, 7, 7), out_channels: int = 4):
    X = ta.placeholder(shape, F64, name="X")
    W = ta.placeholder((out_channels, shape[1], 3, 3), F64, name="W")
    Y = ta.topi.nn.relu(ta.topi.nn.conv2d(X, W, stride, 1))
    H = ta.placeholder(Y.shape, F64, name="H")
    return list(ta.JacobianRecursive(Y, [X, W], H)), [X, W, H]


def _max_pool_grad():
    X = ta.placeholder((2, 3, 9, 9), F64, name="X")
    Y = ta.topi.nn.pool(X, (3, 3), (2, 2), [1, 1, 1, 1], "max")
    H = ta.placeholder(Y.shape, F64, name="H")
    return list(ta.JacobianRecursive(Y, [X], H)), [X, H]


def _causal_attention_grad():
    Q, K, V = (ta.placeholder((2, 6, 4), F64, name=n) for n in "QKV")
    Y = ta.topi.nn.scaled_dot_product_attention(Q, K, V, causal=True)
    H = ta.placeholder(Y.shape, F64, name="H")
    return list(ta.JacobianRecursive(Y, [Q, K, V], H)), [Q, K, V, H]


def _layer_norm_grad():
    X = ta.placeholder((5, 12), F64, name="X")
    g = ta.placeholder((12,), F64, name="g")
    b = ta.placeholder((12,), F64, name="b")
    Y = ta.topi.nn.layer_norm(X, g, b)
    H = ta.placeholder(Y.shape, F64, name="H")
    return list(ta.JacobianRecursive(Y, [X, g, b], H)), [X, g, b, H]


def _mod_domain():
    H = ta.placeholder((4,), F64, name="H")
    Z = ta.compute((2, 5, 4), lambda a, b, c: ta.if_then_else((2 * a - b + c) % 5 == 0, H[c], 0.0), name="Z")
    return [Z], [H]


def _sibling_column_sums():
    """Two sums in one strip-form pass whose first loop runs the reduction variable, which
    comes after the output's among the statement's variables (the peeled
    loops were matched to the variables in position order, swapping them)."""
    X = ta.placeholder((3,), F64, name="X")
    r, s = ta.reduce_axis((0, 2), "r"), ta.reduce_axis((0, 2), "s")
    A = ta.compute((16,), lambda i: ta.sum(X[(r + 2) % 3], axis=r, where=i >= 9), name="A")
    B = ta.compute((16,), lambda i: ta.sum(X[(s + 2) % 3] * 2.0, axis=s, where=i >= 9), name="B")
    return [A, B], [X]


# (16 channels: the products take the packed micro-kernel, as a real layer's do)
PRODUCT = dict(shape=(2, 16, 12, 12), out_channels=16)
PROGRAMS = {"conv_relu_s1": lambda: _conv_relu_grad(1), "conv_relu_s2": lambda: _conv_relu_grad(2),
            "conv_relu_product": lambda: _conv_relu_grad(1, **PRODUCT),
            "max_pool_3s2": _max_pool_grad, "causal_attention": _causal_attention_grad,
            "layer_norm": _layer_norm_grad, "mod_domain": _mod_domain,
            "sibling_column_sums": _sibling_column_sums}


def _unpeeled(stmts):
    return [], list(stmts), [()] * len(stmts)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_peeled_loops_are_isl_loops(name, monkeypatch):
    outs, ins = PROGRAMS[name]()
    peeled = ta.lower(outs, ins)
    with monkeypatch.context() as m:
        m.setattr(islast, "_peel", _unpeeled)
        whole = ta.lower(outs, ins)
    assert str(peeled) == str(whole)
    assert peeled.work == whole.work


def _dims_isl_scans(outs, ins, monkeypatch) -> list[int]:
    seen: list[int] = []
    real = islast.schedule_map

    def recording(stmts, names=None):
        seen.append(max(len(s.schedule) for s in stmts))
        return real(stmts, names)

    monkeypatch.setattr(islast, "schedule_map", recording)
    ta.lower(outs, ins)
    return seen


def test_conv_gradient_nests_reach_isl_without_their_batch_loops(monkeypatch):
    """The widest nest of a convolution's gradient -- the weight gradient's, 8 time
    dimensions -- reaches isl without its two outer loops (all 8 before); the others have at
    most 7 (their first dimension scans two axes at once, which isl keeps)."""
    outs, ins = _conv_relu_grad(1, **PRODUCT)
    dims = _dims_isl_scans(outs, ins, monkeypatch)
    assert dims and max(dims) <= 7 and 6 in dims


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_gradient_values(stride):
    outs, ins = _conv_relu_grad(stride)
    rng = np.random.default_rng(stride)
    feed = [rng.standard_normal(t.shape) for t in ins]
    got = ta.build(outs, ins)(*feed)
    want = ta.evaluate(outs, dict(zip(ins, feed)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def _stmt(space_vars, domain, schedule, name="S"):
    H = ta.placeholder(tuple(v.hi for v in space_vars), F64, name="H")
    buf = Buffer(name, H.shape, F64, "output", H)
    return PolyStmt(name, tuple(space_vars), domain, (Store(buf, tuple(space_vars), ta.const(1.0, F64)),),
                    tuple(schedule))


def test_peel_takes_a_box_loop_and_leaves_one_dimension():
    a, i = var("a", 0, 8), var("i", 0, 4)
    space = IndexSpace([a, i])
    box, inner, positions = islast._peel([_stmt([a, i], space.box(), [a, i])])
    assert box == [(0, 8)] and positions == [(0,)] and inner[0].schedule == (i,)
    assert count_work(islast.build_loops([_stmt([a, i], space.box(), [a, i])])) == 32


@pytest.mark.parametrize("case", ["triangle", "residue", "one_trip", "other_dimension", "ranges_differ",
                                  "empty"])
def test_peel_leaves_loops_isl_must_build(case):
    """Loops that are not a plain range around the rest stay isl's (and the loops built are
    exactly the whole schedule's either way)."""
    a, i = var("a", 0, 8), var("i", 0, 4)
    space = IndexSpace([a, i])
    dom, sched = space.box(), [a, i]
    stmts = None
    if case == "triangle":
        dom = dom.intersect(space.cond(i <= a))
    elif case == "residue":
        dom = dom.intersect(space.cond(a % 2 == 0))
    elif case == "one_trip":
        dom = dom.intersect(space.cond(a == 3))
    elif case == "other_dimension":
        sched = [a, i + a]
    elif case == "ranges_differ":
        b, j = var("b", 0, 6), var("j", 0, 4)
        other = IndexSpace([b, j])
        stmts = [_stmt([a, i], dom, [a, 0, i], "S"), _stmt([b, j], other.box(), [b, 1, j], "T")]
    elif case == "empty":
        dom = dom.intersect(space.cond(a > 9))
    stmts = stmts or [_stmt([a, i], dom, sched)]
    box, inner, positions = islast._peel(stmts)
    assert box == [] and inner == stmts and all(p == () for p in positions)


def test_sibling_column_sums_values():
    outs, ins = _sibling_column_sums()
    x = np.array([0.5, 2.0, -3.0])
    a, b = ta.build(outs, ins)(x)
    want = np.where(np.arange(16) >= 9, x[2] + x[0], 0.0)
    np.testing.assert_allclose(a, want, rtol=1e-15)
    np.testing.assert_allclose(b, 2 * want, rtol=1e-15)
