"""A short loop around a loop whose trips it does not set stays rolled (codegen/llvm/emit.copies_loops):
full unrolling would only copy the inner loop, which stays a loop in every copy, and LLVM's ``-O3``
does it for short loops, multiplying the nest's code and the time LLVM spends on it.  A loop that
sets the inner loop's trips (a triangle's row) is left to LLVM.  The tests read the emitted loop
metadata (no timing) and check results against NumPy at every opt level."""

import re

import numpy as np
import pytest
from tensorad.codegen.llvm.emit import copies_loops
from tensorad.codegen.program import Loop, Nest, walk_stmts

import tensorad as ta


def _triangle():
    """``Y[i, j] = sum_{k <= i} A[j, k] B[i, k]``: loops ``i`` (16), ``j`` (4), ``k`` to ``i + 1``."""
    A = ta.placeholder((4, 16), "float32", "A")
    B = ta.placeholder((16, 16), "float32", "B")
    k = ta.reduce_axis((0, 16), "k")
    Y = ta.compute((16, 4), lambda i, j: ta.sum(A[j, k] * B[i, k], axis=k, where=k <= i), name="Y")
    return Y, (A, B)


def _rolled_loops(text: str) -> set[str]:
    """The loops whose back edge carries ``llvm.loop.unroll.disable``."""
    hint = r"^(!\d+) = !\{ !\"llvm.loop.unroll.disable\" \}"
    disabled = {m.group(1) for m in re.finditer(hint, text, re.M)}
    ids = {m.group(1) for m in re.finditer(r"^(!\d+) = distinct !\{ !\d+((?:, !\d+)*) \}", text, re.M)
           if set(m.group(2).replace(",", " ").split()) & disabled}
    return {m.group(1) for m in re.finditer(
        r"label %\"([\w.]+)\.body\", label %\"[\w.]+\", !llvm.loop (!\d+)", text) if m.group(2) in ids}


def test_a_short_loop_around_a_loop_it_does_not_bound_stays_rolled():
    Y, ins = _triangle()
    k = ta.build([Y], list(ins), cache=False, num_threads=1)
    loops = {x.var.name: x for s in k.lowered.program.steps if isinstance(s, Nest)
             for x in walk_stmts(s.body) if isinstance(x, Loop)}
    assert sorted(loops) == ["i", "j", "k"], k.lowered.text
    assert [copies_loops(loops[n]) for n in ("i", "j", "k")] == [False, True, False]
    assert "j" in _rolled_loops(k.llvm_ir_unoptimized) and "i" not in _rolled_loops(k.llvm_ir_unoptimized)


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_the_rolled_loop_computes_the_triangle(opt_level):
    Y, ins = _triangle()
    k = ta.build([Y], list(ins), cache=False, num_threads=1, opt_level=opt_level)
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((4, 16)), rng.standard_normal((16, 16))
    want = np.tril(b) @ a.T  # (row i of B up to column i, against each row of A)
    np.testing.assert_allclose(k(a.astype(np.float32), b.astype(np.float32)), want, rtol=1e-5, atol=1e-5)
