"""CPU seconds that tensorad takes to define, differentiate and optimize each benchmark workload
(every suite), each in a fresh process (cold: no in-process memo), the LLVM build excluded --
the figure of the bar of at most 0.3 s per layer.

Run from a tree's root: ``PYTHONPATH=. python tools/difftime.py [--repeat N] [--against ROOT]
[--profile NAME] [NAME ...]``.  Prints one line per workload (median CPU-s of ``--repeat``
processes, then the runs) and the machine's load before and after.  ``--against ROOT`` also
times another tree (a checkout of main), its processes alternating with this tree's, and prints
its median first (``before -> after``): on a shared machine only interleaved figures compare.
``--profile NAME`` instead prints a cProfile of that workload's differentiation, sorted by
``--sort`` (default ``tottime``).  ``--probe`` times the layers of ``tools/probe_unseen.py``
instead, ``--programs`` the larger models of ``tools/user_programs.py`` (``NAME``s filter
them).  To check that an optimizer speed-up leaves the programs unchanged, use
``tools/dump_gradients.py``.
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
kind, name = sys.argv[1].split(":", 1)
if kind == "bench":
    from benchmarks import sys_tensorad, workloads
    w = workloads.BY_NAME[name]
else:  # (this tree's tools: the layers are only defined, with the tensorad on PYTHONPATH)
    sys.path.insert(0, sys.argv[2])
    if kind == "probe":
        import probe_unseen as pu
        half = pu.HALF[name][1] if name in pu.HALF else "float32"
        case = pu.CASES[name] if name in pu.CASES else pu.HALF[name][:1] + pu.HALF[name][2:]
    else:
        import user_programs
c1 = time.process_time()
if kind == "bench":
    ints = w.params.get("ints", {})
    p = {k: ta.placeholder(s, "int32" if k in ints else "float32", k) for k, s in w.shapes.items()}
    Y, wrt = sys_tensorad.topi_forward(w.kind, p, w.params), [p[g] for g in w.grads]
elif kind == "probe":
    _, shapes, grads, ta_fn, _ = case
    p = {k: ta.placeholder(s, "int32" if isinstance(spec, tuple) else half, k)
         for k, (s, spec) in shapes.items()}
    Y, wrt = ta_fn(**p), [p[g] for g in grads]
else:
    Y, wrt = user_programs.PROGRAMS[name]()
H = ta.placeholder(Y.shape, "float32", "H")
run = lambda: list(ta.JacobianRecursive(Y, wrt, H))
if len(sys.argv) > 3:
    import cProfile, pstats
    prof = cProfile.Profile()
    prof.runcall(run)
    pstats.Stats(prof).sort_stats(sys.argv[3]).print_stats(45)
else:
    run()
print(f"{time.process_time() - c1:.4f}")
"""


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.dirname(os.path.abspath(__file__))


def cpu_seconds(source: str, profile_sort: str | None = None, root: str = ROOT) -> tuple[float, str]:
    """One fresh process's CPU seconds of define + differentiate + optimize in the tree at
    ``root``, and its stdout.  ``source``: ``bench:NAME`` (a workload), ``probe:NAME`` (a case
    of ``tools/probe_unseen.py``) or ``program:NAME`` (``tools/user_programs.py``), the cases
    always this tree's."""
    env = dict(os.environ, PYTHONPATH=root)
    args = [sys.executable, "-c", _CHILD, source, TOOLS] + ([profile_sort] if profile_sort else [])
    out = subprocess.run(args, env=env, cwd=root, capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise RuntimeError(f"{source}: {out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1]), out.stdout


def _sources(a: argparse.Namespace) -> list[tuple[str, str]]:
    """``(source, suite)`` of each case asked for: the workloads, or with ``--probe`` /
    ``--programs`` those cases (``names`` filters them; none: all)."""
    if a.probe or a.programs:
        sys.path.insert(0, TOOLS)
        if a.probe:
            import probe_unseen as pu
            names, kind = list(pu.CASES) + list(pu.HALF), "probe"
        else:
            import user_programs
            names, kind = list(user_programs.PROGRAMS), "program"
        return [(f"{kind}:{n}", kind) for n in names if not a.names or n in a.names]
    from benchmarks import workloads

    return [(f"bench:{w.name}", w.suite) for w in workloads.select(a.names, workloads.SUITES)]


def main(argv: list[str]) -> None:
    sys.path.insert(0, ROOT)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--against", metavar="ROOT")
    ap.add_argument("--profile", metavar="NAME")
    ap.add_argument("--sort", default="tottime")
    ap.add_argument("--probe", action="store_true", help="the layers of tools/probe_unseen.py")
    ap.add_argument("--programs", action="store_true", help="the models of tools/user_programs.py")
    a = ap.parse_args(argv)
    if a.profile:
        a.names = [a.profile]
        print(cpu_seconds(_sources(a)[0][0], a.sort)[1])
        return
    print("load before:", os.getloadavg())
    for source, suite in _sources(a):
        runs, other = [], []
        for _ in range(a.repeat):
            if a.against:
                other.append(cpu_seconds(source, root=a.against)[0])
            runs.append(cpu_seconds(source)[0])
        before = f"{statistics.median(other):7.3f} -> " if other else ""
        print(f"{source.split(':', 1)[1]:24s} {suite:7s} {before}{statistics.median(runs):7.3f}  "
              + " ".join(f"{r:.3f}" for r in runs), flush=True)
    print("load after:", os.getloadavg())


if __name__ == "__main__":
    main(sys.argv[1:])
