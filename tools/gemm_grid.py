"""``python tools/gemm_grid.py [--threads N] [--target SPEC] [--grid full|skinny|models] [--rounds R]``

Matrix products of tensorad against the best BLAS peer (``torch.mm`` and a jitted ``jnp.dot``), timed
interleaved in one process (CPU time by default): each round times every system once on a shape, and each
figure is the median over the rounds of the time per call. It prints, per shape and layout, tensorad's
time over the fastest peer's (below 1: tensorad is faster) for a call (``kernel(a, b)`` against
``torch.mm(a, b)``) and for the kernel's code alone (its entry on a fixed address table, against
``torch.mm(a, b, out=c)``), and their geometric means.

Layouts are those a product and its gradients read: ``nn`` is ``A B``, ``tn`` is ``A^T B`` (a weight's
gradient), ``nt`` is ``A B^T`` (an input's gradient).  The grids: ``skinny``, ``M`` in {1, 8, 32, 64, 96,
128, 256} rows against square and long ``N x K``; ``models``, the products of a Transformer block's
training step (``benchmarks/workloads.py``: 4 x 64 tokens, d = 128, MLP 512) in all three layouts;
``narrow``, one of ``M``, ``N`` or ``K`` in {8, 32, 64} (few rows, few columns, a short sum) with the
other two in 256..4096; or shapes of one's own, ``MxNxK[:layout],...``.  At several threads the default
CPU clock sums the threads' time; ``--clock busiest`` takes the CPU time of the busiest thread (each
thread's CPU clock, with OpenMP's threads told to sleep rather than spin while they wait): how the threads
share the work, which ``--clock wall`` hides on a loaded machine under the time the threads wait for a
core.  It is only a direction there: a thread kept off its core leaves its share to the others.

The process is pinned to ``--threads`` CPUs before NumPy, PyTorch and JAX load (``benchmarks.threads``);
for a target narrower than the host, the peers are held to its instruction set (the process restarts
with their variables).  Run from a tree's root with ``PYTHONPATH=.``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import threads  # noqa: E402

ROWS = (1, 8, 32, 64, 96, 128, 256)
SQUARE = ((64, 64), (128, 128), (384, 384), (1000, 1000), (1024, 4096), (4096, 1024))
SKINNY = ((32, 1000, 1000), (64, 4096, 1024))
NARROW = (8, 32, 64)
WIDE = ((1024, 1024), (256, 4096), (4096, 256))
# (M, N, K) of a Transformer block's products at 256 tokens, d = 128, an MLP of 512 and 512 words
MODELS = ((256, 128, 128), (256, 512, 128), (256, 128, 512), (128, 128, 256), (128, 512, 256),
          (512, 128, 256), (256, 512, 128), (128, 512, 256))


def shapes(grid: str) -> list[tuple[int, int, int, str]]:
    """``(M, N, K, layout)`` of a grid."""
    if grid == "skinny":
        return [(m, n, k, "nn") for m in ROWS for n, k in SQUARE] + \
            [(m, n, k, lay) for m, n, k in SKINNY for lay in ("tn", "nt")]
    if grid == "models":
        return [(m, n, k, lay) for m, n, k in dict.fromkeys(MODELS) for lay in ("nn", "tn", "nt")]
    if grid == "narrow":
        cells = [(s, x, y) for s in NARROW for x, y in WIDE]
        return [(m, n, k, "nn") for m, n, k in dict.fromkeys(
            cell for s, x, y in cells for cell in ((s, x, y), (x, s, y), (x, y, s)))]
    if grid == "quick":
        return [(m, n, k, "nn") for m, n, k in SKINNY] + [(m, n, k, "nn") for m in (1, 8, 96)
                                                          for n, k in ((128, 128), (1024, 4096))]
    if "x" in grid:  # (shapes of one's own: ``MxNxK[:layout],...``)
        return [tuple(int(d) for d in cell.split(":")[0].split("x")) + ((cell.split(":") + ["nn"])[1],)
                for cell in grid.split(",")]
    raise SystemExit(f"unknown grid {grid!r}")


def tensorad_kernel(ta, m: int, n: int, k: int, layout: str, target: str, nthreads: int):
    a_shape = (k, m) if layout == "tn" else (m, k)
    b_shape = (n, k) if layout == "nt" else (k, n)
    A, B = ta.placeholder(a_shape, name="A"), ta.placeholder(b_shape, name="B")
    r = ta.reduce_axis((0, k), "r")

    def body(i, j):
        a = A[r, i] if layout == "tn" else A[i, r]
        b = B[j, r] if layout == "nt" else B[r, j]
        return ta.sum(a * b, r)
    C = ta.compute((m, n), body, "C")
    return ta.build([C], [A, B], target=target, num_threads=nthreads), a_shape, b_shape


def code_alone(kernel, arrays: list) -> tuple:
    """``(run, out)``: a call of the kernel's compiled code alone (no argument checks), its entry on an
    address table of the arrays, the output ``out`` and the temporaries (each moved up to a cache line,
    as a call moves them)."""
    import numpy as np

    out = kernel(*arrays)
    line = kernel.line
    temps = [np.empty(d.itemsize * math.prod(s) + line, np.uint8) for s, d in kernel.signature.temps]
    table = np.array([a.ctypes.data for a in (*arrays, out)] +
                     [t.ctypes.data + -t.ctypes.data % line for t in temps], np.uintp)
    main, address, nthreads = kernel.compiled.main, table.ctypes.data, kernel.num_threads

    def run(_alive: tuple = (arrays, out, temps, table)) -> None:
        main(address, nthreads)
    return run, out


def systems(kern, a, b, lay: str, torch, ta_op, tb_op, tc, jax, jnp) -> dict:
    """The calls timed on one shape: tensorad's call and code, ``torch.mm`` with and without ``out=``, JAX."""
    fns = {"tensorad": lambda: kern(a, b), "code": code_alone(kern, [a, b])[0],
           "torch": lambda: torch.mm(ta_op, tb_op), "torch_out": lambda: torch.mm(ta_op, tb_op, out=tc)}
    if jax is not None:
        ja, jb = jnp.asarray(a), jnp.asarray(b)
        f = jax.jit(lambda x, y: (x.T if lay == "tn" else x) @ (y.T if lay == "nt" else y))
        fns["jax"] = lambda: f(ja, jb).block_until_ready()
    return fns


def busiest_thread() -> dict[int, int]:
    """Nanoseconds each thread of this process has run, by thread (Linux: each thread's CPU clock, whose id
    is ``~tid << 3 | 6``, read up to date also while the thread runs)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[int(tid)] = time.clock_gettime_ns(~int(tid) << 3 | 6)
        except OSError:  # (a thread that ended)
            pass
    return out


def busiest_seconds(t0: dict[int, int], t1: dict[int, int]) -> float:
    """The most seconds one thread ran between two :func:`busiest_thread` snapshots."""
    return max((t1[k] - t0.get(k, 0) for k in t1), default=0) * 1e-9


def time_rounds(fns: dict, rounds: int, clock=time.perf_counter, min_s: float = 2e-3,
                elapsed=lambda t0, t1: t1 - t0) -> dict[str, float]:
    """The median over ``rounds`` interleaved rounds of each function's seconds per call by ``clock``
    (``elapsed`` of two readings)."""
    batch = {}
    for name, fn in fns.items():
        fn()
        t0 = time.perf_counter()
        fn()
        once = max(time.perf_counter() - t0, 1e-7)
        batch[name] = max(1, int(min_s / once))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = clock()
            for _ in range(batch[name]):
                fn()
            samples[name].append(elapsed(t0, clock()) / batch[name])
    return {name: statistics.median(s) for name, s in samples.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--target", default="llvm")
    p.add_argument("--grid", default="skinny")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--no-jax", action="store_true")
    p.add_argument("--clock", choices=("cpu", "wall", "busiest"), default="cpu",
                   help="CPU time of the process (all its threads': less disturbed by a loaded machine), "
                   "wall time, or the CPU time of the busiest thread")
    args = p.parse_args()
    if args.clock == "busiest":
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # (a waiting thread sleeps: its time is its work)
    threads.apply_thread_limit(args.threads, numpy_blas=False)
    threads.run_again_with_peer_cap(args.target, sys.argv)

    import numpy as np
    import torch

    import tensorad as ta
    threads.configure_torch(torch, args.threads)
    jnp = jax = None
    if not args.no_jax:
        import jax
        import jax.numpy as jnp
    rng = np.random.default_rng(0)
    calls, codes = [], []
    print(f"{'M':>5} {'N':>5} {'K':>5} lay  ta_call_us  ta_code_us  torch_us  torch_out_us  jax_us   "
          "call/best code/best  GFLOP/s(code)", flush=True)
    for m, n, k, lay in shapes(args.grid):
        kern, a_shape, b_shape = tensorad_kernel(ta, m, n, k, lay, args.target, args.threads)
        a = rng.standard_normal(a_shape, dtype=np.float32)
        b = rng.standard_normal(b_shape, dtype=np.float32)
        out = kern(a, b)
        ref = (a.astype(np.float64).T if lay == "tn" else a.astype(np.float64)) @ \
            (b.astype(np.float64).T if lay == "nt" else b.astype(np.float64))
        err = float(np.max(np.abs(out - ref)) / (np.max(np.abs(ref)) + 1e-30))
        if err > 1e-4:
            print(f"WRONG {m}x{n}x{k} {lay}: relative error {err:.2e}", flush=True)
        ta_ = torch.from_numpy(a)
        tb_ = torch.from_numpy(b)
        ta_op = ta_.t() if lay == "tn" else ta_
        tb_op = tb_.t() if lay == "nt" else tb_
        fns = systems(kern, a, b, lay, torch, ta_op, tb_op, torch.empty(m, n), jax, jnp)
        clock, elapsed = {"cpu": (time.process_time, None), "wall": (time.perf_counter, None),
                          "busiest": (busiest_thread, busiest_seconds)}[args.clock]
        t = time_rounds(fns, args.rounds, clock, **({"elapsed": elapsed} if elapsed else {}))
        best = min(t["torch"], t.get("jax", math.inf))
        best_code = min(t["torch_out"], t.get("jax", math.inf))
        calls.append(t["tensorad"] / best)
        codes.append(t["code"] / best_code)
        us = {key: v * 1e6 for key, v in t.items()}
        print(f"{m:>5} {n:>5} {k:>5} {lay}  {us['tensorad']:>10.1f} {us['code']:>11.1f} {us['torch']:>9.1f} "
              f"{us['torch_out']:>13.1f} {us.get('jax', math.nan):>7.1f} {calls[-1]:>10.2f} "
              f"{codes[-1]:>9.2f} {2 * m * n * k / t['code'] / 1e9:>13.1f}", flush=True)

    def geomean(xs: list[float]) -> float:
        return math.exp(sum(map(math.log, xs)) / len(xs))
    print(f"geomean tensorad/best peer: call {geomean(calls):.3f}, code alone {geomean(codes):.3f} "
          f"({len(calls)} products, {args.threads} thread(s), target {args.target!r})", flush=True)


if __name__ == "__main__":
    main()
