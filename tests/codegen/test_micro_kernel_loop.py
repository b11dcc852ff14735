"""The micro-kernel's ``k`` loop, counted in the assembly LLVM makes of it for each target.

Per ``k`` step an ``MR x NR`` tile does ``MR * NV`` multiply-adds (``NV = NR / lanes``) from
``NV`` vector loads of B and ``MR`` broadcasts of A, all in registers.  Without FMA the
product needs a register of its own before it is added: the 4 x 24 tile chosen as for FMA
spilled and reloaded an accumulator every step on AVX without FMA (42 instructions a step; the
6 x 16 tile now 37, no spill; the 512^3 float32 product was 1.3-1.5x slower).  The AVX2 code of
the host and of ``-mcpu=haswell`` is the same loop (the conv 3x3 forward ran at the same speed on both); the
AVX-512 loop is read here though it cannot run on an AVX2 machine.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from tensorad.codegen.gemm import library as gemmlib
from tensorad.codegen.gemm.contraction import register_tile
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.target import parse_target

import tensorad as ta

TARGETS = ("llvm", "llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell -mattr=-fma",
           "llvm -mcpu=x86-64")


def k_loop(spec: str, dtype: str) -> tuple[int, int, list[str]]:
    """``(MR, NR, instructions)`` of the first loop of the target's micro-kernel: its ``k`` loop
    (:func:`.gemm.library.k_unroll` steps an iteration), labels left out."""
    t = parse_target(spec)
    mr, nr = register_tile(t, dtype)
    text = gemmlib.piece_ir(dtype, mr, nr, "core", t)
    asm = jit.assembly(jit.optimized_ir(text, 0, t), t)  # the core is compiled without IR passes
    micro = re.search(r"\n\w+_micro:\n(.*?)\n\t(?:retq|ret)\b", asm, re.S).group(1)
    # (its blocks: from its first label to the last jump back there, around the next panel's asks)
    loop = re.search(r"\n(\.LBB\w+):[^\n]*\n(.*)\n\tj\w+\t\1\n", micro, re.S).group(2)
    lines = [ln.split("#")[0].strip() for ln in loop.splitlines()]
    return mr, nr, [ln for ln in lines if ln and not ln.startswith(".")]


@pytest.mark.parametrize("spec", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_k_loop_keeps_the_tile_in_registers(spec, dtype):
    t = parse_target(spec)
    mr, nr, ins = k_loop(spec, dtype)
    nv = nr // t.lanes(dtype)
    es = 4 if dtype == "float32" else 8
    u = gemmlib.k_unroll(mr, es, t.fma)
    # no spill: the stack is read through %rsp (%rbp may be one more register: B's pointer)
    assert not [i for i in ins if "(%rsp)" in i], (spec, ins)
    ops = [i.split()[0] for i in ins]
    if t.fma:
        assert sum(o.startswith("vfmadd") for o in ops) == u * mr * nv
    else:
        assert sum(o.lstrip("v").startswith("mulp") for o in ops) == mr * nv
        assert sum(o.lstrip("v").startswith("addp") for o in ops) == mr * nv
    # besides: B's loads, A's loads and broadcasts, the prefetches of both panels (each line of
    # the iteration's rows of B and of A) and of rows of the next panel into L2 (each line a row
    # starting anywhere may touch), the loop's increment, pointer steps and compare; SSE's
    # two-operand multiply also copies the broadcast it overwrites
    copies = mr * nv if t.vector_bits < 256 else 0
    ahead = gemmlib.AHEAD_ROWS * len(range(0, nr * es + 63, 64))
    prefetches = len(range(0, u * nr * es, 64)) + len(range(0, u * mr * es, 64)) + ahead
    assert sum(o.startswith("prefetch") for o in ops) == prefetches
    assert len(ins) <= u * (mr * nv * (1 if t.fma else 2) + copies + nv + 2 * mr) + prefetches + 9, \
        (spec, len(ins))


def test_host_and_haswell_run_one_k_loop():
    # two AVX2 + FMA CPUs, compiled for (not run): an AMD Zen 3 and haswell
    # (scheduled apart only: the same instructions, their general-purpose registers allocated apart)
    host, haswell = k_loop("llvm -mcpu=znver3", "float32"), k_loop("llvm -mcpu=haswell", "float32")

    def ops(ins):
        return sorted(re.sub(r"%r(?:\d+|[a-z]{2})\b", "%r", i) for i in ins)
    assert host[:2] == haswell[:2] and ops(host[2]) == ops(haswell[2])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_product_without_fma_matches_numpy(dtype):
    # the 6-row tile without FMA, over edge tiles in both directions and two k blocks
    A = ta.placeholder((29, 300), dtype, "A")
    B = ta.placeholder((300, 37), dtype, "B")
    k = ta.reduce_axis((0, 300), "k")
    C = ta.compute((29, 37), lambda i, j: ta.sum(A[i, k] * B[k, j], axis=k), name="C")
    kern = ta.build([C], [A, B], target="llvm -mcpu=haswell -mattr=-fma", microkernel=True,
                    parallel_min_work=0)
    assert "packed 6x" in str(kern.lowered)
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((29, 300)).astype(dtype), rng.standard_normal((300, 37)).astype(dtype)
    tol = 1e-4 if dtype == "float32" else 1e-12
    for threads in (1, 2):
        kern.num_threads = threads
        want = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(kern(a, b), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("spec", TARGETS)
def test_c_tile_is_prefetched_before_the_k_loop(spec):
    """Every line of the tile's rows of C is asked for before the ``k`` loop, for writing (C
    is read or written only after it; a 1024^3 product ran ~5% faster on both targets)."""
    t = parse_target(spec)
    mr, nr, _ = k_loop(spec, "float32")
    asm = jit.assembly(jit.optimized_ir(gemmlib.piece_ir("float32", mr, nr, "core", t), 0, t), t)
    micro = re.search(r"\n\w+_micro:\n(.*?)\n\t(?:retq|ret)\b", asm, re.S).group(1)
    head = micro.split("\n.LBB")[0]  # the entry block
    per_row = len(set(range(0, nr * 4, 64)) | {nr * 4 - 4})  # a row's lines from its start, and its end
    assert sum(ln.strip().startswith("prefetch") for ln in head.splitlines()) == mr * per_row, head
