"""GEMM and exp-heavy kernels per target, against torch and NumPy.

    python -m benchmarks.target_bench [--target "llvm -mcpu=haswell"] [--reps 9] [--quick] [--cpu-time]
                                      [--rounds R] [--peer-isa match|native]

* float32 GEMM ``C = A @ B`` at 512^3 and 1024^3, 1 and 2 threads: tensorad, ``torch.mm``,
  NumPy (its BLAS held to the same threads);
* a sum of exp over ``X[512, 10000]`` (``S[i] = sum_j exp(X[i, j])``): tensorad, ``torch.exp(X)
  .sum(1)``, ``np.exp(X).sum(1)``.

A target narrower than the host (AVX2 on an AVX-512 machine) holds torch and NumPy to its
instruction set (``--peer-isa match``, the default; :mod:`.threads`), so the ratios are those a
user of that CPU sees. Every system computes the same data; results are checked against NumPy
first. Each system is timed in a process of its own, limited to the thread count
(:mod:`.threads`: no other system's pool spins on its cores), and the figures are medians over
rounds that each run every system once, in turn (:func:`_medians_of_rounds`), so a load change
hits all of them alike; the report gives ratios to the peers, the CPU,
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
    from tensorad.codegen.gemm import library as gemmlib
    from tensorad.codegen.gemm.contraction import register_tile
    from tensorad.codegen.jit import engine as jit

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


#: seconds of untimed calls before each case: a new process's first parallel calls run
#: partly serial until its pool's workers (and the VM's idle core) are up -- a 2-thread 512^3
#: product here took 1.2-1.5 ms a call for its first ~12 ms of calls, 0.95 after
WARM_UP_S = 0.25
CASES = ("gemm512", "gemm1024", "sum_exp")  # the timed cases; --quick leaves out gemm1024
SYSTEMS = {"gemm": ("tensorad", "torch.mm", "numpy"), "sum_exp": ("tensorad", "torch", "numpy")}


def _case_fn(system: str, case: str, tgt, threads: int, rng):
    """The zero-argument call ``system`` times for ``case`` (its result checked first)."""
    if system.startswith("torch"):
        import torch

    if case.startswith("gemm"):
        n = int(case[4:])
        a = rng.standard_normal((n, n), np.float32)
        b = rng.standard_normal((n, n), np.float32)
        out = np.empty((n, n), np.float32)
        if system == "tensorad":
            kern = ta.build(*_gemm(n), target=tgt, num_threads=threads)
            np.testing.assert_allclose(kern(a, b), a @ b, rtol=2e-3, atol=2e-3 * np.sqrt(n))
            return partial(kern, a, b, out=out), kern.lowered.program.steps[-1].note.split(": ")[-1]
        if system == "torch.mm":
            return partial(torch.mm, torch.from_numpy(a), torch.from_numpy(b)), ""
        return partial(np.matmul, a, b, out=out), ""
    x = rng.uniform(-5, 5, (512, 10000)).astype(np.float32)
    if system == "tensorad":
        kern = ta.build(*_sum_exp(512, 10000), target=tgt, num_threads=threads)
        np.testing.assert_allclose(kern(x), np.exp(x.astype(np.float64)).sum(1), rtol=1e-4)
        return partial(kern, x), ""
    if system == "torch":
        return partial(_torch_sum_exp, torch.from_numpy(x)), ""
    return partial(_numpy_sum_exp, x), ""


def _child(system: str, target: str, threads: int, reps: int, cases: list[str], cpu_time: bool) -> None:
    """In a process of its own, limited to ``threads`` (:mod:`.threads`): each case's median of
    ``reps`` calls after :data:`WARM_UP_S` of untimed ones, each timed right after an untimed
    one (the steady state of a training loop), printed as one JSON line.  Alone in its
    process, no other system's threads spin on the cores it is timed on (a BLAS or OpenMP
    pool keeps spinning ~0.1 s after each call: timed side by side in one process at 2
    threads, tensorad's 1024^3 product read 152 GFLOP/s on an AVX-512 Xeon, and 284 alone)."""
    import json

    from .threads import apply_thread_limit, configure_torch

    apply_thread_limit(threads)
    if system.startswith("torch"):  # (the other systems' processes do without its seconds of import)
        import torch

        configure_torch(torch, threads)
    clock = time.process_time if cpu_time else time.perf_counter
    rng = np.random.default_rng(0)
    result = {}
    for case in cases:
        fn, note = _case_fn(system, case, parse_target(target), threads, rng)
        warm = time.perf_counter() + WARM_UP_S
        while time.perf_counter() < warm:
            fn()
        times = []
        for _ in range(reps):
            fn()
            t0 = clock()
            fn()
            times.append(clock() - t0)
        result[case] = (float(np.median(times)), note)
    print(json.dumps(result))


def _medians_of_rounds(target: str, threads: int, reps: int, cases: list[str], cpu_time: bool,
                       rounds: int) -> dict:
    """``{(system, case): (seconds, note)}``: the median over ``rounds`` rounds, each running every
    system once in a process of its own (:func:`_child`), in an order rotated from round to
    round, so that a change of the machine's load hits every system alike."""
    import json
    import subprocess

    from .threads import thread_env

    systems = sorted({sy for fam in SYSTEMS.values() for sy in fam})
    seen: dict = {}
    for r in range(rounds):
        for system in systems[r % len(systems):] + systems[:r % len(systems)]:
            mine = [c for c in cases if system in SYSTEMS["gemm" if c.startswith("gemm") else c]]
            if not mine:
                continue
            argv = [sys.executable, "-m", "benchmarks.target_bench", "--child", system, "--target", target,
                    "--threads", str(threads), "--reps", str(reps), "--cases", ",".join(mine)]
            out = subprocess.run(argv + (["--cpu-time"] if cpu_time else []), env=thread_env(threads),
                                 capture_output=True, text=True, check=True,
                                 cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            for case, (sec, note) in json.loads(out.stdout.strip().splitlines()[-1]).items():
                seen.setdefault((system, case), []).append((sec, note))
    return {k: (float(np.median([s for s, _ in v])), v[0][1]) for k, v in seen.items()}


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
        rounds: int = 3) -> None:
    tgt = parse_target(target)
    print(f"CPU: {_cpu_name()}; host target: {host_target()}")
    print(f"target: {tgt}; load average (1 min) before: {os.getloadavg()[0]:.2f}")
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
    cases = [c for c in CASES if not (quick and c == "gemm1024")]
    if cpu_time:
        print("times are CPU seconds of each system's process (robust to other processes' load; "
              "1 thread only)")
    for threads in threads_list:
        t = _medians_of_rounds(target, threads, reps, cases, cpu_time, rounds)
        for case in [c for c in cases if c.startswith("gemm")]:
            n = int(case[4:])
            gf = {sy: 2 * n ** 3 / t[(sy, case)][0] / 1e9 for sy in SYSTEMS["gemm"]}
            print(f"GEMM {n}^3 float32, {threads} thread(s): tensorad {gf['tensorad']:.1f} GFLOP/s, "
                  f"torch.mm {gf['torch.mm']:.1f}, numpy {gf['numpy']:.1f}; tensorad/torch "
                  f"{gf['tensorad'] / gf['torch.mm']:.2f}, tensorad/numpy {gf['tensorad'] / gf['numpy']:.2f}"
                  f"  [{t[('tensorad', case)][1]}]")
        ms = {sy: t[(sy, "sum_exp")][0] * 1e3 for sy in SYSTEMS["sum_exp"]}
        print(f"sum of exp [512 x 10000] float32, {threads} thread(s): tensorad {ms['tensorad']:.2f} ms, "
              f"torch {ms['torch']:.2f}, numpy {ms['numpy']:.2f}; torch/tensorad "
              f"{ms['torch'] / ms['tensorad']:.2f}x, numpy/tensorad {ms['numpy'] / ms['tensorad']:.2f}x")
    print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="llvm")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--quick", action="store_true", help="512^3 only")
    p.add_argument("--cpu-time", action="store_true",
                   help="time by this process's CPU seconds, 1 thread only (a loaded machine)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of one process per system (the figure: the median over rounds)")
    p.add_argument("--child", help=argparse.SUPPRESS)  # (one system's process: _child)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--cases", default=",".join(CASES), help=argparse.SUPPRESS)
    p.add_argument("--peer-isa", choices=("match", "native"), default="match",
                   help="match: a --target narrower than the host holds torch and NumPy to its "
                        "instruction set (benchmarks/threads.py); native: the whole host")
    a = p.parse_args()
    if a.child:
        _child(a.child, a.target, a.threads, a.reps, a.cases.split(","), a.cpu_time)
        return
    if a.peer_isa == "match":
        run_again_with_peer_cap(a.target, ["-m", "benchmarks.target_bench"] + sys.argv[1:])
    run(a.target, a.reps, a.quick, a.cpu_time, (1,) if a.cpu_time else (1, 2), a.rounds)


if __name__ == "__main__":
    main()
