"""Identical nests are one LLVM function (a long chain is a handful of distinct
nests repeated thousands of times).

Counted, never timed: a chain of ``n`` steps of ``k`` kinds emits ``k`` nest functions; the
name-free key (:mod:`tensorad.codegen.loops.nest_key`) separates nests that differ in anything that
reaches the code (hypothesis); kernels sharing functions give the answers of NumPy formulas
written here.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from blocks import tanh_chain, tanh_chain_gradient
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorad.codegen.llvm.bounds_checks import Checks
from tensorad.codegen.llvm.emit import ModuleEmitter
from tensorad.codegen.loops.nest_key import nest_key
from tensorad.codegen.program import Loop, Nest, map_stmt, walk_stmts

import tensorad as ta
from tensorad.ir.expr import Expr, Op, const
from tensorad.ir.rewrite import substitute

F = "float64"
KINDS = (  # (tensorad body, NumPy formula)
    (lambda P, i: ta.tanh(P[i]) * 0.9, lambda p: np.tanh(p) * 0.9),
    (lambda P, i: ta.sigmoid(P[i]) + P[i] * 0.5, lambda p: 1 / (1 + np.exp(-p)) + p * 0.5),
    (lambda P, i: ta.exp(P[i] * -0.5) - P[i], lambda p: np.exp(p * -0.5) - p),
)


def _chain(n: int, k: int, size: int = 16):
    """``n`` steps cycling through the first ``k`` kinds; every step but the last stored."""
    def step(P, body, s: int):
        return ta.compute((size,), lambda i: body(P, i), name=f"c{s}")

    X = ta.placeholder((size,), F, name="X")
    Y, steps = X, []
    for s in range(n):
        Y = step(Y, KINDS[s % k][0], s)
        steps.append(Y)
    return X, Y, steps[:-1]


def _nest_functions(low, use_gomp: bool = False) -> int:
    text = str(ModuleEmitter(low.program, "p", use_gomp=use_gomp).emit())
    return len(re.findall(r'define void @"p_nest\d+"', text))


def test_a_chain_of_k_kinds_emits_k_nest_functions():
    for k in (1, 2, 3):
        X, Y, stored = _chain(12 * k, k)
        low = ta.lower([Y], [X], fuse=False, materialize=stored)
        nests = [s for s in low.program.steps if isinstance(s, Nest)]
        assert len(nests) == 12 * k
        assert _nest_functions(low) == k  # (was one function per nest)


def test_shared_nest_functions_compute_the_chain():
    # the last nest writes the output (argument 1) from the last temporary: its pointers are
    # mapped onto the shared function's parameters in another order than the first nest's
    x = np.random.default_rng(0).uniform(-2, 2, 16)
    for k in (2, 3):
        n = 10 * k + 1
        X, Y, stored = _chain(n, k)
        y = np.asarray(ta.build([Y], [X], fuse=False, materialize=stored, num_threads=1)(x))
        want = x.copy()
        for s in range(n):
            want = KINDS[s % k][1](want)
        np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-14)


def _recurrence(steps: int, size: int = 16, parallel: bool = False, period: int = 0):
    """``h[t] = tanh(h[t-1] * 0.5 + X[t] - X[t-1] / 4)`` unrolled over ``steps`` (``h[0] = tanh(X[0])``),
    each step stored: step ``t`` reads rows ``t`` and ``t - 1`` of ``X``, so its nest differs from the
    others only in the rows it reads; ``parallel``: each nest a parallel loop; ``period``: the rows are
    ``t % period`` (repeated steps reading the same rows)."""
    X = ta.placeholder((steps, size), F, name="X")
    h = ta.compute((size,), lambda i: ta.tanh(X[0, i]), name="h0")
    hs = [h]
    for t in range(1, steps):
        r, q = (t % period, (t - 1) % period) if period else (t, t - 1)
        h = ta.compute((size,), lambda i, r=r, q=q, h=h: ta.tanh(h[i] * 0.5 + X[r, i] - X[q, i] * 0.25),
                       name=f"h{t}")
        hs.append(h)
    opts = dict(fuse=False, materialize=hs[:-1], **({"parallel_min_work": 0} if parallel else {}))
    return X, h, opts


def _recurrence_numpy(x: np.ndarray, period: int = 0) -> np.ndarray:
    h = np.tanh(x[0])
    for t in range(1, len(x)):
        r, q = (t % period, (t - 1) % period) if period else (t, t - 1)
        h = np.tanh(h * 0.5 + x[r] - x[q] * 0.25)
    return h


@pytest.mark.parametrize("steps,parallel,period",
                         [(12, False, 0), (12, True, 0), (70, False, 0), (70, False, 2)])
def test_the_steps_of_an_unrolled_recurrence_share_one_function(steps, parallel, period):
    """Step ``t`` of an unrolled recurrence reads ``X[t]`` and ``X[t - 1]``: its nest's key spelled
    the constant rows, so each step was a function of its own (the 12-step LSTM's forward compiled
    11 copies of each gate's nest).  Each nest's reads are moved back by the constant of its first
    read of each buffer's leading axis, and its pointers advanced by it: the steps after the first
    are one function, whose serial calls, parallel wrappers and, past the glue's size limit, table
    of repeated steps give the NumPy recurrence."""
    X, Y, opts = _recurrence(steps, parallel=parallel, period=period)
    low = ta.lower([Y], [X], **opts)
    assert len([s for s in low.program.steps if isinstance(s, Nest)]) == steps
    # (the first step reads no X[t - 1]; with a period of 2, the steps read rows (1, 0) or (0, 1))
    assert _nest_functions(low, use_gomp=parallel) == (3 if period else 2)
    x = np.random.default_rng(3).uniform(-2, 2, (steps, 16))
    kernel = ta.build([Y], [X], num_threads=2 if parallel else 1, **opts)
    np.testing.assert_allclose(np.asarray(kernel(x)), _recurrence_numpy(x, period), rtol=1e-12, atol=1e-14)


def _gathered_chain(n: int, k: int, size: int = 16):
    """:func:`_chain` whose output also adds ``X`` gathered at the indices ``I`` (``mode="raise"``)."""
    X, Y, stored = _chain(n, k, size)
    ids = ta.placeholder((size,), "int32", name="I")
    Z = ta.compute((size,), lambda i: Y[i] + X.take(ids[i], mode="raise"), name="Z")
    return X, ids, Z, stored


def test_a_program_testing_gather_indices_shares_its_other_nests():
    """A program holding a gather under ``mode="raise"`` is built with run-time index tests, and
    then emitted every nest as a function of its own: a chain of 2 kinds repeated 12 times
    became 12 functions.  The nests that test nothing share their functions; the one that tests
    the gather keeps its own, and an index out of range still raises naming the gathered tensor."""
    X, ids, Z, stored = _gathered_chain(12, 2)
    low = ta.lower([Z], [X, ids], fuse=False, materialize=stored)
    checks = Checks(every_access=False)
    text = str(ModuleEmitter(low.program, "p", use_gomp=False, checks=checks).emit())
    assert len(re.findall(r'define void @"p_nest\d+"', text)) == 3
    kernel = ta.build([Z], [X, ids], fuse=False, materialize=stored, num_threads=1)
    x = np.random.default_rng(1).uniform(-2, 2, 16)
    idx = np.arange(16, dtype=np.int32)[::-1].copy()
    want = x.copy()
    for s in range(12):
        want = KINDS[s % 2][1](want)
    np.testing.assert_allclose(np.asarray(kernel(x, idx)), want + x[idx], rtol=1e-12, atol=1e-14)
    idx[3] = 16
    with pytest.raises(IndexError, match="gather index out of range"):
        kernel(x, idx)


def test_parallel_nests_share_functions_and_split_their_own_rows():
    # each parallel nest keeps its own libgomp wrapper (its range, its pointers) around the
    # shared function
    x = np.random.default_rng(2).uniform(-2, 2, 1000)
    X, Y, stored = _chain(9, 2, size=1000)
    opts = dict(fuse=False, materialize=stored, parallel_min_work=0)
    low = ta.lower([Y], [X], **opts)
    nests = [s for s in low.program.steps if isinstance(s, Nest)]
    assert len(nests) == 9 and all(s.parallel for s in nests)
    assert _nest_functions(low, use_gomp=True) == 2
    want = x.copy()
    for s in range(9):
        want = KINDS[s % 2][1](want)
    for threads in (1, 2):
        y = np.asarray(ta.build([Y], [X], num_threads=threads, **opts)(x))
        np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-14)


def test_a_long_chain_gradient_shares_nests_and_is_right():
    n = 240
    X, Y = tanh_chain(n, 16, F)
    L = ta.compute((), lambda: Y[0] + Y[9], name="L")
    (g,) = ta.gradient(L, [X])
    low = ta.lower([g], [X])
    nests = [s for s in low.program.steps if isinstance(s, Nest)]
    assert _nest_functions(low) < len(nests) // 2, (len(nests), _nest_functions(low))
    x = np.random.default_rng(1).uniform(-1, 1, 16)
    got = np.asarray(ta.build([g], [X], num_threads=1)(x))
    np.testing.assert_allclose(got, tanh_chain_gradient(x, n), rtol=1e-10, atol=0)


def _keys(params: tuple, names: str = "") -> tuple:
    """The keys of the nests of one small program, ``params`` = (rows, width, stride, dtype,
    constant, pad, cut): ``Y[i, j] = A[i, stride * j] * c`` where ``j >= cut``, else 0, with
    ``pad`` columns of ``A`` never read (its row stride alone differs)."""
    rows, width, stride, dtype, c, pad, cut = params
    A = ta.placeholder((rows, width * stride + pad), dtype, name=f"A{names}")
    Y = ta.compute((rows, width), lambda i, j: ta.if_then_else(j >= cut, A[i, j * stride] * c, 0.0),
                   name=f"Y{names}")
    low = ta.lower([Y], [A], name=f"k{names}")
    prog = low.program
    keyed = [nest_key(s, lambda t: prog.buffers[t]) for s in prog.steps if isinstance(s, Nest)]
    assert keyed and all(k is not None for k in keyed)
    return tuple(k[0] for k in keyed)


PARAMS = st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 3), st.sampled_from(["float32", F]),
                   st.sampled_from([0.5, 1.5, -2.0, 3.0]), st.integers(0, 2), st.integers(0, 4))


def _valid(p: tuple) -> tuple:
    return p[:6] + (min(p[6], p[1] - 1),)


@settings(max_examples=40, deadline=None)
@given(PARAMS, st.integers(0, 6), st.data())
def test_nests_differing_in_anything_that_reaches_code_never_share_a_key(p, field, data):
    p = _valid(p)
    q = list(p)
    q[field] = data.draw(PARAMS.map(lambda r: r[field]).filter(lambda v: v != p[field]))
    q = _valid(tuple(q))
    if q == p:  # (the cut clamped back to the same value)
        return
    assert _keys(p) != _keys(q), (p, q)
    assert _keys(p) == _keys(p, names="_renamed")  # names never reach the key


def _respelled(nest: Nest, a: int, b: int) -> Nest:
    """``nest`` with each loop variable ``v`` read and stored at ``((v - 2) + a) + b``, written out
    unsimplified (``v`` itself where ``a + b == 2``)."""
    def spelled(v: Expr) -> Expr:
        t = v.dtype
        shifted = Expr(Op.ADD, t, (Expr(Op.SUB, t, (v, const(2, t))), const(a, t)))
        return Expr(Op.ADD, t, (shifted, const(b, t)))
    mapping = {s.var: spelled(s.var) for s in walk_stmts(nest.body) if isinstance(s, Loop)}
    return replace(nest, body=tuple(map_stmt(s, lambda e: substitute(e, mapping)) for s in nest.body))


def test_nests_whose_index_arithmetic_is_spelled_two_ways_share_a_key():
    """Index arithmetic is keyed by its linear form, not its spelling: a nest and the same nest with
    its indices written ``((i - 2) + 1) + 1`` or ``((i - 2) + 5) - 3`` share one key, hence one
    function (the Winograd input transforms of a convolution's two gradients, read at
    ``X[(-2 + y) + 1]`` and ``X[(0 + y) - 1]``, were compiled twice); a respelling that moves an
    index does not share it."""
    X = ta.placeholder((6, 9), F, name="X")
    Y = ta.compute((6, 5), lambda i, j: X[i, j + 2] * 2.0 + X[i, 4 - j], name="Y")
    prog = ta.lower([Y], [X]).program
    (nest,) = [s for s in prog.steps if isinstance(s, Nest)]

    def key(n: Nest) -> tuple:
        return nest_key(n, lambda t: prog.buffers[t])[0]
    assert key(_respelled(nest, 1, 1)) == key(nest)
    assert key(_respelled(nest, 5, -3)) == key(_respelled(_respelled(nest, 0, 2), 3, -1)) == key(nest)
    assert key(_respelled(nest, 1, 0)) != key(nest)
    assert key(_respelled(nest, 1, 0)) == key(_respelled(nest, -1, 2))


def test_a_nest_computing_a_product_of_variables_has_a_key():
    """A product of two loop variables in integer arithmetic (``i * j``) is a term of its own in the
    linear form: keying it ends (it was its own operand, and the key looped for ever), and a
    respelling of the variables inside it still shares the key."""
    X = ta.placeholder((6, 5), F, name="X")
    Y = ta.compute((6, 5), lambda i, j: X[i, j] * ta.cast("float64", i * j + 1), name="Y")
    prog = ta.lower([Y], [X]).program
    (nest,) = [s for s in prog.steps if isinstance(s, Nest)]
    key = nest_key(nest, lambda t: prog.buffers[t])
    assert key is not None
    assert nest_key(_respelled(nest, 1, 1), lambda t: prog.buffers[t])[0] == key[0]


def test_a_sum_of_terms_of_several_kinds_has_a_key():
    """Terms of a sum made of different operations (a floor division, a remainder, a constant
    inside) are ordered by a spelling any two of them compare in (ordering their operations
    themselves raised ``TypeError``)."""
    X = ta.placeholder((6, 12), F, name="X")
    Y = ta.compute((6, 12), lambda i, j: X[i, j] * ta.cast(F, j // 3 + j % 4 + (j + 1) // 2), name="Y")
    prog = ta.lower([Y], [X]).program
    (nest,) = [s for s in prog.steps if isinstance(s, Nest)]
    key = nest_key(nest, lambda t: prog.buffers[t])
    assert key is not None
    assert nest_key(_respelled(nest, 1, 1), lambda t: prog.buffers[t])[0] == key[0]
