"""``python tools/opt_compare.py [--suites layers,seed,unseen] [--only a,b] [--targets T1;T2]``

Every kernel of the benchmark workloads under LLVM pipelines: ``O3`` (what a kernel
module compiles with) against candidates -- ``O2`` and ``O2`` with what ``-O3`` adds, set by
LLVM options for the run: ``+unroll`` (``-O3``'s full-unroll threshold), ``+nontrivial``
(non-trivial loop unswitching); ``O3-unroll`` is ``-O3`` with ``-O2``'s threshold.  Per
workload and target the kernels are built once -- the forward, ``JacobianRecursive``'s
gradients, and ``ta.function``'s forward and backward (the benchmark's, reading saved
residuals) -- then each one's module text is compiled under each pipeline in this process (LLVM
CPU seconds, medians of ``--compiles``; whether the optimized IR is the same text) and linked,
and the variants are run alternating in this one process at one thread: CPU-time medians of
``--reps`` samples, each enough calls for 2 ms; outputs compared.  The ratio printed is the
second pipeline's run time over the first's.  Timing
lives here, never in the tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid

import numpy as np

UNROLL = ("unroll-threshold-default", "300", "150")  # -O3's full-unroll threshold at -O2
NONTRIVIAL = ("enable-nontrivial-unswitch", "true", "false")  # -O3's loop unswitching at -O2
PIPES = {  # name: (level, LLVM options set for the run and put back)
    "O3": (3, ()), "O2": (2, ()), "O2+unroll": (2, (UNROLL,)), "O2+nontrivial": (2, (NONTRIVIAL,)),
    "O2+unroll+nontrivial": (2, (UNROLL, NONTRIVIAL)),
    "O3-unroll": (3, (("unroll-threshold-aggressive", "150", "300"),)),
}


def _data(shapes: dict, ints: dict, positive, rng) -> list[np.ndarray]:
    out = []
    for k, s in shapes.items():
        if k in ints:
            out.append(rng.integers(0, ints[k], size=s).astype(np.int32))
        elif k in positive:
            out.append(rng.uniform(0.5, 1.5, s).astype(np.float32))
        else:
            out.append(rng.uniform(-1, 1, s).astype(np.float32))
    return out


def cases(suites: list[str]):
    """(name, placeholders dict, forward tensor, wrt names, input arrays) per workload."""
    import tensorad as ta
    from benchmarks import sys_tensorad, workloads

    for w in workloads.BY_NAME.values():
        if w.suite in suites:
            ints = w.params.get("ints", {})
            shapes, positive = w.input_shapes(), w.params.get("positive", ())
            p = {k: ta.placeholder(s, "int32" if k in ints else "float32", k) for k, s in shapes.items()}
            yield (w.name, p, lambda p=p, w=w: sys_tensorad.topi_forward(w.kind, p, w.params), list(w.grads),
                   lambda rng, s=shapes, i=ints, pos=positive: _data(s, i, pos, rng))
    if "unseen" in suites:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import probe_unseen

        for name, (_, shapes, grads, ta_fn, _) in probe_unseen.CASES.items():
            p = {k: ta.placeholder(s, "int32" if isinstance(spec, tuple) else "float32", k)
                 for k, (s, spec) in shapes.items()}
            yield (name, p, lambda p=p, f=ta_fn: f(**p), list(grads),
                   lambda rng, shapes=shapes: [probe_unseen._data(spec, s, np.float32, rng)
                                               for s, spec in shapes.values()])


def kernels(p: dict, forward, grads: list[str], data, target: str) -> dict:
    """Each kernel of one workload with the arguments it is called with."""
    import tensorad as ta

    rng = np.random.default_rng(0)
    args = data(rng)
    y = forward()
    h = rng.uniform(-1, 1, y.shape).astype(np.float32)
    opts = {"num_threads": 1, "target": target}
    inputs = list(p.values())
    head = ta.placeholder(y.shape, "float32", "H")
    jac = list(ta.JacobianRecursive(y, [p[g] for g in grads], head))
    out = {"fwd": (ta.build([y], inputs, **opts), args),
           "jac": (ta.build(jac, inputs + [head], **opts), args + [h])}
    f = ta.function(y, inputs, wrt=[p[g] for g in grads], **opts)
    out["fn.fwd"] = (f.residual_kernel, args)
    # (a plain tuple of the residuals takes the kernel's own call: its arguments, then the head)
    residuals = tuple(f.forward(*args)[1])
    out["fn.bwd"] = (f.backward_kernel, [*residuals, h])
    return out


def recompiled(kernel, pipe: str, compiles: int):
    """``kernel`` with its module text compiled by ``pipe``; the LLVM CPU seconds (median);
    the optimized IR."""
    import llvmlite.binding as llvm
    from tensorad.codegen.jit import compile_job
    from tensorad.codegen.jit import engine as jit
    from tensorad.codegen.runtime.kernel import Kernel
    from tensorad.codegen.runtime.linking import link
    from tensorad.codegen.runtime.pickling import kernel_from_specs, kernel_state

    c = kernel.compiled
    text = c.llvm_ir_unoptimized
    level, options = PIPES[pipe]
    spent, obj, ir = [], b"", ""
    for _ in range(compiles):
        c0 = time.process_time()
        t = c.target
        tm = jit.target_machine(t)
        mod = compile_job.parse(text, compile_job.Machine(t.triple, t.cpu, t.features), tm)
        for name, value, _ in options:
            llvm.set_option("opt_compare", f"-{name}={value}")
        try:
            compile_job.Pipeline(level).run(mod, tm)
        finally:
            for name, _, default in options:
                llvm.set_option("opt_compare", f"-{name}={default}")
        obj = jit.target_machine(c.target).emit_object(mod)
        spent.append(time.process_time() - c0)
        ir = str(mod)
    state = kernel_state(kernel)
    linked = link("opt_compare-" + uuid.uuid4().hex, obj, c.meta, text, c.opt_level, c.target)
    rebuilt = kernel_from_specs(Kernel, state, linked, state["num_threads"], state["work"], state["text"])
    return rebuilt, statistics.median(spent), ir.split("\n", 1)[1]


def _outputs(r) -> list[np.ndarray]:
    return [np.asarray(x) for x in (r if isinstance(r, (list, tuple)) else [r])]


def timed(variants: dict, args: list, reps: int) -> tuple[dict, bool]:
    """CPU-ms medians per variant, alternating; whether all outputs agreed."""
    first = next(iter(variants.values()))
    c0 = time.process_time()
    ref = _outputs(first(*args))
    calls = max(1, int(0.002 / max(time.process_time() - c0, 1e-6)))
    same, times = True, {n: [] for n in variants}
    names = list(variants)
    for r in range(reps):
        for n in (names if r % 2 else names[::-1]):
            c0 = time.process_time()
            for _ in range(calls):
                got = variants[n](*args)
            times[n].append((time.process_time() - c0) / calls)
            same = same and all(np.allclose(u, v, rtol=1e-3, atol=1e-4, equal_nan=True)
                                for u, v in zip(ref, _outputs(got)))
    return {n: statistics.median(v) * 1e3 for n, v in times.items()}, same


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suites", default="layers,seed,unseen")
    ap.add_argument("--only", default="", help="workload names, comma-separated")
    ap.add_argument("--targets", default="llvm;llvm -mcpu=haswell")
    ap.add_argument("--pipelines", default="O3,O2+unroll+nontrivial")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--compiles", type=int, default=3)
    args = ap.parse_args(argv)
    pipes = args.pipelines.split(",")
    only = set(filter(None, args.only.split(",")))
    print(f"load {os.getloadavg()}; ratio: {pipes[1]} / {pipes[0]} run time")
    worst = []
    for name, p, forward, grads, data in cases(args.suites.split(",")):
        if only and name not in only:
            continue
        for target in args.targets.split(";"):
            for which, (k, kargs) in kernels(p, forward, grads, data, target).items():
                built = {pipe: recompiled(k, pipe, args.compiles) for pipe in pipes}
                ms, same = timed({pipe: b[0] for pipe, b in built.items()}, kargs, args.reps)
                equal = len({b[2] for b in built.values()}) == 1
                ratio = ms[pipes[1]] / ms[pipes[0]]
                if not equal:
                    worst.append((ratio, name, which, target))
                cols = "  ".join(f"{pipe}: llvm {built[pipe][1] * 1e3:6.1f} run {ms[pipe]:8.3f}"
                                 for pipe in pipes)
                notes = ("same IR" if equal else "IR differs") + ("" if same else "  !! outputs differ")
                print(f"{name:<18} {which:<7} {target:<21} {cols}  {ratio:5.2f} {notes}", flush=True)
    worst.sort(reverse=True)
    print("slowest ratios where the IR differs:",
          ", ".join(f"{n} {w} {t.split()[-1]} {r:.2f}" for r, n, w, t in worst[:6]))
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
