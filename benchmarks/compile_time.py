"""``python -m benchmarks.compile_time``: how long tensorad takes to prepare each workload.

For every workload of the table, in a fresh process with an empty disk cache (cold) and then in
another fresh process reading that cache (cached), it times the stages separately:

* ``define``: the forward tensors from ``ta.topi``;
* ``differentiate``: ``ta.JacobianRecursive`` with the optimizer (differentiate + optimize);
* ``build_fwd`` / ``build_bwd``: ``ta.build`` of the forward and of the gradients (cold:
  lowering, LLVM, JIT; cached: the key computed from the tensors, the entry read and linked --
  no lowering, see :mod:`tensorad.codegen.jit.build_key`);
* ``library`` (CPU only, part of the builds): compiling the matrix-product library's pieces
  that the layer's products link (:mod:`tensorad.codegen.gemm.library`: a core per dtype and
  register tile, a packer per side and mode), each kept in the disk cache apart from the
  kernels -- a cost once per machine, target and library version
  (:mod:`tensorad.codegen.gemm.version`: an edit elsewhere in the compiler keeps it): afterwards
  every program that links a piece reads it from disk.  The cold total *includes* it (an empty cache is a
  first-ever build on the machine); the table also prints the total without it.

Each stage is timed in wall-clock and CPU seconds (``cpu_<stage>``: the process's and those of
the worker processes in which LLVM optimizes, :func:`tensorad.codegen.jit.isolate.cpu_seconds`); the
table prints CPU time, which a shared machine disturbs less.  A second table splits the cold
builds by phase (CPU seconds summed over both builds, timed by wrapping the functions in the
measured process): ``lower`` (all of lowering), ``IR`` (LLVM IR emission) and ``LLVM`` (the
kernels' parse, optimization pipeline and code generation, in a child process; a kernel whose
width hint LLVM declines compiles twice, :func:`tensorad.codegen.jit.engine.compile_kernel`) -- the
library's pieces are apart, in ``library`` (CPU time: a first build compiles them beside the
kernel, in children of their own, so the wall time of both is shorter than their sum).

``--library-on-disk`` starts each cold build with what a machine compiles once on disk -- the
library's pieces the workload links and the thread pool's runtime, from a build before the
timed ones -- and nothing else: the cold build of a user whose machine has built before.
``--function`` builds ``ta.function``'s training step instead (``differentiate``: the gradients and the
saved values chosen; ``build_fwd``: the forward keeping its saved values; ``build_bwd``: the backward).
``--jax`` times JAX's cold ``jax.jit(...).lower(...).compile()`` of the same forward and
gradient program (:func:`benchmarks.sys_jax.compile_seconds`), in a fresh process after each
tensorad pair (its ``build`` columns: tracing and autodiff are inside them).

Each figure is the median of ``--repeat`` process pairs, with the machine's load beside it.
Timing lives here, never in the tests (a loaded machine makes timed asserts flaky).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from . import workloads
from .machine import load_snapshot

_STAGES = r"""
import json, sys, time
import tensorad as ta
from benchmarks import sys_tensorad, workloads
w = workloads.BY_NAME[sys.argv[1]]
shapes = w.input_shapes(tiny=sys.argv[2] == "1")
t = {}
import importlib
_build, _emit, _isolate = (importlib.import_module("tensorad.codegen." + m)
                           for m in ("build", "llvm.emit", "jit.isolate"))
clock = _isolate.cpu_seconds  # (LLVM optimizes in worker processes: their CPU counts)
t["cpu_library"] = 0.0  # (the library pieces compiled beside the kernels, summed below)
def cpu_wrap(owner, attr, stage):  # CPU seconds of one phase of the builds, summed
    fn = getattr(owner, attr)
    def wrapped(*a, **k):
        c0, beside = clock(), 0.0
        try:
            out = fn(*a, **k)
            if attr == "compile_kernel":  # (the library pieces compiled beside: 'library')
                beside = sum(cpu for _, cpu in out[2])
                t["cpu_library"] += beside
            return out
        finally:
            t[stage] = t.get(stage, 0.0) + clock() - c0 - beside
    setattr(owner, attr, wrapped)
for owner, attr, stage in [(_build, "lower", "cpu_lower"), (_emit.ModuleEmitter, "emit", "cpu_ir"),
                           (_build, "compile_kernel", "cpu_llvm")]:
    cpu_wrap(owner, attr, stage)
def timed(name, fn):
    t0, c0 = time.perf_counter(), clock()
    out = fn()
    t[name], t["cpu_" + name] = time.perf_counter() - t0, clock() - c0
    return out
def define():
    ints = w.params.get("ints", {})  # token ids, class labels
    p = {k: ta.placeholder(s, "int32" if k in ints else "float32", k) for k, s in shapes.items()}
    return p, sys_tensorad.topi_forward(w.kind, p, w.params)
p, Y = timed("define", define)
if sys.argv[3] == "1":  # one training step of ta.function: the forward keeping its saved values
    f = ta.function(Y, list(p.values()), wrt=[p[g] for g in w.grads])
    timed("differentiate", lambda: f.saved)
    timed("build_fwd", lambda: f.residual_kernel)
    timed("build_bwd", lambda: f.backward_kernel)
else:
    H = ta.placeholder(Y.shape, "float32", "H")
    grads = timed("differentiate", lambda: list(ta.JacobianRecursive(Y, [p[g] for g in w.grads], H)))
    timed("build_fwd", lambda: ta.build([Y], list(p.values())))
    timed("build_bwd", lambda: ta.build(grads, list(p.values()) + [H]))
print(json.dumps(t))
"""


# Removes every entry of the cache directory but what is compiled once per machine: the
# matrix-product library's pieces and the thread pool's runtime (whose stored key texts begin
# "gemmlib" and "pool": :func:`tensorad.codegen.gemm.library.entry_key`,
# :mod:`tensorad.codegen.runtime.pool`).
_KEEP_LIBRARY = r"""
import os, sys
from tensorad.codegen.jit import disk_cache
for f in os.listdir(sys.argv[1]):
    payload = disk_cache.get(f[:-len(".bin")]) if f.endswith(".bin") else None
    if payload is None or not payload[4:].startswith((b"gemmlib\n", b"pool\n")):
        os.unlink(os.path.join(sys.argv[1], f))
"""

# A cold JAX compile of the same forward and gradient program, in a fresh process.
_JAX = r"""
import json, sys
from benchmarks import sys_jax, workloads
w = workloads.BY_NAME[sys.argv[1]]
sys_jax.setup(1)
t = sys_jax.compile_seconds(w, workloads.make_inputs(w, tiny=sys.argv[2] == "1"))
zero = {s: 0.0 for s in ("define", "cpu_define", "differentiate", "cpu_differentiate")}
print(json.dumps({**zero, **{k.replace("fwd", "build_fwd").replace("bwd", "build_bwd"): v
                             for k, v in t.items()}}))
"""


def _run(name: str, cache_dir: str, tiny: bool, script: str = _STAGES,
         function: bool = False) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "TENSORAD_NO_DISK_CACHE"}
    env["TENSORAD_CACHE_DIR"] = cache_dir
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    flags = ["1" if tiny else "0", "1" if function else "0"]
    out = subprocess.run([sys.executable, "-c", script, name, *flags], env=env, cwd=root,
                         capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(f"{name}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1] or "{}")


def _library_only(name: str, library_dir: str, tiny: bool, function: bool = False) -> None:
    """Fill ``library_dir`` with the library pieces the workload links and the thread pool's
    runtime, and nothing else."""
    _run(name, library_dir, tiny, function=function)
    env = {k: v for k, v in os.environ.items() if k != "TENSORAD_NO_DISK_CACHE"}
    subprocess.run([sys.executable, "-c", _KEEP_LIBRARY, library_dir], check=True, timeout=600,
                   env={**env, "TENSORAD_CACHE_DIR": library_dir},
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def measure(names: list[str], repeat: int, tiny: bool = False, library_on_disk: bool = False,
            jax: bool = False, function: bool = False) -> dict:
    """Median stage times per workload, cold (empty cache; with ``library_on_disk``, empty but
    for the library's pieces) and cached (a new process); with ``jax``, JAX's cold compile of
    the same (``jax``), each run interleaved with tensorad's; with ``function``, the builds are
    ``ta.function``'s training step (the forward keeping its saved values, the backward)."""
    results: dict = {"load_before": load_snapshot(), "workloads": {}}
    for w in workloads.select(names):
        runs: dict[str, list[dict[str, float]]] = {"cold": [], "cached": [], **({"jax": []} if jax else {})}
        with tempfile.TemporaryDirectory() as library_dir:
            if library_on_disk:
                _library_only(w.name, library_dir, tiny, function)
            for _ in range(repeat):
                with tempfile.TemporaryDirectory() as parent:
                    cache_dir = os.path.join(parent, "cache")
                    shutil.copytree(library_dir, cache_dir)
                    runs["cold"].append(_run(w.name, cache_dir, tiny, function=function))
                    runs["cached"].append(_run(w.name, cache_dir, tiny, function=function))
                if jax:
                    runs["jax"].append(_run(w.name, library_dir, tiny, _JAX))
        results["workloads"][w.name] = {
            mode: {stage: statistics.median(r.get(stage, 0.0) for r in rs) for stage in set().union(*rs)}
            for mode, rs in runs.items()}
    results["load_after"] = load_snapshot()
    return results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compile_time", description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (smoke test)")
    ap.add_argument("--library-on-disk", action="store_true",
                    help="cold builds start with the library's pieces and the thread pool on disk "
                         "(and nothing else)")
    ap.add_argument("--jax", action="store_true", help="time JAX's cold compile of the same too")
    ap.add_argument("--function", action="store_true",
                    help="build ta.function's training step (the forward keeping its saved values, "
                         "the backward reading them) instead of the forward and the gradients")
    ap.add_argument("--json", default=None, metavar="PATH")
    args = ap.parse_args(argv)
    res = measure([n for n in args.workloads.split(",") if n], args.repeat, args.tiny, args.library_on_disk,
                  args.jax, args.function)
    print(f"load before {res['load_before']}, after {res['load_after']}")
    head = ("workload", "mode", "define", "diff+opt", "build fwd", "build bwd", "total", "library", "w/o lib",
            "wall")
    print("{:<18} {:<7} {:>8} {:>9} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8}  (ms, CPU time of the process; "
          "wall: the total's wall time; jax: jit(...).lower(...).compile())".format(*head))
    stages = ("define", "differentiate", "build_fwd", "build_bwd")
    for name, modes in res["workloads"].items():
        for mode, t in modes.items():
            cpu = [t["cpu_" + s] * 1e3 for s in stages]
            lib = t.get("cpu_library", 0.0) * 1e3
            wall = sum(t[s] for s in stages) * 1e3
            print(f"{name:<18} {mode:<7} {cpu[0]:8.1f} {cpu[1]:9.1f} {cpu[2]:10.1f} {cpu[3]:10.1f} "
                  f"{sum(cpu):8.1f} {lib:8.1f} {sum(cpu) - lib:8.1f} {wall:8.1f}")
    print("\nthe cold builds by phase (ms CPU): lower (whole, LLVM excluded), LLVM IR emission, the kernels'"
          " LLVM parse, passes and code generation (the library's pieces apart, in 'library')")
    print("{:<18} {:>8} {:>8} {:>8} {:>8}".format("workload", "lower", "IR", "LLVM", "library"))
    for name, modes in res["workloads"].items():
        t = modes["cold"]
        g = {k: t.get("cpu_" + k, 0.0) * 1e3 for k in ("lower", "ir", "llvm", "library")}
        print(f"{name:<18} {g['lower']:8.1f} {g['ir']:8.1f} {g['llvm']:8.1f} {g['library']:8.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
