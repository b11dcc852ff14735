"""The LLVM pipeline of a kernel module at ``opt_level=3`` (codegen/optpipe.py): ``-O2``, and
``-O3`` where a nest has a reduction window (a max pool's 3x3).  Counted in the optimized IR,
never timed; the oracles are NumPy formulas written here."""

from __future__ import annotations

import re

import numpy as np
from tensorad.codegen import jit, optpipe

import tensorad as ta
from tensorad import topi


def _unmarked(text: str) -> str:
    assert text.startswith(optpipe.MARK)
    return text.split("\n", 1)[1]


def _lines(ir: str) -> int:
    return sum(1 for line in ir.split("\n") if line.startswith("  ") and not line.startswith("  ;"))


def test_a_nest_without_a_window_compiles_at_O2():
    C = ta.placeholder((64, 28), "float32", name="C")
    H = ta.placeholder((64, 28), "float32", name="H")
    Y = ta.compute((64, 29), lambda i, j: ta.if_then_else(j < 28, ta.select(C[i, j] <= 0.0, 0.0, H[i, j]),
                                                          0.0), name="Y")
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


def test_a_reduction_window_keeps_O3():
    X = ta.placeholder((2, 4, 16, 16), "float32", name="X")
    k = ta.build([topi.nn.pool(X, (3, 3), (2, 2), (1, 1), "max")], [X], num_threads=1)
    assert k.llvm_ir_unoptimized.startswith(optpipe.MARK + "O3\n")
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


def test_the_ladder_reads_the_line():
    assert optpipe.asked(optpipe.mark("", 3)) == 3 and optpipe.asked("; ModuleID = 'x'") is None
    assert jit.ladder(3, ir_text=optpipe.mark("", 2)) == [jit.Pipeline(2), jit.Pipeline(2, slp=False),
                                                          jit.Pipeline(1), jit.Pipeline(0)]
    assert jit.ladder(0, light=True, ir_text=optpipe.mark("", 2)) == [jit.Pipeline(0, light=True)]


def test_a_row_packed_panel_tests_full_or_partial_once_per_panel():
    """-O2 does not unswitch loops: the packer's own k loop must not test, at every k, whether
    its panel is full (attention's scaled-query packers ran 3% slower at -O2 before)."""
    A = ta.placeholder((128, 96), "float32", name="A")
    B = ta.placeholder((128, 96), "float32", name="B")
    r = ta.reduce_axis((0, 128), "r")
    C = ta.compute((96, 96), lambda i, j: ta.sum(A[r, i] * 0.125 * B[r, j], axis=[r]), name="C")
    k = ta.build([C], [A, B], num_threads=1)
    text = k.llvm_ir_unoptimized
    start = text.index('_packA"(')
    labels = re.findall(r"^([\w.]+):", text[start:text.index("\n}", start)], re.M)
    assert "pp.body.if" in labels and not [x for x in labels if x.startswith("pk.body.")
                                           and ("if" in x or "else" in x)]
    assert sum(x.startswith("pk.body") for x in labels) == 2  # a k loop for full panels, one for partial
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((128, 96), dtype=np.float32), rng.standard_normal((128, 96), dtype=np.float32)
    np.testing.assert_allclose(k(a, b), (a.astype(np.float64).T * 0.125) @ b, rtol=1e-4, atol=1e-4)
