"""``python tools/opt_compare.py [--workloads a,b] [--targets "llvm;llvm -mcpu=haswell"] [--pipelines O3,3]``

The kernels' LLVM time and run time under two pipelines, per layer workload (issue 9): each
workload's forward and gradients are built once per pipeline and target (an empty disk cache
of their own), the kernels' LLVM CPU seconds (the compile children's included) recorded, then
run at one thread, the pipelines alternating in this one process -- medians of CPU seconds.
``--pipelines`` names them: ``3`` (``opt_level=3``: ``-O2``, or ``-O3`` where a nest needs
it, :mod:`tensorad.codegen.optpipe`), ``O3`` (``-O3`` for every kernel module, as before
session 21) or ``2``; the outputs of all are compared.  Timing lives here, never in the tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np


def _define(name):
    import tensorad as ta
    from benchmarks import sys_tensorad, workloads

    w = workloads.BY_NAME[name]
    ints = w.params.get("ints", {})
    p = {k: ta.placeholder(s, "int32" if k in ints else "float32", k) for k, s in w.input_shapes().items()}
    y = sys_tensorad.topi_forward(w.kind, p, w.params)
    head = ta.placeholder(y.shape, "float32", "H")
    grads = list(ta.JacobianRecursive(y, [p[g] for g in w.grads], head))
    rng = np.random.default_rng(0)
    args = []
    for k, t in p.items():
        if k in ints:
            args.append(rng.integers(0, ints[k], size=t.shape).astype(np.int32))
        elif k in w.params.get("positive", ()):
            args.append(rng.uniform(0.5, 1.5, t.shape).astype(np.float32))
        else:
            args.append(rng.uniform(-1, 1, t.shape).astype(np.float32))
    h = rng.uniform(-1, 1, y.shape).astype(np.float32)
    return y, list(p.values()), grads, head, args, h


def _build(y, inputs, grads, head, target, pipeline):
    import importlib

    from tensorad.codegen import isolate

    import tensorad as ta

    _b = importlib.import_module("tensorad.codegen.build")

    spent = [0.0]
    original = _b.compile_kernel

    def wrapped(*a, **k):
        c0 = isolate.cpu_seconds()
        try:
            return original(*a, **k)
        finally:
            spent[0] += isolate.cpu_seconds() - c0
    _b.compile_kernel = wrapped
    opts = {"num_threads": 1, "target": target, "opt_level": 3 if pipeline == "O3" else int(pipeline)}
    marking = _b.optpipe.mark
    if pipeline == "O3":
        _b.optpipe.mark = lambda text, level: text
    try:
        fwd = ta.build([y], inputs, **opts)
        bwd = ta.build(grads, inputs + [head], **opts)
    finally:
        _b.compile_kernel = original
        _b.optpipe.mark = marking
    return fwd, bwd, spent[0]


def main(argv=None) -> None:
    import importlib

    global _b
    _b = importlib.import_module("tensorad.codegen.build")
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="conv3x3_relu,conv3x3s2_relu,batch_norm,max_pool3s2,"
                                           "global_avg_pool,layer_norm,attention,gelu_mlp,log_softmax_nll")
    ap.add_argument("--targets", default="llvm;llvm -mcpu=haswell")
    ap.add_argument("--pipelines", default="O3,3")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args(argv)
    pipes = args.pipelines.split(",")
    print(f"load {os.getloadavg()}")
    for name in args.workloads.split(","):
        y, inputs, grads, head, data, h = _define(name)
        for target in args.targets.split(";"):
            kernels, llvm_s = {}, {}
            for pipe in pipes:
                _b._COMPILED.clear()
                with tempfile.TemporaryDirectory() as cache:
                    os.environ["TENSORAD_CACHE_DIR"] = cache
                    fwd, bwd, spent = _build(y, inputs, grads, head, target, pipe)
                kernels[pipe], llvm_s[pipe] = (fwd, bwd), spent
            ref = None
            times = {p: ([], []) for p in pipes}
            for r in range(args.reps + 1):
                for pipe in (pipes if r % 2 else pipes[::-1]):
                    fwd, bwd = kernels[pipe]
                    c0 = time.process_time()
                    a = fwd(*data)
                    c1 = time.process_time()
                    b = bwd(*data, h)
                    c2 = time.process_time()
                    if r:
                        times[pipe][0].append(c1 - c0)
                        times[pipe][1].append(c2 - c1)
                    outs = [np.asarray(x) for x in ([a] if not isinstance(a, (list, tuple)) else a)]
                    outs += [np.asarray(x) for x in (b if isinstance(b, (list, tuple)) else [b])]
                    if ref is None:
                        ref = outs
                    else:
                        for u, v in zip(ref, outs):
                            if not np.allclose(u, v, rtol=1e-3, atol=1e-4):
                                print(f"  !! {name} {target} {pipe}: outputs differ")
            cols = "  ".join(f"{p}: llvm {llvm_s[p] * 1e3:6.0f} ms run fwd "
                             f"{statistics.median(times[p][0]) * 1e3:7.2f} bwd "
                             f"{statistics.median(times[p][1]) * 1e3:7.2f}" for p in pipes)
            print(f"{name:<16} {target:<20} {cols}")
            sys.stdout.flush()
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
