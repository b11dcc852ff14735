"""A kernel's own packer leaves LLVM only the work that pays (codegen/gemm/packing.py: a
shorter compile).

A side contiguous along its panel rows under an expression (``A[k, i] / S[k]``, attention's
normalized probabilities) is packed by ``Packer._pack_rows``: per block of ``k`` rows, a full
panel is a constant-trip loop over the panel's row that LLVM vectorizes across ``k``.  LLVM
also unrolled that ``k`` loop's scalar remainder 8 times with a prologue, and vectorized
(with an epilogue) the element-by-element loop of a partial panel, which never runs a panel's
width of trips: a third of the packer's instructions and half its code generation time
(attention's packers: 75-105 ms each cold, AMD EPYC).  The ``k`` loop now carries
``llvm.loop.unroll.disable`` and the partial panel's loop is kept from the vectorizer; the
vector body is LLVM's as before.  A panel row at least a vector wide (a ``B`` panel of 24
columns) is SLP-vectorized once LLVM unrolls it, so its ``k`` loop is kept from the loop
vectorizer too (a stride-2 convolution's masked ``B`` packer: 95 ms of LLVM against 150).  The
tests read loop metadata and count instructions of the optimized IR (no timing), and check
results against NumPy."""

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


def test_the_row_block_loop_is_vectorized_not_unrolled():
    C, ins = _scaled_product(128, 96, 72)
    k = ta.build([C], list(ins), cache=False, target=HASWELL)
    text = k.llvm_ir_unoptimized
    assert re.search(r'define internal void @"\w+_packA"', text), "not packed by the kernel's own packer"
    assert _loop_hints(text, "pk") == {"llvm.loop.unroll.disable"}
    assert "llvm.loop.vectorize.enable" in _loop_hints(text, "seg")
    opt = k.llvm_ir
    # the code that runs (the packer at -O2, in the product's part): a vector body over 4 values of k,
    # and a remainder of one division, not unrolled
    assert "fdiv contract <4 x float>" in opt and opt.count("fdiv contract float") == 1
    assert _instructions(opt) < 540  # 627 before (haswell, LLVM 20), 448 now


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
