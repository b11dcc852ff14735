"""An elementwise nest's last two axes are scanned as one loop when its rows are short and every
access walks them as one run (codegen/loops/coalesce.py): group norm's output over a 28 x 28 map is
one 784-long unit-stride loop, not 28-long rows that LLVM unrolls and then vectorizes across at
stride 28 (gathers on AVX-512, scalar inserts on AVX2)."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorad.codegen.loops.coalesce import short_rows
from tensorad.codegen.program import If, Loop, Nest, Store

import tensorad as ta
from tensorad.ir.expr import Op

RNG = np.random.default_rng(19)
AVX512 = "llvm -mcpu=emeraldrapids"  # (compiled here, never run: only the code is read)
AVX2 = "llvm -mcpu=haswell"


def _innermost_trips(lowered) -> list[int]:
    """The trip counts of every innermost loop of the program."""
    out = []

    def visit(stmts):
        for s in stmts:
            if isinstance(s, Loop):
                if not any(isinstance(x, Loop) for x in s.body):
                    out.append(int(s.hi.arg) - int(s.lo.arg) if s.hi.op is s.lo.op is Op.CONST else None)
                visit(s.body)
            elif isinstance(s, If):
                visit(s.then)
                visit(s.orelse)

    for step in lowered.program.steps:
        if isinstance(step, Nest):
            visit(step.body)
    return out


def _nest_functions(ir_text: str) -> str:
    """The LLVM IR of the nests' functions (not the thread glue, which divides the range)."""
    return "\n".join(f for f in re.split(r"(?=^define )", ir_text, flags=re.M) if "_nest" in f.split("(")[0])


def _normalize(N, C, H, W):
    X = ta.placeholder((N, C, H, W), name="X")
    M = ta.placeholder((N, C), name="M")
    R = ta.placeholder((N, C), name="R")
    g = ta.placeholder((C,), name="g")
    b = ta.placeholder((C,), name="b")
    Y = ta.compute((N, C, H, W), lambda n, c, y, x: (X[n, c, y, x] - M[n, c]) * R[n, c] * g[c] + b[c], "Y")
    return Y, [X, M, R, g, b]


def test_a_group_norm_like_nest_is_one_loop_over_the_map_with_no_division_or_gather():
    Y, ins = _normalize(2, 4, 28, 28)
    lowered = ta.lower([Y], ins, target=AVX512)
    assert _innermost_trips(lowered) == [784], str(lowered)
    assert lowered.work == 2 * 4 * 28 * 28
    kernel = ta.build([Y], ins, target=AVX512, parallel=False)
    nests = _nest_functions(kernel.llvm_ir)
    assert nests and not re.search(r"\b(sdiv|srem|udiv|urem)\b", nests), nests
    assert "masked.gather" not in kernel.llvm_ir and "gather" not in kernel.asm
    assert "vinsertps" not in ta.build([Y], ins, target=AVX2, parallel=False).asm
    x, m, r, g, b = (RNG.standard_normal(t.shape).astype("float32") for t in ins)
    want = (x - m[..., None, None]) * r[..., None, None] * g[:, None, None] + b[:, None, None]
    np.testing.assert_allclose(ta.build([Y], ins)(x, m, r, g, b), want, rtol=1e-5, atol=1e-5)


def test_group_norm_output_is_one_loop_over_the_map():
    X = ta.placeholder((2, 8, 28, 28), name="X")
    gamma = ta.placeholder((8,), name="gamma")
    beta = ta.placeholder((8,), name="beta")
    Y = ta.topi.nn.group_norm(X, 4, gamma, beta)
    lowered = ta.lower([Y], [X, gamma, beta], target=AVX512)
    assert "range(0, 28)" not in str(lowered) and _innermost_trips(lowered).count(784) == 3, str(lowered)
    for target in (AVX512, AVX2):  # (before: 336 and 168 vinsertps, the rows' loads one by one)
        kernel = ta.build([Y], [X, gamma, beta], target=target, parallel=False)
        assert not re.search(r"\b(sdiv|srem)\b", _nest_functions(kernel.llvm_ir))
        assert "gather" not in kernel.asm and "vinsertps" not in kernel.asm
    x = RNG.standard_normal(X.shape)
    g, b = RNG.uniform(0.5, 2, 8), RNG.standard_normal(8)
    xg = x.reshape(2, 4, -1)
    want = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    want = want * g[:, None, None] + b[:, None, None]
    got = ta.build([Y], [X, gamma, beta])(*(a.astype("float32") for a in (x, g, b)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_rows_are_short_by_the_targets_vector_loop():
    assert short_rows(28, 32) and short_rows(56, 32) and short_rows(7, 32) and short_rows(32, 64)
    assert not short_rows(64, 32) and not short_rows(224, 32) and not short_rows(1000, 32)
    X = ta.placeholder((3, 4, 32), name="X")
    Y = ta.compute(X.shape, lambda a, y, x: X[a, y, x] * 2.0, "Y")
    assert _innermost_trips(ta.lower([Y], [X], target=AVX2)) == [32]  # 4 vectors of 8: whole
    assert _innermost_trips(ta.lower([Y], [X], target=AVX512)) == [128]  # 2 vectors of 16


@pytest.mark.parametrize("body", [
    lambda X, W, T, a, y, x: X[a, x, y],  # transposed
    lambda X, W, T, a, y, x: T[y, x, a],  # one run, but at stride 5 (a gather either way)
    lambda X, W, T, a, y, x: W[a, y, x],  # rows of a wider map
    lambda X, W, T, a, y, x: X[a, y, x] * ta.cast("float32", x),  # x as a value
    lambda X, W, T, a, y, x: ta.select(y > 2, X[a, y, x], 0.0),  # y in a condition
    lambda X, W, T, a, y, x: X[a, y, x] + X[a, y, 6 - x],  # x in another index
])
def test_axes_not_walked_as_one_run_keep_their_two_loops(body):
    X = ta.placeholder((5, 7, 7), name="X")
    W = ta.placeholder((5, 7, 9), name="W")
    T = ta.placeholder((7, 7, 5), name="T")
    Y = ta.compute((5, 7, 7), lambda a, y, x: body(X, W, T, a, y, x), "Y")
    lowered = ta.lower([Y], [X, W, T])
    assert 49 not in _innermost_trips(lowered), str(lowered)
    arrays = [RNG.standard_normal(t.shape).astype("float32") for t in (X, W, T)]
    want = ta.evaluate([Y], dict(zip((X, W, T), arrays)))[0]
    np.testing.assert_allclose(ta.build([Y], [X, W, T])(*arrays), want, rtol=1e-6, atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(lead=st.lists(st.integers(1, 3), min_size=0, max_size=2), ey=st.sampled_from([1, 2, 3, 7, 13]),
       ex=st.sampled_from([1, 2, 7, 13, 14, 28, 33]), form=st.integers(0, 3),
       threads=st.sampled_from([1, 2]))
def test_values_equal_numpy_on_odd_shapes(lead, ey, ex, form, threads):
    """Random elementwise ops over ``lead + (ey, ex)``: a plain run, a broadcast of a map over
    the leading axes, a read of the map through a size-1 axis, and two outputs of one op --
    built equal NumPy, with the same work, coalesced or not."""
    shape = tuple(lead) + (ey, ex)
    k = len(lead)
    X = ta.placeholder(shape, "float64", "X")
    Z = ta.placeholder((ey, ex), "float64", "Z")
    P = ta.placeholder((1, ey, ex), "float64", "P")
    S = ta.placeholder(shape[:k] or (1,), "float64", "S")

    def s(ax):
        return S[ax[:k]] if k else S[0]

    if form == 0:
        Y = ta.compute(shape, lambda *ax: X[ax] * s(ax) + 1.0, "Y")
    elif form == 1:
        Y = ta.compute(shape, lambda *ax: X[ax] - Z[ax[k:]] * s(ax), "Y")
    elif form == 2:
        Y = ta.compute(shape, lambda *ax: ta.exp(X[ax]) + P[(0,) + ax[k:]], "Y")
    else:
        Y = ta.compute(shape, lambda *ax: (X[ax] * 2.0, X[ax] + Z[ax[k:]]), "Y")
    outs = list(Y) if isinstance(Y, tuple) else [Y]
    ins = [X, Z, P, S]
    arrays = [RNG.uniform(-1, 1, t.shape) for t in ins]
    want = ta.evaluate(outs, dict(zip(ins, arrays)))
    got = ta.build(outs, ins, num_threads=threads, parallel_min_work=0)(*arrays)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-13)
    lowered = ta.lower(outs, ins, target=AVX2)
    assert lowered.work == int(np.prod(shape))  # (one body execution stores both outputs)
    if ey >= 2 and ex >= 2:  # (float64 on AVX2: 4 lanes, a vector loop iteration of 16)
        assert (_innermost_trips(lowered) == [ey * ex]) == short_rows(ex, 16), str(lowered)


def test_a_relu_gradient_over_feature_maps_is_one_loop_and_matches_evaluate():
    X = ta.placeholder((2, 3, 7, 7), "float64", "X")
    Y = ta.compute(X.shape, lambda *ax: ta.maximum(X[ax], 0.0) * X[ax], "Y")
    L = ta.topi.sum(Y * Y)
    (G,) = ta.gradient(L, [X])
    lowered = ta.lower([G], [X], target=AVX2)
    assert 49 in _innermost_trips(lowered) and 7 not in _innermost_trips(lowered), str(lowered)
    x = RNG.uniform(-1, 1, X.shape)
    np.testing.assert_allclose(ta.build([G], [X])(x), ta.evaluate([G], {X: x})[0], rtol=1e-12, atol=1e-12)


def _stores_of_loops(lowered):
    """``(trips, buffers stored)`` of every innermost loop with constant bounds."""
    out = []

    def visit(stmts):
        for s in stmts:
            if isinstance(s, Loop):
                if not any(isinstance(x, Loop) for x in s.body) and s.hi.op is Op.CONST:
                    stored = {x.buffer.name for x in s.body if isinstance(x, Store)}
                    out.append((int(s.hi.arg) - int(s.lo.arg), stored))
                visit(s.body)
            elif isinstance(s, If):
                visit(s.then + s.orelse)

    for step in lowered.program.steps:
        if isinstance(step, Nest):
            visit(step.body)
    return out


def test_fused_members_share_one_loop_over_the_map():
    """Members of a nest fused over ``(n, c)`` that read each other at their own point share
    one inner loop (:func:`.nestfuse.shared_positions`), now over the whole 7 x 7 map."""
    X = ta.placeholder((2, 4, 7, 7), "float64", "X")
    y, x = ta.reduce_axis((0, 7), "y"), ta.reduce_axis((0, 7), "x")
    s = ta.compute((2, 4), lambda n, c: ta.sum(X[n, c, y, x], axis=[y, x]), "s")
    B = ta.compute(X.shape, lambda n, c, i, j: ta.exp(X[n, c, i, j] - s[n, c]), "B")
    C = ta.compute(X.shape, lambda n, c, i, j: B[n, c, i, j] * 2.0 + X[n, c, i, j], "C")
    lowered = ta.lower([B, C], [X], target=AVX2)
    assert len([st for st in lowered.program.steps if isinstance(st, Nest)]) == 1
    assert (49, {"B", "C"}) in _stores_of_loops(lowered), str(lowered)
    xv = RNG.standard_normal(X.shape)
    b = np.exp(xv - xv.sum((2, 3), keepdims=True))
    got_b, got_c = ta.build([B, C], [X])(xv)
    np.testing.assert_allclose(got_b, b, rtol=1e-13)
    # (a contracted multiply-add where the terms cancel: the error is relative to the terms)
    np.testing.assert_array_less(np.abs(got_c - (b * 2.0 + xv)), 1e-13 * (2 * b + np.abs(xv)))


def test_a_member_whose_prefix_scans_the_pair_keeps_it():
    """Group norm's ``rstd[n, g]`` (2 x 2) sits in a nest fused over ``n``: its axes are not
    scanned as one loop there, which would take it out of the nest."""
    X = ta.placeholder((2, 4, 5, 3), "float64", "X")
    g, b = ta.placeholder((4,), "float64", "g"), ta.placeholder((4,), "float64", "b")
    y = ta.topi.nn.group_norm(X, 2, g, b)
    H = ta.placeholder(y.shape, "float64", "H")
    grads = ta.gradient(y, [X, g], H)
    lowered = ta.lower(grads, [X, g, b, H], target=AVX2)
    names = [st.name for st in lowered.program.steps if isinstance(st, Nest)]
    assert not any(n.endswith("rstd") for n in names), names
    assert 15 in _innermost_trips(lowered)  # (X.grad over the 5 x 3 map: one loop)
    arrays = [RNG.standard_normal(X.shape), RNG.uniform(0.5, 2, 4), RNG.standard_normal(4),
              RNG.standard_normal(X.shape)]
    want = ta.evaluate(grads, dict(zip((X, g, b, H), arrays)))
    for got, w in zip(ta.build(grads, [X, g, b, H])(*arrays), want):
        np.testing.assert_allclose(got, w, rtol=1e-10, atol=1e-12)
