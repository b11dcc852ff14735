"""Dump every benchmark workload's (all suites), every simplify work workload's, every
``tools/probe_unseen.py`` case's, every ``tools/user_programs.py`` model's and a fixed sample of
fuzzed programs' gradient program, lowered loop nest, ``.work`` count and strategy choices (the
candidates offered at each point, the one chosen, the cost model's estimate), for two pinned
targets, one file per workload, so that two trees can be compared byte for byte: an optimizer
speed-up or a change of the code's layout must leave them identical.

Run from a tree's root: ``PYTHONPATH=. python tools/dump_gradients.py OUTDIR [NAME ...]``, then
``diff -r`` two OUTDIRs.  ``--fuzz N`` sets the size of the fuzz sample (default 150).  stderr
gets each workload's differentiate and total CPU seconds.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import traceback

import tensorad as ta
from benchmarks import sys_tensorad, workloads
from tensorad.ir import placeholders

# Pinned so that the dump does not depend on the machine it runs on.
TARGETS = ("llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell")


def _dump(out: str, name: str, Y, inputs, all_inputs, options: dict | None = None) -> None:
    options = options or {}
    t0 = time.process_time()
    H = ta.placeholder(Y.shape, "float32", "H")
    try:
        grads = list(ta.JacobianRecursive(Y, inputs, H))
        text = "\n".join(ta.PrintTensorRecursively(g) for g in grads)
        t1 = time.process_time()
        for target in TARGETS:
            low = ta.lower(grads, list(all_inputs) + [H], target=target, **options)
            text += f"\n==== lowered for {target}\n" + str(low) + f"\n==== work {low.work}\n"
            text += "".join(f"==== choice {point}: {chosen} of {sorted(labels)}\n"
                            for point, labels, chosen in low.offered)
            text += "".join(f"==== estimate {point}: {cycles:.6g}\n"
                            for point, cycles in sorted(low.estimates.items()))
    except Exception:  # an error is part of the result: it is dumped and compared too
        text = "ERROR\n" + traceback.format_exc()
        t1 = time.process_time()
    with open(os.path.join(out, name + ".txt"), "w") as f:
        f.write(text)
    print(name, f"diff {t1 - t0:.2f} total {time.process_time() - t0:.2f}", file=sys.stderr, flush=True)


def _fuzz_sample(out: str, count: int) -> None:
    """The fuzzer's programs of the seeds 0..count-1 (without the stream ``forms49``, as the work gate's
    sample), differentiated with respect to their float inputs,
    lowered with the options each seed draws (but its target, pinned, and ``tune``, a measurement)."""
    from fuzz.checks import load
    from fuzz.program import generate

    for seed in range(count):
        prog = generate(seed, forms49=False)
        try:
            ns = load(prog.render())
        except Exception:  # a program the language rejects: nothing to dump
            continue
        wrt = [t for t in ns["INPUTS"] if t.dtype.startswith(("float", "bfloat"))]
        if not wrt:
            continue
        options = {k: v for k, v in prog.options.items() if k not in ("target", "tune")}
        _dump(out, f"fuzz-{seed}", ns["OUT"], wrt, ns["INPUTS"], options)


def main(argv: list[str]) -> None:
    fuzz = 150
    if "--fuzz" in argv:
        k = argv.index("--fuzz")
        fuzz = int(argv[k + 1])
        argv = argv[:k] + argv[k + 2:]
    out, only = argv[0], set(argv[1:])
    os.makedirs(out, exist_ok=True)
    spec = importlib.util.spec_from_file_location("simplify_workloads", "tests/simplify/workloads.py")
    W = importlib.util.module_from_spec(spec)
    sys.modules["simplify_workloads"] = W
    spec.loader.exec_module(W)
    for w in workloads.select(None, workloads.SUITES):
        if only and w.name not in only:
            continue
        ints = w.params.get("ints", {})
        p = {k: ta.placeholder(s, "int32" if k in ints else "float32", k)
             for k, s in w.input_shapes(tiny=False).items()}
        Y = sys_tensorad.topi_forward(w.kind, p, w.params)
        _dump(out, "bench-" + w.name, Y, [p[g] for g in w.grads], p.values())
    for wl in W.all_workloads() + W.family_workloads():
        if only and wl.name not in only:
            continue
        _dump(out, "simplify-" + wl.name, wl.output, wl.inputs, placeholders([wl.output]))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (this tree's cases)
    import probe_unseen as pu
    import user_programs

    for name, (_, shapes, grads, ta_fn, _) in pu.CASES.items():
        if only and name not in only:
            continue
        p = {k: ta.placeholder(s, "int32" if isinstance(spec, tuple) else "float32", k)
             for k, (s, spec) in shapes.items()}
        _dump(out, "probe-" + name, ta_fn(**p), [p[g] for g in grads], p.values())
    for name, make in user_programs.PROGRAMS.items():
        if not only or name in only:
            Y, wrt = make()
            _dump(out, "program-" + name, Y, wrt, placeholders([Y]))
    if not only:
        _fuzz_sample(out, fuzz)


if __name__ == "__main__":
    main(sys.argv[1:])
