"""``python tools/profile_long_chain.py [--n 1000,2000] [--variant tanh|two|reduce] [--profile PHASE]``

How the cost of a long elementwise chain and its gradient grows with its length, per phase
("a 10,000-op chain and its gradient build in seconds", in linear time and memory).

Each length runs in a fresh subprocess (no shared caches, a clean peak RSS).  Phases, in CPU
seconds of that process (and of the workers LLVM compiles in, :func:`.isolate.cpu_seconds`)
and its peak resident memory *during* the phase (the kernel's peak
counter is reset before each, ``/proc/self/clear_refs``):

* ``define``: the chain (``--variant``: ``tanh`` alternates ``sigmoid(P) + P/2`` and
  ``tanh(P) * 0.9``; ``two`` also reads the tensor two steps back; ``reduce`` subtracts a
  mean every 8th step) and a scalar loss reading it at two points;
* ``differentiate``: ``ta.gradient`` without the optimizer's time, ``optimize`` that time;
* ``lower``: ``ta.lower`` of the gradient;
* ``build``: ``ta.build`` of it with the disk cache off, split into ``llvm`` (IR emission and
  LLVM's passes) and ``jit``; ``build_rest`` is its lowering again plus the glue.

``--profile PHASE`` prints cProfile's top functions of that phase (by cumulative time).  Timing
lives here, never in the tests.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def chain(ta, n: int, variant: str):
    """``(X, L)``: ``n`` steps from ``X`` and a scalar reading the last at two points."""
    X = ta.placeholder((16,), "float64", name="X")
    prev, Y = X, X
    for k in range(n):
        prev, Y = Y, _step(ta, k, variant, Y, prev)
    return X, ta.compute((), lambda: Y[0] + Y[9], name="L")


def _step(ta, k: int, variant: str, P, Q):
    """Step ``k`` from the last tensor ``P`` (and the one before, ``Q``)."""
    if variant == "reduce" and k % 8 == 7:
        r = ta.reduce_axis((0, 16), name="r")
        m = ta.compute((), lambda: ta.sum(P[r], axis=r) * (1 / 16), name=f"m{k}")
        return ta.compute((16,), lambda i: P[i] - m(), name=f"c{k}")
    if k % 2:
        return ta.compute((16,), lambda i: ta.tanh(P[i]) * 0.9, name=f"t{k}")
    R = Q if variant == "two" else P
    return ta.compute((16,), lambda i: ta.sigmoid(P[i]) + R[i] * 0.5, name=f"s{k}")


def _peak_reset() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def one(n: int, variant: str, profile: str | None) -> dict:
    """Every phase for one length, in this process."""
    os.environ["TENSORAD_NO_DISK_CACHE"] = "1"
    sys.path.insert(0, str(ROOT))  # this checkout's tensorad
    from tensorad.codegen.jit.isolate import cpu_seconds  # CPU time, LLVM's compile workers included

    import tensorad as ta
    from tensorad.ir import trace

    trace.time = type("Clock", (), {"perf_counter": staticmethod(cpu_seconds)})
    cpu: dict = {}
    rss: dict = {}

    def phase(name, fn):
        _peak_reset()
        prof = cProfile.Profile() if profile == name else None
        with trace.collect() as stages:
            c0 = cpu_seconds()
            out = prof.runcall(fn) if prof else fn()
            cpu[name] = cpu_seconds() - c0
        rss[name] = _peak_mib()
        for stage, seconds, _ in stages:
            if stage in ("optimize", "llvm", "jit"):
                cpu[stage] = cpu.get(stage, 0.0) + seconds
        if prof:
            pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
        return out

    X, L = phase("define", lambda: chain(ta, n, variant))
    (g,) = phase("differentiate", lambda: ta.gradient(L, [X]))
    cpu["differentiate"] -= cpu.get("optimize", 0.0)
    low = phase("lower", lambda: ta.lower([g], [X]))
    phase("build", lambda: ta.build([g], [X]))
    cpu["build_rest"] = cpu.pop("build") - cpu.get("llvm", 0.0) - cpu.get("jit", 0.0)
    order = ["define", "differentiate", "optimize", "lower", "build_rest", "llvm", "jit"]
    return {"n": n, "variant": variant, "nests": low.text.count("# nest"),
            "cpu_s": {k: round(cpu[k], 2) for k in order if k in cpu},
            "total_cpu_s": round(sum(cpu.values()), 2), "peak_rss_mib": rss}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="1000,2000,4000,10000", help="comma-separated chain lengths")
    ap.add_argument("--variant", default="tanh", choices=("tanh", "two", "reduce"))
    ap.add_argument("--profile", default=None, choices=("define", "differentiate", "lower", "build"),
                    help="a phase to profile with cProfile (the optimizer's time is differentiate's)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # the subprocess
    args = ap.parse_args(argv)
    if args.one:
        sys.setrecursionlimit(10_000)
        print(json.dumps(one(int(args.n), args.variant, args.profile)), flush=True)
        return
    print(json.dumps({"cpu": "avx512" if "avx512f" in Path("/proc/cpuinfo").read_text() else "no avx512",
                      "loadavg": os.getloadavg()}), flush=True)
    for n in args.n.split(","):
        cmd = [sys.executable, __file__, "--one", "--n", n, "--variant", args.variant]
        if args.profile:
            cmd += ["--profile", args.profile]
        subprocess.run(cmd, cwd=ROOT, check=True)
    print(json.dumps({"loadavg": os.getloadavg()}), flush=True)


if __name__ == "__main__":
    main()
