"""CPU seconds that tensorad takes to define, differentiate and optimize each benchmark workload
(every suite), each in a fresh process (cold: no in-process memo), the LLVM build excluded --
the figure of issue 10's bar (<= 0.3 s per layer).

Run from a tree's root: ``PYTHONPATH=. python tools/difftime.py [--repeat N] [--against ROOT]
[--profile NAME] [NAME ...]``.  Prints one line per workload (median CPU-s of ``--repeat``
processes, then the runs) and the machine's load before and after.  ``--against ROOT`` also
times another tree (a checkout of main), its processes alternating with this tree's, and prints
its median first (``before -> after``): on a shared machine only interleaved figures compare.
``--profile NAME`` instead prints a cProfile of that workload's differentiation, sorted by
``--sort`` (default ``tottime``).  To check that an optimizer speed-up leaves the programs
unchanged, use ``tools/dump_gradients.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import sys, time
import tensorad as ta
from benchmarks import sys_tensorad, workloads
w = workloads.BY_NAME[sys.argv[1]]
c1 = time.process_time()
ints = w.params.get("ints", {})
p = {k: ta.placeholder(s, "int32" if k in ints else "float32", k) for k, s in w.shapes.items()}
Y = sys_tensorad.topi_forward(w.kind, p, w.params)
H = ta.placeholder(Y.shape, "float32", "H")
run = lambda: list(ta.JacobianRecursive(Y, [p[g] for g in w.grads], H))
if len(sys.argv) > 2:
    import cProfile, pstats
    prof = cProfile.Profile()
    prof.runcall(run)
    pstats.Stats(prof).sort_stats(sys.argv[2]).print_stats(45)
else:
    run()
print(f"{time.process_time() - c1:.4f}")
"""


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds(name: str, profile_sort: str | None = None, root: str = ROOT) -> tuple[float, str]:
    """One fresh process's CPU seconds of define + differentiate + optimize in the tree at
    ``root``, and its stdout."""
    env = dict(os.environ, PYTHONPATH=root)
    args = [sys.executable, "-c", _CHILD, name] + ([profile_sort] if profile_sort else [])
    out = subprocess.run(args, env=env, cwd=root, capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise RuntimeError(f"{name}: {out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1]), out.stdout


def main(argv: list[str]) -> None:
    sys.path.insert(0, ROOT)
    from benchmarks import workloads

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--against", metavar="ROOT")
    ap.add_argument("--profile", metavar="NAME")
    ap.add_argument("--sort", default="tottime")
    a = ap.parse_args(argv)
    if a.profile:
        print(cpu_seconds(a.profile, a.sort)[1])
        return
    print("load before:", os.getloadavg())
    for w in workloads.select(a.names, workloads.SUITES):
        runs, other = [], []
        for _ in range(a.repeat):
            if a.against:
                other.append(cpu_seconds(w.name, root=a.against)[0])
            runs.append(cpu_seconds(w.name)[0])
        before = f"{statistics.median(other):7.3f} -> " if other else ""
        print(f"{w.name:24s} {w.suite:7s} {before}{statistics.median(runs):7.3f}  "
              + " ".join(f"{r:.3f}" for r in runs), flush=True)
    print("load after:", os.getloadavg())


if __name__ == "__main__":
    main(sys.argv[1:])
