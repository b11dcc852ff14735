"""``python -m benchmarks.call_overhead [--depth 10,40,80] [--threads 1,2] [--cpu]``: what a call of
``ta.function``'s forward and backward costs beyond its kernels.

The program is a chain of ``depth`` layers ``h = tanh(dense(h, W))`` over a 4 x 8 batch, with
``wrt=[W]``: the forward saves one activation per layer, so the backward reads ``depth`` saved
values (the case where a per-array cost shows).  ``kernels`` times the two kernels' code alone,
each called on an address table of arrays allocated once; ``call`` times ``f.forward`` then ``f.backward``;
``torch`` (where PyTorch is installed) times the same program through ``ta.torch.function``:
``loss(x, w).backward()``, and ``autograd`` the thinnest ``torch.autograd.Function`` a user could write
over the same ``ta.function`` (NumPy views in, ``forward``/``backward``, tensors out): what the bridge
costs beyond it is ``bridge``.  They are interleaved, and the medians of the rounds are printed with
their differences from ``kernels``, the overheads.  Timing lives here, never in the tests.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import numpy as np

from .machine import load_snapshot


def chain(ta, depth: int, bridge: Callable | None = None):
    X = ta.placeholder((4, 8), name="X")
    W = ta.placeholder((8, 8), name="W")
    h = X
    for _ in range(depth):
        h = ta.topi.tanh(ta.topi.nn.dense(h, W))
    return (bridge or ta.function)(ta.topi.sum(h), [X, W], wrt=[W])


def _torch_calls(ta, depth: int, threads: int, x: np.ndarray, w: np.ndarray) -> dict[str, Callable]:
    """One training step of the chain through the PyTorch bridge, and through a plain
    ``torch.autograd.Function`` over the same ``ta.function`` (none without PyTorch)."""
    try:
        import torch
    except ImportError:
        return {}
    fn = chain(ta, depth, ta.torch.function)
    f = fn.function
    for k in (f.residual_kernel, f.backward_kernel):
        k.num_threads = threads
    xt, wt = torch.from_numpy(x), torch.from_numpy(w).requires_grad_()

    class Plain(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            y, ctx.residuals = f.forward(x.numpy(), w.detach().numpy())
            return torch.from_numpy(y)

        @staticmethod
        def backward(ctx, head):
            (gw,) = f.backward(ctx.residuals, head.numpy())
            return None, torch.from_numpy(gw)

    def step() -> None:
        fn(xt, wt).backward()
        wt.grad = None

    def plain() -> None:
        Plain.apply(xt, wt).backward()
        wt.grad = None
    return {"torch": step, "autograd": plain}


def _entry(kernel, arrays: list) -> Callable[[], None]:
    """A call of the kernel's code alone: ``P_main`` on an address table built once, of the arrays,
    the outputs and the temporaries (each moved up to a cache line, as a call moves them)."""
    outs = kernel.call(arrays)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    line = kernel.line
    temps = [np.empty(d.itemsize * math.prod(s) + line, np.uint8) for s, d in kernel.signature.temps]
    starts = [a.ctypes.data for a in (*arrays, *outs)]
    starts += [t.ctypes.data + -t.ctypes.data % line for t in temps]
    table = np.array(starts, np.uintp)
    main, address, threads = kernel.compiled.main, table.ctypes.data, kernel.num_threads

    def run(_alive: tuple = (arrays, outs, temps, table)) -> None:  # (the arrays live as long as it)
        main(address, threads)
    return run


def measure(depth: int, threads: int, rounds: int = 15, calls: int = 200,
            clock: Callable[[], float] = time.perf_counter) -> dict:
    import tensorad as ta

    f = chain(ta, depth)
    rng = np.random.default_rng(0)
    # weights of unit gain: with small ones the activations decay through the chain into denormals,
    # whose arithmetic is many times slower and would be timed as kernel work
    x, w = rng.random((4, 8), np.float32), (rng.random((8, 8), np.float32) - 0.5) * 1.2
    f.forward_kernel.num_threads = f.residual_kernel.num_threads = threads
    f.backward_kernel.num_threads = threads
    _, residuals = f.forward(x, w)
    f.backward(residuals, 1.0)
    fwd = _entry(f.residual_kernel, [x, w])
    bwd = _entry(f.backward_kernel, [*residuals, np.array(1.0, np.float32)])

    def kernels() -> None:
        fwd()
        bwd()

    def call() -> None:
        _, res = f.forward(x, w)
        f.backward(res, 1.0)

    runs = {"kernels": kernels, "call": call, **_torch_calls(ta, depth, threads, x, w)}
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            t = clock()
            for _ in range(calls):
                fn()
            times[name].append((clock() - t) / calls * 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"depth": depth, "threads": threads, "saved": len(residuals), **med,
            "overhead": med["call"] - med["kernels"],
            "torch_overhead": med["torch"] - med["kernels"] if "torch" in med else float("nan"),
            "bridge": med["torch"] - med["autograd"] if "torch" in med else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.call_overhead", description=__doc__)
    ap.add_argument("--depth", default="10,40,80")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--cpu", action="store_true",
                    help="time the calling thread's CPU time (time.thread_time), not the wall clock: "
                         "steadier on a loaded machine, and whole only at 1 thread")
    args = ap.parse_args()
    clock = time.thread_time if args.cpu else time.perf_counter
    print(f"load before: {load_snapshot()}")
    print(f"{'depth':>5} {'threads':>7} {'saved':>5} {'kernels us':>10} {'call us':>8} {'overhead us':>11} "
          f"{'torch us':>8} {'torch overhead us':>17} {'bridge us':>9}")
    for depth in map(int, args.depth.split(",")):
        for threads in map(int, args.threads.split(",")):
            r = measure(depth, threads, clock=clock)
            print(f"{r['depth']:>5} {r['threads']:>7} {r['saved']:>5} {r['kernels']:>10.1f} "
                  f"{r['call']:>8.1f} {r['overhead']:>11.1f} {r.get('torch', float('nan')):>8.1f} "
                  f"{r['torch_overhead']:>17.1f} {r['bridge']:>9.1f}")


if __name__ == "__main__":
    main()
