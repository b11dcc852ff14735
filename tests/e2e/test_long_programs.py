"""Deep and long programs: no recursion limit, linear size.

* A 5,000-deep expression (nested ``if_then_else`` and arithmetic, five times Python's recursion
  limit) goes through definition, printing, evaluation and differentiation, a 2,000-deep one (250 nested lazy
  branches) through the optimizer, lowering and LLVM -- every traversal is iterative.
  Oracle: the same recurrence run in Python on a dual number (value and derivative).
* The gradient of an elementwise chain stays linear in the chain's length.  Growth is
  measured by counting (IR nodes, printed characters, lowering steps) at ``n`` and ``2n``,
  never by the clock: linear doubles, quadratic quadruples, exponential explodes.
"""

from __future__ import annotations

import numpy as np
import pytest
from blocks import chain_step, tanh_chain

import tensorad as ta
from tensorad.ir.rewrite import tensor_graph, walk

DEPTH = 5_000
F = "float64"


def _deep(A, i, depth):
    """``e_{k+1} = ite(i > k % 7, 0.999 e_k + 0.001 A[i], A[i] + 1)`` every 8th level, else the
    arithmetic step; ``depth`` levels deep."""
    e = A[i]
    for k in range(depth):
        if k % 8 == 7:
            e = ta.if_then_else(i > k % 7, e * 0.999 + A[i] * 0.001, A[i] + 1.0)
        else:
            e = e * 0.999 + A[i] * 0.001
    return e


def _deep_reference(a: float, i: int, depth: int) -> tuple[float, float]:
    """The recurrence of :func:`_deep` on a dual number: (value, d value / d a)."""
    v, d = a, 1.0
    for k in range(depth):
        if k % 8 == 7 and not i > k % 7:
            v, d = a + 1.0, 1.0
        else:
            v, d = v * 0.999 + a * 0.001, d * 0.999 + 0.001
    return v, d


@pytest.mark.slow
def test_a_5000_deep_expression_defines_prints_evaluates_and_differentiates():
    A = ta.placeholder((8,), F, name="A")
    Y = ta.compute((8,), lambda i: _deep(A, i, DEPTH), name="Y")
    L = ta.compute((), lambda: Y[2] + Y[7], name="L")
    assert len(str(Y)) > DEPTH and "Y" in ta.PrintTensorRecursively(L)
    a = np.linspace(-1, 1, 8)
    ref = [_deep_reference(a[i], i, DEPTH) for i in range(8)]
    np.testing.assert_allclose(ta.evaluate(Y, {A: a}), [v for v, _ in ref], rtol=1e-10)
    (g,) = ta.gradient(L, [A], optimize=False)
    dwant = np.zeros(8)
    dwant[[2, 7]] = [ref[2][1], ref[7][1]]
    np.testing.assert_allclose(ta.evaluate(g, {A: a}), dwant, rtol=1e-10)


@pytest.mark.slow
def test_a_2000_deep_expression_optimizes_lowers_and_builds():
    # 250 nested lazy if_then_else: 200 raised RecursionError in the LLVM emitter
    depth = 2_000
    A = ta.placeholder((8,), F, name="A")
    Y = ta.compute((8,), lambda i: _deep(A, i, depth), name="Y")
    L = ta.compute((), lambda: Y[2] + Y[7], name="L")
    a = np.linspace(-1, 1, 8)
    ref = [_deep_reference(a[i], i, depth) for i in range(8)]
    want = np.array([v for v, _ in ref])
    np.testing.assert_allclose(ta.build([Y], [A], opt_level=1)(a), want, rtol=1e-10)
    (g,) = ta.gradient(L, [A])  # optimized
    dwant = np.zeros(8)
    dwant[[2, 7]] = [ref[2][1], ref[7][1]]
    np.testing.assert_allclose(ta.evaluate(g, {A: a}), dwant, rtol=1e-10)
    np.testing.assert_allclose(ta.build([g], [A], opt_level=1)(a), dwant, rtol=1e-10)


# ---- linear growth ----------------------------------------------------------------------

def _square_chain(n: int):
    """``Y_{k+1} = 0.5 Y_k^2 + 0.1``: each step reads its producer twice (a DAG that a tree
    printer expands to 2^n copies) and is cheap, so the whole chain is inlined into one nest."""
    X = ta.placeholder((16,), F, name="X")
    Y = X
    for k in range(n):
        Y = (lambda P: ta.compute((16,), lambda i: P[i] * P[i] * 0.5 + 0.1, name=f"sq{k}"))(Y)
    L = ta.compute((), lambda: Y[0] + Y[5], name="L")
    return X, Y, L


def _nodes(tensors) -> int:
    seen: set = set()
    for t in tensor_graph(tensors):
        if not t.is_placeholder:
            for b in t.op.body:
                seen.update(walk(b))
    return len(seen)


def test_gradient_of_a_square_chain_is_linear_in_size_and_right():
    sizes = {}
    for n in (24, 48):
        X, Y, L = _square_chain(n)
        (g,) = ta.gradient(L, [X])
        text = str(ta.lower([g], [X]))
        sizes[n] = (len(text), _nodes([g]), len(ta.PrintTensorRecursively(g)))
    for a, b in zip(sizes[24], sizes[48]):
        assert b <= 2.5 * a, sizes  # quadratic would be 4x, the tree expansion 2^24 x
    X, Y, L = _square_chain(12)
    (g,) = ta.gradient(L, [X])
    x = np.linspace(-0.5, 0.5, 16)
    y, d = x.copy(), np.ones(16)
    for _ in range(12):  # dual numbers: y' = y * dy
        y, d = 0.5 * y * y + 0.1, y * d
    want = np.zeros(16)
    want[[0, 5]] = d[[0, 5]]
    np.testing.assert_allclose(ta.evaluate(g, {X: x}), want, rtol=1e-10)
    np.testing.assert_allclose(ta.build([g], [X])(x), want, rtol=1e-10)


def _tanh_chain(n: int):
    """:func:`blocks.tanh_chain`, its output read at two points."""
    X, Y = tanh_chain(n, 16, F)
    return X, ta.compute((), lambda: Y[0] + Y[9], name="L")


def test_lowering_a_long_chain_gradient_does_linear_work(monkeypatch):
    lower_module = __import__("sys").modules["tensorad.codegen.lower"]
    calls = {"n": 0}
    real = lower_module._lower_op

    def counting(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(lower_module, "_lower_op", counting)
    counts = {}
    for n in (30, 60):
        X, L = _tanh_chain(n)
        (g,) = ta.gradient(L, [X])
        calls["n"] = 0
        low = ta.lower([g], [X])
        counts[n] = (calls["n"], len(str(low)))
    for a, b in zip(counts[30], counts[60]):
        assert b <= 2.3 * a, counts  # each failed fusion used to re-lower every group: quadratic


def test_a_1000_long_chain_of_inlined_producers_lowers_and_builds():
    # every step is cheap and read once, so lowering inlines the whole chain into one nest:
    # the rewriter nested Python calls per inlined producer (RecursionError at a few hundred)
    X = ta.placeholder((4,), F, name="X")
    Y = X
    for k in range(1000):
        Y = (lambda P: ta.compute((4,), lambda i: P[i] * 1.0001 + 0.001, name=f"c{k}"))(Y)
    x = np.array([-1.0, 0.0, 0.5, 2.0])
    want = x.copy()
    for _ in range(1000):
        want = want * 1.0001 + 0.001
    low = ta.lower([Y], [X])
    assert low.text.count("# nest") == 1 and low.work == 4
    np.testing.assert_allclose(ta.build([Y], [X], opt_level=1)(x), want, rtol=1e-12)


def test_the_llvm_module_of_a_long_chain_gradient_is_linear_in_size():
    # every nest function took every buffer of the program as a parameter (and main passed them
    # all at each call): N nests over N buffers gave N x N parameters, and LLVM's time followed
    from tensorad.codegen.llvm.emit import ModuleEmitter

    sizes = {}
    for n in (30, 60):
        X, L = _tanh_chain(n)
        (g,) = ta.gradient(L, [X])
        low = ta.lower([g], [X])
        text = str(ModuleEmitter(low.program, "p", use_gomp=False).emit())
        params = sum(line.count("ptr noalias") for line in text.splitlines() if line.startswith("define"))
        sizes[n] = (low.text.count("# nest"), params, len(text))
    assert sizes[60][0] >= 1.8 * sizes[30][0], sizes  # about one nest per step
    for a, b in zip(sizes[30], sizes[60]):
        assert b <= 2.3 * a, sizes


def _heavy_per_nest(low) -> list[int]:
    from tensorad.codegen.passes.buffers import EXPENSIVE
    from tensorad.codegen.program import Assign, If, Loop, Nest, Store

    def count(stmts, seen) -> int:
        n = 0
        for s in stmts:
            if isinstance(s, Loop):
                n += count(s.body, seen)
            elif isinstance(s, If):
                n += count(s.then, seen) + count(s.orelse, seen)
            elif isinstance(s, (Store, Assign)):
                for v in (s.value,) if isinstance(s, Store) else s.values:
                    for node in walk(v):
                        if node.op in EXPENSIVE and node not in seen:
                            seen.add(node)
                            n += 1
        return n

    return [count(st.body, set()) for st in low.program.steps if isinstance(st, Nest)]


def test_no_nest_gathers_an_unbounded_straight_line_body():
    # the forward of a 300-step tanh/sigmoid chain read at two points was one straight-line
    # body of 600 transcendental functions: LLVM's register allocator is about quadratic in
    # it (4 CPU-s of 8 at n=300).  Inlining stops at INLINE_BUDGET expensive operations.
    from tensorad.codegen.passes.buffers import INLINE_BUDGET

    heavy = {}
    for n in (150, 300):
        X, L = _tanh_chain(n)
        heavy[n] = _heavy_per_nest(ta.lower([L], [X]))
    assert max(heavy[300]) <= 2 * INLINE_BUDGET + 4, heavy  # (two points of the last piece)
    assert len(heavy[300]) >= 2 * len(heavy[150]) - 1 >= 3, heavy
    X, L = _tanh_chain(150)
    x = np.linspace(-1, 1, 16)
    np.testing.assert_allclose(ta.build([L], [X], opt_level=1)(x), ta.evaluate(L, {X: x}), rtol=1e-12)


def test_footprints_of_a_long_chain_gradient_convert_each_guard_once(monkeypatch):
    # every read of a long body converted every guard on its path to an isl set again (the same
    # few guards thousands of times): quadratic in the chain's length (636, 2181, 7971 at 30,
    # 60, 120 steps); the call memoizes the guarded boxes
    from tensorad.poly.affine import IndexSpace

    calls = {"n": 0}
    real = IndexSpace.cond

    def counting(self, *args, **kwargs):
        calls["n"] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(IndexSpace, "cond", counting)
    counts = {}
    for n in (30, 60):
        X, L = _tanh_chain(n)
        (g,) = ta.gradient(L, [X])
        calls["n"] = 0
        ta.lower([g], [X])
        counts[n] = calls["n"]
    assert counts[60] <= 2.3 * counts[30] and counts[60] <= 10 * 60, counts


def test_the_optimizer_asks_isl_about_a_long_chain_gradients_guard_once(monkeypatch):
    # every adjoint of the chain is zero but at the loss's two points, over its own fresh axis:
    # each link's lifted guard was a new isl set (from_conditions, is_empty, gist, back to an
    # expression: a fifth of the optimizer's time); the call's context keeps it up to renaming
    from tensorad.poly.domain import IndexSet

    calls = {"n": 0}
    real = IndexSet.from_conditions.__func__

    def counting(cls, *args, **kwargs):
        calls["n"] += 1
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(IndexSet, "from_conditions", classmethod(counting))
    counts = {}
    for n in (30, 60):
        X, L = _tanh_chain(n)
        calls["n"] = 0
        ta.gradient(L, [X])
        counts[n] = calls["n"]
    assert counts[60] <= counts[30] + 2 and counts[60] <= 10, counts


def test_a_kernel_with_more_buffers_than_ctypes_takes_builds_and_runs():
    # ctypes makes prototypes of at most 1024 arguments: a 3,000-step chain's gradient (3,024
    # buffers) once raised ctypes.ArgumentError out of build; a kernel takes one address table
    n = 1025
    P = [ta.placeholder((2,), F, name=f"p{k}") for k in range(n)]

    def body(i):
        e = P[0][i]
        for k in range(1, n):
            e = e + P[k][i] * (k % 3)
        return e

    Y = ta.compute((2,), body, name="Y")
    kern = ta.build([Y], P, num_threads=1)
    xs = [np.array([k, -k], dtype=np.float64) for k in range(n)]
    want = xs[0] + sum(xs[k] * (k % 3) for k in range(1, n))
    np.testing.assert_allclose(kern(*xs), want, rtol=1e-12)


def _centered_chain(n: int):
    """:func:`_tanh_chain` whose every 8th step subtracts the mean: each centered adjoint sums
    to zero, which the optimizer asks about (a zero-proof per mean)."""
    X = ta.placeholder((16,), F, name="X")
    Y = X
    for k in range(n):
        Y = chain_step(Y, k, 8)
    return X, ta.compute((), lambda: Y[0] + Y[9], name="L")


def test_the_refuter_evaluates_a_long_chain_gradients_elements_once(monkeypatch):
    # every zero-proof of the gradient (a centered adjoint's sum) is tried on the refuter's
    # models first: its elements read the chain up to the loss.  An element without a value
    # (its exact numbers past MAX_BITS) was not kept, and a deep one spent the budget (or the
    # stack) before any element was kept: each question walked the chain again, quadratic
    # (51k and 217k steps at 250 and 500 steps; differentiating 2,000 steps: 194 CPU-s that way,
    # 13 with each element evaluated once)
    from tensorad.simplify.zeros import refute

    made = []
    real = refute.Refuter.__init__

    def keep(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(refute.Refuter, "__init__", keep)
    steps = {}
    for n in (96, 192):
        made.clear()
        X, L = _centered_chain(n)
        (g,) = ta.gradient(L, [X])
        steps[n] = sum(r.counts["steps"] for r in made)
    assert steps[192] <= 2.3 * steps[96], steps
    x = np.linspace(-1, 1, 16)  # oracle: float64 central differences of the chain in NumPy
    X, L = _centered_chain(24)
    (g,) = ta.gradient(L, [X])

    def loss(v):
        y = v.copy()
        for k in range(24):
            y = y - y.mean() if k % 8 == 7 else np.tanh(y) * 0.9 if k % 2 else 1 / (1 + np.exp(-y)) + y * 0.5
        return y[0] + y[9]

    h = 1e-6
    want = [(loss(x + h * e) - loss(x - h * e)) / (2 * h) for e in np.eye(16)]
    np.testing.assert_allclose(ta.evaluate(g, {X: x}), want, rtol=1e-6, atol=1e-8)
