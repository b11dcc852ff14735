"""A nest storing a choice among rows by an outer axis is split by the emitter, not by LLVM.

A stored ``if_then_else`` whose test reads only outer loop variables (a Winograd transform's row,
or a user's ``if_then_else(a < 2, ...)`` over a leading axis) was left inside the inner loops, and
LLVM's ``-O3`` unswitched it loop by loop: the transforms of a 3x3 convolution's backward took
most of its compile time.  :func:`tensorad.codegen.llvm.emit.unswitched` splits such a nest outside
the loops that do not read the test (one copy per branch, at most ``MAX_UNSWITCHED``) and the nest
compiles at ``-O2``.  Counted, never timed; results against NumPy formulas written here.
"""

from __future__ import annotations

import re

import numpy as np
from tensorad.codegen.llvm.emit import MAX_UNSWITCHED, accumulates, unswitched
from tensorad.codegen.program import If, Loop, Nest, Store

import tensorad as ta
from tensorad.ir.expr import Op


def _rows(n: int):
    """``Y[a, i, j]``: row ``a`` of ``n`` made of ``X``'s rows, chosen by a tree of tests on ``a``."""
    X = ta.placeholder((n, 6, 40), "float32", "X")

    def leaf(a: int, i, j):
        return X[a, i, j] * float(a + 1) - X[(a + 1) % n, i, j]

    def tree(a, lo: int, hi: int, i, j):
        if hi - lo == 1:
            return leaf(lo, i, j)
        mid = (lo + hi) // 2
        return ta.if_then_else(a < mid, tree(a, lo, mid, i, j), tree(a, mid, hi, i, j))

    Y = ta.compute((n, 6, 40), lambda a, i, j: tree(a, 0, n, i, j), name="Y")
    return X, Y


def _want(x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    return np.stack([x[a] * (a + 1) - x[(a + 1) % n] for a in range(n)])


def _nest(low) -> Nest:
    (nest,) = [s for s in low.program.steps if isinstance(s, Nest)]
    return nest


def test_a_choice_by_an_outer_axis_is_tested_outside_the_inner_loops():
    X, Y = _rows(4)
    nest = _nest(ta.lower([Y], [X]))
    (outer,) = unswitched(nest.body)
    assert isinstance(outer, Loop) and isinstance(outer.body[0], If)

    def leaves(stmts) -> int:  # (each copy of the inner loop stores one branch: no test left in it)
        (s,) = stmts
        if isinstance(s, If):
            return leaves(s.then) + leaves(s.orelse)
        assert isinstance(s, Loop) and isinstance(s.body[0], Store)
        assert s.body[0].value.op is not Op.IF_THEN_ELSE
        return 1
    assert leaves(outer.body) == 4
    kernel = ta.build([Y], [X], num_threads=1)
    assert len(re.findall(r'"tensorad-opt-level"="2"', kernel.compiled.llvm_ir_unoptimized)) == 1
    x = np.random.default_rng(0).standard_normal((4, 6, 40)).astype(np.float32)
    np.testing.assert_allclose(kernel(x), _want(x), rtol=1e-6, atol=1e-6)


def test_tests_reading_inner_loops_or_too_many_branches_stay_where_they_are():
    X, Y = _rows(MAX_UNSWITCHED + 1)
    nest = _nest(ta.lower([Y], [X]))
    assert unswitched(nest.body) is nest.body
    Z = ta.compute((4, 6, 40), lambda a, i, j: ta.if_then_else(j < 20, X[a, i, j], -X[a, i, j]), name="Z")
    nest = _nest(ta.lower([Z], [X], fuse=False))
    assert unswitched(nest.body) is nest.body  # (j is the inner loop's: the test stays in it)
    x = np.random.default_rng(1).standard_normal((MAX_UNSWITCHED + 1, 6, 40)).astype(np.float32)
    np.testing.assert_allclose(ta.build([Y], [X], num_threads=1)(x), _want(x), rtol=1e-6, atol=1e-6)


def _loop_hints(text: str, function: str) -> list[str]:
    """The ``llvm.loop`` nodes of ``function``'s loops in module ``text``, each as its line."""
    body = re.search(rf'^define [^\n]*@"?{function}"?\(.*?^}}', text, re.M | re.S).group(0)
    nodes = dict(re.findall(r"^(![0-9]+) = (.*)$", text, re.M))

    def spelled(node: str) -> str:  # (a loop's node names its hints by reference)
        return nodes[node] + "".join(nodes.get(r, "") for r in re.findall(r"![0-9]+", nodes[node]))
    return [spelled(n) for n in re.findall(r"!llvm\.loop (![0-9]+)", body)]


def test_an_unswitched_nest_keeps_its_loops_from_the_unroller_but_not_its_sums():
    """LLVM's unroller copied each of an unswitched nest's copies of its inner loops again (most of a
    Winograd transform's LLVM time, for no speed): on AVX-512 its loops are kept rolled.  Where a
    vector loop's remainder is scalar (AVX2) unrolling pays, and stays.  A loop that adds to a value
    keeps LLVM's unrolling, which sets the order of its adds."""
    X, Y = _rows(4)

    def hints(target: str) -> list[str]:
        kernel = ta.build([Y], [X], num_threads=1, target=target)
        return _loop_hints(kernel.compiled.llvm_ir_unoptimized, f"{kernel.compiled.meta['main'][:-5]}_nest0")
    rolled = hints("llvm -mcpu=skylake-avx512")
    assert len(rolled) >= 4 and all("llvm.loop.unroll.disable" in h for h in rolled)
    assert not any("llvm.loop.unroll.disable" in h for h in hints("llvm -mcpu=haswell"))
    x = np.random.default_rng(2).standard_normal((4, 6, 40)).astype(np.float32)
    np.testing.assert_allclose(ta.build([Y], [X], num_threads=1)(x), _want(x), rtol=1e-6, atol=1e-6)
    k = ta.reduce_axis((0, 40), "k")
    S = ta.compute((4, 6), lambda a, i: ta.sum(X[a, i, k] * X[a, i, k], axis=k), name="S")
    (sums,) = _nest(ta.lower([S], [X], fuse=False)).body
    assert accumulates(sums) and not accumulates(_nest(ta.lower([Y], [X])).body[0])
