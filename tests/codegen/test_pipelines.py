"""The LLVM pipeline of a kernel module at ``opt_level=3`` (codegen/optpipe.py): ``-O2``, plus
``-O3``'s full-unroll threshold where a nest has a reduction window (a max pool's 3x3).  Counted
in the optimized IR, never timed; the oracles are NumPy formulas written here."""

from __future__ import annotations

import numpy as np
import tensorad as ta
from tensorad import topi
from tensorad.codegen import jit, optpipe


def _unmarked(text: str) -> str:
    assert text.startswith(optpipe.MARK)
    return text.split("\n", 1)[1]


def _lines(ir: str) -> int:
    return sum(1 for line in ir.split("\n") if line.startswith("  ") and not line.startswith("  ;"))


def test_a_nest_without_a_window_compiles_at_O2():
    C = ta.placeholder((64, 28), "float32", name="C")
    H = ta.placeholder((64, 28), "float32", name="H")
    Y = ta.compute((64, 29), lambda i, j: ta.if_then_else(j < 28, ta.select(C[i, j] <= 0.0, 0.0, H[i, j]), 0.0),
                   name="Y")
    k = ta.build([Y], [C, H], num_threads=1)
    assert k.llvm_ir_unoptimized.startswith(optpipe.MARK + "O2\n")
    plain = _unmarked(k.llvm_ir_unoptimized)
    o2, o3 = jit.optimized_ir(plain, 2), jit.optimized_ir(plain, 3)
    assert _lines(o3) < _lines(o2)  # (-O3 unrolls the 28-trip loop: the test can tell them apart)
    assert _lines(k.llvm_ir) == _lines(o2)
    rng = np.random.default_rng(0)
    c, h = rng.standard_normal((64, 28), dtype=np.float32), rng.standard_normal((64, 28), dtype=np.float32)
    want = np.zeros((64, 29), np.float32)
    want[:, :28] = np.where(c <= 0, 0, h)
    np.testing.assert_array_equal(k(c, h), want)


def test_a_reduction_window_keeps_O3s_unrolling():
    X = ta.placeholder((2, 4, 16, 16), "float32", name="X")
    k = ta.build([topi.nn.pool(X, (3, 3), (2, 2), (1, 1), "max")], [X], num_threads=1)
    assert k.llvm_ir_unoptimized.startswith(optpipe.MARK + "O2 unroll\n")
    plain = _unmarked(k.llvm_ir_unoptimized)
    o2, o3 = jit.optimized_ir(plain, 2), jit.optimized_ir(plain, 3)
    branches = k.llvm_ir.count(" br ")
    assert branches == o3.count(" br ") < o2.count(" br ")  # the window loop unrolled, as at -O3
    x = np.random.default_rng(1).standard_normal((2, 4, 16, 16), dtype=np.float32)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.max([padded[:, :, dy:dy + 15:2, dx:dx + 15:2] for dy in range(3) for dx in range(3)], axis=0)
    np.testing.assert_array_equal(k(x), want)


def test_products_and_explicit_levels_ask_for_nothing_more():
    A = ta.placeholder((64, 64), "float32", name="A")
    B = ta.placeholder((64, 64), "float32", name="B")
    k = ta.build([topi.matmul(A, B)], [A, B], num_threads=1)
    assert k.llvm_ir_unoptimized.startswith(optpipe.MARK + "O2\n")
    X = ta.placeholder((2, 4, 16, 16), "float32", name="X")
    k2 = ta.build([topi.nn.pool(X, (3, 3), (2, 2), (1, 1), "max")], [X], num_threads=1, opt_level=2)
    assert optpipe.asked(k2.llvm_ir_unoptimized) is None  # opt_level=2 is plain -O2


def test_the_ladder_reads_the_line_and_the_unroll_option_is_restored():
    marked = optpipe.mark("", ["unroll"])
    assert optpipe.asked(marked) == (2, ("unroll",))
    assert jit.ladder(3, ir_text=marked) == [jit.Pipeline(2, unroll=True), jit.Pipeline(2, slp=False, unroll=True),
                                             jit.Pipeline(1), jit.Pipeline(0)]
    assert jit.ladder(3, ir_text=optpipe.mark("", []))[0] == jit.Pipeline(2)
    X = ta.placeholder((2, 4, 16, 16), "float32", name="X")
    k = ta.build([topi.nn.pool(X, (3, 3), (2, 2), (1, 1), "max")], [X], num_threads=1)
    plain, host = _unmarked(k.llvm_ir_unoptimized), jit.host()
    counts = []
    for unroll in (True, False):  # in this process, not a compile child
        mod = jit._parse(plain, host)
        jit.optimize(mod, 2, host, unroll=unroll)
        counts.append(str(mod).count(" br "))
    assert counts == [jit.optimized_ir(plain, 3).count(" br "), jit.optimized_ir(plain, 2).count(" br ")]
