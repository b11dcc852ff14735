"""``python tools/micro_peak.py [--target SPEC] [--dtype float32|float64] [--tiles MRxNR,...] [--kc KC]``

How close the matrix-product micro-kernel runs to the machine's peak, on one core.  It measures the
clock with a dependent chain of integer adds (one a cycle), the peak of independent ``llvm.fma`` chains
(as many accumulators as the register file holds), and the library's micro-kernel
(:func:`tensorad.codegen.gemm.library.emit_micro`) alone, compiled for the target: each tile of C from
an ``MC x KC`` packed block of A in L2 (``cache_blocks``'s ``MC``) times one ``KC x NR`` panel of B, the
way the driver runs a row block.  Every figure is the median over interleaved rounds of CPU time, and
the micro-kernel's results are checked against NumPy's float64 product.  It prints the theoretical
peak (2 FMA units x lanes x 2 flops x clock) and each kernel's GFLOP/s as a fraction of it and of the
FMA chains.  Tiles other than the target's (``--tiles``) show what a shape does to the kernel alone
(the driver, packing and edges aside).  Run from a tree's root with ``PYTHONPATH=.``.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from collections.abc import Callable

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
from tensorad.codegen.gemm import descriptor as gd
from tensorad.codegen.gemm import library
from tensorad.codegen.gemm.contraction import cache_blocks, register_tile
from tensorad.codegen.gemm.pack_routines import I64, PTR, loop, new_function
from tensorad.codegen.jit import engine
from tensorad.codegen.llvm.ir_loops import finish_ir
from tensorad.codegen.target import Target, new_target_machine, parse_target

KEEP: list = []  # the execution engines of this run (their code is called until the end)


def jit(text: str, target: Target, name: str, argtypes: list) -> Callable:
    """``name`` of the IR ``text``, compiled for ``target`` into an engine of its own."""
    mod = llvm.parse_assembly(text)
    ee = llvm.create_mcjit_compiler(mod, new_target_machine(target.triple, target.cpu, target.features))
    ee.finalize_object()
    KEEP.append(ee)
    return ctypes.CFUNCTYPE(argtypes[0], *argtypes[1:])(ee.get_function_address(name))


def peak_functions(target: Target, dtype: str) -> tuple:
    """``(chain(n, y, z), fma(n, out, x))``: ``4 n`` dependent adds, ``n`` steps of independent FMA chains."""
    vw, regs = target.lanes(dtype), target.vector_registers
    chains = regs - 4
    et = "float" if dtype == "float32" else "double"
    vt = f"<{vw} x {et}>"
    fma_name = f"llvm.fma.v{vw}{'f32' if et == 'float' else 'f64'}"
    phis = "\n".join(f"  %a{i} = phi {vt} [zeroinitializer, %entry], [%n{i}, %body]" for i in range(chains))
    fmas = "\n".join(f"  %n{i} = call {vt} @{fma_name}({vt} %x, {vt} %y, {vt} %a{i})" for i in range(chains))
    sums = "".join(f"  %s{i} = fadd {vt} %s{i - 1}, %n{i}\n" for i in range(1, chains))
    text = f"""
declare {vt} @{fma_name}({vt}, {vt}, {vt})
define void @fma(i64 %n, ptr %out, {et} %xs) {{
entry:
  %xi = insertelement {vt} undef, {et} %xs, i32 0
  %x = shufflevector {vt} %xi, {vt} undef, <{vw} x i32> zeroinitializer
  %y = fadd {vt} %x, %x
  br label %body
body:
  %i = phi i64 [0, %entry], [%i1, %body]
{phis}
{fmas}
  %i1 = add i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %body, label %exit
exit:
  %s0 = fadd {vt} %n0, zeroinitializer
{sums}  store {vt} %s{chains - 1}, ptr %out, align 1
  ret void
}}
define i64 @chain(i64 %n, i64 %y, i64 %z) {{
entry:
  br label %body
body:
  %i = phi i64 [0, %entry], [%i1, %body]
  %x = phi i64 [0, %entry], [%x4, %body]
  %x1 = add i64 %x, %y
  %x2 = xor i64 %x1, %z
  %x3 = add i64 %x2, %y
  %x4 = xor i64 %x3, %z
  %i1 = add i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %body, label %exit
exit:
  ret i64 %x4
}}
"""
    c = ctypes
    scalar = c.c_float if dtype == "float32" else c.c_double
    return (jit(text, target, "chain", [c.c_int64, c.c_int64, c.c_int64, c.c_int64]),
            jit(text, target, "fma", [None, c.c_int64, c.c_void_p, scalar]), chains * vw * 2)


def micro_bench(target: Target, dtype: str, mr: int, nr: int, tag: str) -> Callable:
    """``bench(A, B, C, ldc, tiles, kc, reps)``: ``reps`` times, the micro-kernel on each of ``tiles``
    ``MR``-row panels of A (``kc`` long, one after another) with the panel of B, adding to C."""
    m = ir.Module(name=tag)
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    vw = gd.panel_lanes(target.lanes(dtype), nr)
    micro = library.emit_micro(m, f"micro_{tag}", t, mr, nr, vw, target.fma)
    fn, b = new_function(m, f"bench_{tag}", [PTR, PTR, PTR, I64, I64, I64, I64], internal=False,
                         attrs=("nounwind",))
    a, bp, c, ldc, tiles, kc, reps = fn.args
    with loop(b, 0, reps, name="rep", vectorize=False):
        with loop(b, 0, tiles, name="t", vectorize=False) as tile:
            ap = b.gep(a, [b.mul(tile, b.mul(kc, I64(mr)))], source_etype=t)
            cp = b.gep(c, [b.mul(tile, b.mul(ldc, I64(mr)))], source_etype=t)
            b.call(micro, [ap, bp, cp, ldc, I64(mr), I64(nr), kc, ir.IntType(1)(0), ir.Constant(PTR, None),
                           I64(0), I64(0)])
    b.ret_void()
    text = engine.optimized_ir(finish_ir(str(m)), 0, target)
    c_ = ctypes
    return jit(text, target, f"bench_{tag}", [None, c_.c_void_p, c_.c_void_p, c_.c_void_p] + [c_.c_int64] * 4)


def aligned(n: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """``n`` random values on a 64-byte boundary (and a little room past them for prefetches)."""
    es = np.dtype(dtype).itemsize
    raw = np.zeros(n + 2048 // es, dtype)
    out = raw[(-raw.ctypes.data) % 64 // es:][:n + 1024 // es]
    out[:n] = rng.uniform(-1, 1, n)
    return out


def tile_run(target: Target, dtype: str, mr: int, nr: int, kc: int, count: int, rng: np.random.Generator,
             seconds: float = 0.02) -> tuple[Callable[[], None], int]:
    """``(call, flops)``: the micro-kernel of an ``MR x NR`` tile on ``count`` packed panels of A, ``kc``
    long, with one panel of B, repeated to take about ``seconds``; checked first against NumPy's float64
    product (an ``AssertionError`` where it differs)."""
    a, b = aligned(count * mr * kc, dtype, rng), aligned(kc * nr, dtype, rng)
    c = aligned(count * mr * nr, dtype, rng)
    c[:] = 0
    bench = micro_bench(target, dtype, mr, nr, f"{mr}x{nr}")
    bench(a.ctypes.data, b.ctypes.data, c.ctypes.data, nr, count, kc, 1)
    want = np.einsum("tkm,kn->tmn", a[:count * mr * kc].reshape(count, kc, mr).astype(np.float64),
                     b[:kc * nr].reshape(kc, nr).astype(np.float64)).reshape(-1)
    np.testing.assert_allclose(c[:count * mr * nr], want, rtol=1e-4, atol=1e-3)
    flops = 2 * count * mr * nr * kc
    reps = max(1, int(seconds * 50e9 / flops))
    return (lambda: bench(a.ctypes.data, b.ctypes.data, c.ctypes.data, nr, count, kc, reps)), flops * reps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="llvm")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    p.add_argument("--tiles", default="", help="MRxNR,... besides the target's register tile")
    p.add_argument("--kc", type=int, default=0, help="KC (default: cache_blocks's for the tile)")
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()
    target, dtype = parse_target(args.target), args.dtype
    rng = np.random.default_rng(0)
    chain, fma, flops_per_step = peak_functions(target, dtype)
    extra = [tuple(int(x) for x in s.split("x")) for s in args.tiles.split(",") if s]
    tiles = [register_tile(target, dtype)] + extra
    runs: dict[str, tuple] = {}
    for mr, nr in tiles:
        kc, mc = cache_blocks(target, dtype, mr, nr)
        kc = args.kc or kc
        runs[f"{mr}x{nr} (KC={kc}, MC={mc // mr * mr})"] = tile_run(target, dtype, mr, nr, kc, mc // mr, rng)
    steps = 2_000_000
    out = np.zeros(64, dtype)
    runs["clock"] = (lambda: chain(steps * 4, 12345, 6789), 4 * 4 * steps)  # (adds; GHz below)
    runs["fma"] = (lambda: fma(steps * 4, out.ctypes.data, 1.0), flops_per_step * 4 * steps)
    samples: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.rounds):
        for name, (call, work) in runs.items():
            t0 = time.process_time()
            call()
            samples[name].append(work / max(time.process_time() - t0, 1e-9) / 1e9)
    rate = {k: statistics.median(v) for k, v in samples.items()}
    ghz, fma_rate = rate.pop("clock"), rate.pop("fma")
    lanes = target.lanes(dtype)
    peak = 2 * lanes * 2 * ghz
    print(f"{target} {dtype}: clock {ghz:.2f} GHz (dependent adds); peak 2 FMA x {lanes} lanes x 2 flops "
          f"x clock = {peak:.1f} GFLOP/s; independent FMA chains {fma_rate:.1f} "
          f"({fma_rate / peak:.0%} of peak)")
    for name, g in rate.items():
        print(f"  micro-kernel {name}: {g:.1f} GFLOP/s = {g / peak:.0%} of peak, {g / fma_rate:.0%} of the "
              "FMA chains")


if __name__ == "__main__":
    main()
