"""GEMM and exp-heavy kernels per target, against torch and NumPy (issue 9's bars).

    python -m benchmarks.target_bench [--target "llvm -mcpu=haswell"] [--reps 9] [--quick] [--cpu-time]
                                      [--pause S] [--peer-isa match|native]

* float32 GEMM ``C = A @ B`` at 512^3 and 1024^3, 1 and 2 threads: tensorad, ``torch.mm``,
  NumPy (its BLAS, threads set through threadpoolctl-free env: NumPy's BLAS uses what it uses;
  its thread count is printed when known);
* a sum of exp over ``X[512, 10000]`` (``S[i] = sum_j exp(X[i, j])``): tensorad, ``torch.exp(X)
  .sum(1)``, ``np.exp(X).sum(1)``.

A target narrower than the host (AVX2 on an AVX-512 machine) holds torch and NumPy to its
instruction set (``--peer-isa match``, the default; :mod:`.threads`), so the ratios are those a
user of that CPU sees. Every system computes the same data; results are checked against NumPy
first. Timings are medians over interleaved rounds (each round runs every system once, in
turn), so a load change hits all of them alike; the report gives ratios to the peers, the CPU,
the target and the load (``os.getloadavg``). A target this CPU cannot run (``-mcpu=skylake-
avx512`` on an AVX2 machine) is compiled only: its register tile and whether its code uses
``zmm`` registers are printed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from functools import partial

import numpy as np
from tensorad.codegen.target import host_target, parse_target

import tensorad as ta

from .threads import run_again_with_peer_cap


def _gemm(n: int):
    A = ta.placeholder((n, n), "float32", "A")
    B = ta.placeholder((n, n), "float32", "B")
    k = ta.reduce_axis((0, n), "k")
    C = ta.compute((n, n), lambda i, j: ta.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [C], [A, B]


def _sum_exp(m: int, n: int):
    X = ta.placeholder((m, n), "float32", "X")
    j = ta.reduce_axis((0, n), "j")
    S = ta.compute((m,), lambda i: ta.sum(ta.exp(X[i, j]), axis=j), name="S")
    return [S], [X]


def _torch_sum_exp(x):
    import torch

    return torch.exp(x).sum(1)


def _numpy_sum_exp(x):
    return np.exp(x).sum(1)


def _micro_kernel_summary(tgt) -> str:
    """Vector FMAs and stack accesses of the library's float32 micro-kernel for ``tgt``."""
    import llvmlite.binding as llvm
    from tensorad.codegen import gemmlib, jit
    from tensorad.codegen.contraction import register_tile

    mr, nr = register_tile(tgt, "float32")
    core = gemmlib.piece_ir("float32", mr, nr, "core", tgt)
    asm = jit.target_machine(tgt).emit_assembly(llvm.parse_assembly(core))
    body = asm[asm.index("_micro:"):]
    body = body[:body.index(".Lfunc_end")].splitlines()
    start = next(i for i, ln in enumerate(body) if ln.startswith(".LBB"))
    stop = next(i for i, ln in enumerate(body[start:], start) if ln.strip().startswith("jl"))
    loop = body[start:stop]
    regs = "zmm" if any("zmm" in ln for ln in loop) else "ymm" if any("ymm" in ln for ln in loop) else "xmm"
    return (f"{mr}x{nr} tile, k loop: {sum('vfmadd' in ln for ln in loop)} FMAs on {regs}, "
            f"{sum('rsp' in ln for ln in loop)} stack accesses")


def _median_interleaved(fns: dict, reps: int, clock=time.perf_counter,
                        pause: float = 0.25) -> dict[str, float]:
    """Medians of ``reps`` rounds; each round runs every system once, starting with a different
    one each round, after a pause (a BLAS's worker threads spin for a while after a call and
    would slow down whichever system runs next).  After a pause every system starts cold --
    on a VM an idle core may take milliseconds to come back -- so ``pause=0`` (each system run
    twice back to back, the second timed) measures the steady state a training loop sees -- at
    1 thread: at 2, the BLAS's spinning threads then take the second core from the others."""
    for f in fns.values():  # warm up
        f()
    names = list(fns)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if pause:
                time.sleep(pause)  # (OpenBLAS spins ~2^28 cycles, about 0.1 s)
            else:
                fns[name]()
            t0 = clock()
            fns[name]()
            times[name].append(clock() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def run(target: str, reps: int, quick: bool, cpu_time: bool = False, threads_list=(1, 2),
        pause: float = 0.25) -> None:
    import torch

    tgt = parse_target(target)
    print(f"CPU: {_cpu_name()}; host target: {host_target()}")
    print(f"target: {tgt}; load average (1 min) before: {os.getloadavg()[0]:.2f}")
    rng = np.random.default_rng(0)
    if not tgt.runs_here(host_target()):
        outs, ins = _gemm(512)
        kern = ta.build(outs, ins, target=tgt)
        note = kern.lowered.program.steps[-1].note
        print(f"compiled only (this CPU cannot run it): {note}")
        print(f"its micro-kernel: {_micro_kernel_summary(tgt)}")
        outs, ins = _sum_exp(512, 10000)
        asm = ta.build(outs, ins, target=tgt).asm
        print(f"sum of exp: zmm in code: {'zmm' in asm}; calls: "
              f"{sorted({ln.split()[1] for ln in asm.splitlines() if ln.strip().startswith('call')})}")
        return
    sizes = (512,) if quick else (512, 1024)
    clock = time.process_time if cpu_time else time.perf_counter
    if cpu_time:
        print("times are CPU seconds of this process (robust to other processes' load; 1 thread only)")
    for threads in threads_list:
        torch.set_num_threads(threads)
        for n in sizes:
            outs, ins = _gemm(n)
            kern = ta.build(outs, ins, target=tgt, num_threads=threads)
            a = rng.standard_normal((n, n), np.float32)
            b = rng.standard_normal((n, n), np.float32)
            np.testing.assert_allclose(kern(a, b), a @ b, rtol=2e-3, atol=2e-3 * np.sqrt(n))
            ta_, tb = torch.from_numpy(a), torch.from_numpy(b)
            out = np.empty((n, n), np.float32)
            t = _median_interleaved({"tensorad": partial(kern, a, b, out=out),
                                     "torch.mm": partial(torch.mm, ta_, tb),
                                     "numpy": partial(np.matmul, a, b, out=out)}, reps, clock, pause)
            gf = {k: 2 * n ** 3 / v / 1e9 for k, v in t.items()}
            print(f"GEMM {n}^3 float32, {threads} thread(s): tensorad {gf['tensorad']:.1f} GFLOP/s, "
                  f"torch.mm {gf['torch.mm']:.1f}, numpy {gf['numpy']:.1f}; tensorad/torch "
                  f"{gf['tensorad'] / gf['torch.mm']:.2f}, tensorad/numpy {gf['tensorad'] / gf['numpy']:.2f}"
                  f"  [{kern.lowered.program.steps[-1].note.split(': ')[-1]}]")
        outs, ins = _sum_exp(512, 10000)
        kern = ta.build(outs, ins, target=tgt, num_threads=threads)
        x = rng.uniform(-5, 5, (512, 10000)).astype(np.float32)
        np.testing.assert_allclose(kern(x), np.exp(x.astype(np.float64)).sum(1), rtol=1e-4)
        tx = torch.from_numpy(x)
        t = _median_interleaved({"tensorad": partial(kern, x), "torch": partial(_torch_sum_exp, tx),
                                 "numpy": partial(_numpy_sum_exp, x)}, reps, clock, pause)
        print(f"sum of exp [512 x 10000] float32, {threads} thread(s): "
              f"tensorad {t['tensorad'] * 1e3:.2f} ms, "
              f"torch {t['torch'] * 1e3:.2f}, numpy {t['numpy'] * 1e3:.2f}; torch/tensorad "
              f"{t['torch'] / t['tensorad']:.2f}x, numpy/tensorad {t['numpy'] / t['tensorad']:.2f}x")
    print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="llvm")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--quick", action="store_true", help="512^3 only")
    p.add_argument("--cpu-time", action="store_true",
                   help="time by this process's CPU seconds, 1 thread only (a loaded machine)")
    p.add_argument("--pause", type=float, default=0.25,
                   help="seconds of sleep before each timed call (0: back to back; see _median_interleaved)")
    p.add_argument("--peer-isa", choices=("match", "native"), default="match",
                   help="match: a --target narrower than the host holds torch and NumPy to its "
                        "instruction set (benchmarks/threads.py); native: the whole host")
    a = p.parse_args()
    if a.peer_isa == "match":
        run_again_with_peer_cap(a.target, ["-m", "benchmarks.target_bench"] + sys.argv[1:])
    print(f"pause before each timed call: {a.pause} s")
    run(a.target, a.reps, a.quick, a.cpu_time, (1,) if a.cpu_time else (1, 2), a.pause)


if __name__ == "__main__":
    main()
