"""A kernel's own packer leaves LLVM only the work that pays (codegen/gemm/packing.py: a
shorter compile and a faster packer).

A side contiguous along its panel rows under an expression (``A[k, i] / S[k]``, attention's
normalized probabilities, a GELU recomputed for a weight gradient) is packed by
``Packer._pack_rows``: per block of ``k`` rows and per value of ``k``, a cache line of rows (the
panels side by side where a panel is narrower), each panel's part a constant-trip loop LLVM
vectorizes.  The ``k`` loop is kept from the vectorizer and the unroller, and the partial
panel's element-by-element loop from the vectorizer: LLVM unrolled the first 8 times with a
prologue and vectorized the second with an epilogue, a third of the packer's instructions and
half its code generation time (attention's packers: 75-105 ms each cold, AMD EPYC).  A panel row
at least a line wide (a ``B`` panel of 24 columns) is SLP-vectorized once LLVM unrolls it (a
stride-2 convolution's masked ``B`` packer: 95 ms of LLVM against 150).  The tests read loop
metadata and count instructions of the optimized IR (no timing), and check results against
NumPy."""

import re

import numpy as np
import pytest

import tensorad as ta

HASWELL = "llvm -mcpu=haswell"  # (instruction counts of one fixed target, whatever the host)


def _scaled_product(m: int, k: int, n: int):
    A = ta.placeholder((k, m), "float32", "A")
    S = ta.placeholder((k,), "float32", "S")
    B = ta.placeholder((k, n), "float32", "B")
    r = ta.reduce_axis((0, k), "r")
    C = ta.compute((m, n), lambda i, j: ta.sum(A[r, i] / S[r] * B[r, j], axis=r), name="C")
    return C, (A, S, B)


def _scaled_columns(m: int, k: int, n: int):
    A = ta.placeholder((m, k), "float32", "A")
    S = ta.placeholder((k,), "float32", "S")
    B = ta.placeholder((k, n), "float32", "B")
    r = ta.reduce_axis((0, k), "r")
    C = ta.compute((m, n), lambda i, j: ta.sum(A[i, r] * (B[r, j] / S[r]), axis=r), name="C")
    return C, (A, S, B)


def _loop_hints(text: str, name: str) -> set[str]:
    """The hint strings on the back edges of the loops called ``name``."""
    nodes = dict(re.findall(r"^(!\d+) = (.*)$", text, re.M))
    hints: set[str] = set()
    for ref in re.findall(rf'label %"{re.escape(name)}\.body", label %"[\w.]+", !llvm.loop (!\d+)', text):
        for op in re.findall(r"!\d+", nodes[ref])[1:]:
            hints |= set(re.findall(r'"(llvm\.loop\.[\w.]+)"(?:, i1 0)?', nodes[op]))
    return hints


def _instructions(text: str) -> int:
    return sum(1 for line in text.split("\n") if line.startswith("  ") and not line.lstrip().startswith(";"))


def test_the_row_block_loop_is_neither_vectorized_nor_unrolled():
    C, ins = _scaled_product(128, 96, 72)
    k = ta.build([C], list(ins), cache=False, target=HASWELL)
    text = k.llvm_ir_unoptimized
    assert re.search(r'define internal void @"\w+_packA"', text), "not packed by the kernel's own packer"
    assert _loop_hints(text, "pk") == {"llvm.loop.unroll.disable", "llvm.loop.vectorize.enable"}
    assert "llvm.loop.vectorize.enable" in _loop_hints(text, "seg")
    opt = k.llvm_ir
    # the code that runs (the packer at -O2, in the product's part): a vector per panel of 4 rows, and
    # a partial panel's division, not unrolled
    assert "fdiv contract <4 x float>" in opt and opt.count("fdiv contract float") == 1
    assert _instructions(opt) < 540  # 627 before (haswell, LLVM 20), 226 now


def test_narrow_panels_pack_a_line_of_rows_per_k():
    """AVX2's A panels are 4 rows wide: per value of ``k`` the packer fills 4 panels side by side (a
    cache line of rows), binding ``k`` and testing the group once, where it did so per panel (a GELU
    recomputed in the A panels of a weight gradient packed 1.2x slower, ``A / S`` 1.6x)."""
    C, ins = _scaled_product(128, 96, 72)
    text = ta.build([C], list(ins), cache=False, target=HASWELL).llvm_ir_unoptimized
    packer = re.search(r'define internal void @"\w+_packA"\(.*?\n}\n', text, re.S).group(0)
    assert 'label %"pq.body"' in packer


@pytest.mark.parametrize("target", ["llvm", HASWELL])
@pytest.mark.parametrize("rows", [10, 37, 64])
def test_panels_across_runs_of_rows_match_numpy(target, rows):
    """Groups of panels that cross a run of the last row axis (``rows`` per batch point, not a multiple of
    the line), a partial last group and a partial last panel, against NumPy."""
    nb, kk, n = 3, 21, 9
    A = ta.placeholder((kk, nb, rows), "float32", "A")
    S = ta.placeholder((kk,), "float32", "S")
    B = ta.placeholder((kk, n), "float32", "B")
    r = ta.reduce_axis((0, kk), "r")
    C = ta.compute((nb, rows, n), lambda z, i, j: ta.sum(A[r, z, i] / S[r] * B[r, j], axis=r), name="C")
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (kk, nb, rows)).astype("float32")
    s = rng.uniform(1, 2, kk).astype("float32")
    b = rng.uniform(-1, 1, (kk, n)).astype("float32")
    k = ta.build([C], [A, S, B], cache=False, target=target, microkernel=True)
    assert "matrix product" in str(k.lowered)
    want = np.einsum("rzi,rj->zij", a.astype("f8") / s[:, None, None], b)
    np.testing.assert_allclose(k(a, s, b), want, rtol=1e-4, atol=1e-4)


def test_a_wide_panel_row_is_left_to_slp():
    C, ins = _scaled_columns(96, 64, 128)
    k = ta.build([C], list(ins), cache=False, target=HASWELL)
    text = k.llvm_ir_unoptimized
    assert re.search(r'define internal void @"\w+_packB"', text), "not packed by the kernel's own packer"
    assert _loop_hints(text, "pk") == {"llvm.loop.unroll.disable", "llvm.loop.vectorize.enable"}
    a, s, b = (np.random.default_rng(4).uniform(1, 2, t.shape).astype("float32") for t in ins)
    np.testing.assert_allclose(k(a, s, b), a.astype("f8") @ (b / s[:, None]), rtol=1e-4)


@pytest.mark.parametrize("shape", [(128, 96, 72), (13, 21, 9)])
@pytest.mark.parametrize("target", ["llvm", HASWELL])
def test_scaled_product_matches_numpy(shape, target):
    m, kk, n = shape
    C, ins = _scaled_product(m, kk, n)
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (kk, m)).astype("float32")
    s = rng.uniform(1, 2, kk).astype("float32")
    b = rng.uniform(-1, 1, (kk, n)).astype("float32")
    k = ta.build([C], list(ins), cache=False, target=target)
    np.testing.assert_allclose(k(a, s, b), (a.astype("f8") / s[:, None]).T @ b, rtol=1e-4, atol=1e-4)
