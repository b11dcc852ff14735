"""``python -m benchmarks``: run every (thread count, system) worker, then report.

Workers run one after another (never two at once on a 2-core machine), each in a fresh
process with its thread limit (``threads.py``).  The run has a time budget: each worker gets a
share of what is left, weighted by how much it usually needs (tensorad builds kernels, JAX
compiles), skips what no longer fits and is killed at the end of the budget, keeping what it
measured.  Results: ``benchmarks/results/bench-<time>.json``, ``latest.json``, ``latest.png``
(or ``--json PATH`` and ``PATH`` with ``.png``), and the table on stdout.  That folder is not
tracked: the README's table and chart change only by ``make bench-readme`` (:mod:`.readme`),
which refuses a quick or busy run; the JSON records both (``flags``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from . import report, sweeps, workloads
from .machine import ForeignLoad, load_snapshot, machine_info
from .systems import PEERS, SYSTEMS, TENSORAD
from .threads import peer_cap, thread_env, with_peer_isa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# mode -> (target seconds per measurement, minimum runs, default threads, time budget s per suite)
MODES = {
    "full": (0.3, 5, "1,2", 560.0),
    "quick": (0.06, 3, "1", 90.0),
    "tiny": (0.003, 3, "1", 120.0),
}
# suite -> its share of the budget, in suites: the models suite's five whole models cost
# torch.compile about a minute of compiling on a cold cache, which one suite's quick budget lacks
SUITE_BUDGET = {"models": 2.0}
WEIGHT = {"tensorad": 3.0, "tensorad-hand": 1.5, "torch": 1.0, "torch-compile": 3.0, "jax": 1.5, "numpy": 1.0}


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="about one minute: 1 thread, short measurements")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (the harness's smoke test)")
    ap.add_argument("--workloads", default="",
                    help=f"comma-separated subset of {','.join(workloads.BY_NAME)}")
    ap.add_argument("--suite", default="seed,layers,models",
                    help="comma-separated suites: seed (the seed's table), layers (ResNet, Transformer and "
                         "classifier layers), models (whole models: a Transformer block, a small CNN, a "
                         "ResNet basic block, an MLP classifier, an LSTM); "
                         "default these three; norms (the layers' neighbours: other norms, widths, "
                         "heads, masks) and convs (convolution variants: depthwise, grouped, dilated, "
                         "transposed, ...) only when named")
    ap.add_argument("--target", default="",
                    help='the CPU tensorad compiles for, as ta.build\'s target (e.g. "llvm -mcpu=haswell", '
                         '"llvm -mattr=-avx512f"); default: the host')
    ap.add_argument("--peer-isa", choices=("match", "native"), default="match",
                    help="match (default): a --target narrower than the host holds the peers to its "
                         "instruction set where their libraries allow it (benchmarks/threads.py); "
                         "native: the peers use the whole host")
    ap.add_argument("--threads", default=None, help="comma-separated thread counts (default 1,2; quick: 1)")
    ap.add_argument("--systems", default="", help=f"comma-separated subset of {','.join(SYSTEMS)}")
    ap.add_argument("--no-peers", action="store_true", help="tensorad only (no torch, jax, numpy timings)")
    ap.add_argument("--no-sweeps", action="store_true", help="skip the GEMM and memory-bound sweeps")
    ap.add_argument("--json", default=None, metavar="PATH", help="write results here instead of results/")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--budget", type=float, default=None, help="seconds for the whole run")
    ap.add_argument("--target-s", type=float, default=None, help="seconds per measurement")
    ap.add_argument("--min-runs", type=int, default=None)
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                    help="before each worker wait up to S seconds (outside the budget) for other "
                         "processes to leave the CPUs idle")
    args = ap.parse_args(argv)
    args.mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    target, min_runs, threads, budget = MODES[args.mode]
    args.target_s = args.target_s or target
    args.min_runs = args.min_runs or min_runs
    args.thread_counts = [int(t) for t in (args.threads or threads).split(",") if t]
    systems = [s for s in args.systems.split(",") if s] or list(SYSTEMS)
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(SYSTEMS)}")
    if args.no_peers:
        systems = [s for s in systems if s in TENSORAD]
    args.system_list = systems
    suites = tuple(x for x in args.suite.split(",") if x)
    if not suites or set(suites) - set(workloads.SUITES):
        ap.error(f"unknown suite in {args.suite!r}; known: {', '.join(workloads.SUITES)}")
    try:
        args.chosen = workloads.select([n for n in args.workloads.split(",") if n], suites)
    except ValueError as e:
        ap.error(str(e))
    args.budget = args.budget or budget * max(1.0, sum(SUITE_BUDGET.get(x, 1.0) for x in
                                                       {w.suite for w in args.chosen}))
    args.peer_cap = peer_cap(args.target) if args.peer_isa == "match" else {}
    return args


def run_worker(args, system: str, threads: int, deadline: float, hard_s: float, tmp: str) -> dict:
    out = os.path.join(tmp, f"{system}-{threads}.json")
    cmd = [sys.executable, "-m", "benchmarks.worker", "--system", system, "--threads", str(threads),
           "--mode", args.mode, "--workloads", ",".join(w.name for w in args.chosen),
           "--target-s", str(args.target_s), "--min-runs", str(args.min_runs),
           "--deadline", f"{deadline:.3f}", "--out", out, "--cache", tmp]
    cmd += ["--no-sweeps"] if args.no_sweeps else []
    cmd += ["--target", args.target] if args.target else []
    env = with_peer_isa(thread_env(threads), args.peer_cap)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), ROOT) if p)
    status = None
    foreign = ForeignLoad()
    try:
        rc = subprocess.run(cmd, env=env, cwd=ROOT, timeout=max(hard_s, 5)).returncode
        if rc:
            status = f"worker failed (exit code {rc})"
    except subprocess.TimeoutExpired:
        status = f"worker killed at the time budget ({hard_s:.0f} s)"
        sys.stderr.write(f"\n{status}: threads={threads} {system}\n")
    try:
        with open(out) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {"system": system, "threads": threads, "workloads": {}, "sweeps": {}, "status": "ok"}
    res["foreign_cpus"] = foreign.stop()
    if status and res.get("status") == "ok":
        res["status"] = "ok" if res["workloads"] else status
        res["note"] = status
    return res


def prepare_references(args, tmp: str) -> str:
    """Make every workload's data and float64 reference once, in a process of its own (the
    layers' reference is PyTorch's autograd: it must not load into a worker that measures
    another system).  Without PyTorch, the layers are dropped with a note."""
    cmd = [sys.executable, "-m", "benchmarks.data", "--cache", tmp, "--workloads",
           ",".join(w.name for w in args.chosen)] + (["--tiny"] if args.mode == "tiny" else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), ROOT) if p))
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        sys.stderr.write(out.stderr[-2000:])
        raise SystemExit("could not compute the references")
    dropped = [n for n in out.stdout.split() if n]
    if dropped:
        sys.stderr.write(f"PyTorch is not installed: no reference for {', '.join(dropped)}; skipped\n")
        args.chosen = [w for w in args.chosen if w.name not in dropped]
    return "dropped (no PyTorch): " + ", ".join(dropped) if dropped else "ok"


def wait_quiet(max_s: float) -> float:
    """Wait until other processes use under 0.1 CPU over half a second, at most ``max_s``."""
    start = time.perf_counter()
    while time.perf_counter() - start < max_s:
        probe = ForeignLoad()
        time.sleep(0.5)
        if (probe.stop() or 0.0) < report.BUSY_CPUS:
            break
    return round(time.perf_counter() - start, 1)


def run(args) -> dict:
    started = time.time()
    end = started + args.budget
    results = {
        "schema": 1, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "options": {"mode": args.mode, "threads": args.thread_counts, "systems": args.system_list,
                    "workloads": [w.name for w in args.chosen], "target_s": args.target_s,
                    "min_runs": args.min_runs, "budget_s": args.budget, "sweeps": not args.no_sweeps,
                    "wait_quiet_s": args.wait_quiet, "target": args.target or "host",
                    "peer_isa": args.peer_cap},
        "machine": machine_info(), "load": {"start": load_snapshot()},
        "workloads": [{"name": w.name, "title": w.title, "kind": w.kind, "grads": list(w.grads),
                       "suite": w.suite,
                       "describe": w.describe(args.mode == "tiny"), "seed_ms": list(w.seed_ms),
                       "shapes": {k: list(s) for k, s in w.input_shapes(args.mode == "tiny").items()}}
                      for w in args.chosen],
        "sweep_tasks": [] if args.no_sweeps else [
            {"name": t.name, "task": t.task, "kind": t.kind, "probe": t.probe,
             "shapes": {k: list(s) for k, s in t.shapes.items()},
             "work": t.flops if t.kind == "gemm" else t.bytes} for t in sweeps.sweep_tasks(args.mode)],
        "runs": [],
    }
    jobs = [(n, s) for n in args.thread_counts for s in args.system_list]
    with tempfile.TemporaryDirectory(prefix="tensorad-bench-") as tmp:
        results["references"] = prepare_references(args, tmp)
        kept = {w.name for w in args.chosen}
        results["workloads"] = [w for w in results["workloads"] if w["name"] in kept]
        results["options"]["workloads"] = [n for n in results["options"]["workloads"] if n in kept]
        for i, (n, s) in enumerate(jobs):
            if not results["runs"] or results["runs"][-1]["threads"] != n:
                results["runs"].append({"threads": n, "systems": {}})
            waited = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else 0.0
            end += waited
            left = end - time.time()
            weights = sum(WEIGHT.get(x, 1.0) for _, x in jobs[i:])
            share = left * WEIGHT.get(s, 1.0) / weights
            deadline = time.time() + share
            results["runs"][-1]["systems"][s] = run_worker(args, s, n, deadline, left, tmp)
            results["runs"][-1]["systems"][s]["waited_quiet_s"] = waited
    results["load"]["end"] = load_snapshot()
    results["elapsed_s"] = round(time.time() - started, 1)
    return results


def save(results: dict, args) -> list[str]:
    results["flags"] = {"quick": results["options"]["mode"] != "full",
                        "busy": report.run_is_busy(results)}
    if args.json:
        paths = [args.json]
    else:
        os.makedirs(report.RESULTS_DIR, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        paths = [os.path.join(report.RESULTS_DIR, f"bench-{stamp}.json"), report.LATEST_JSON]
    for p in paths:
        os.makedirs(os.path.dirname(os.path.abspath(p)), exist_ok=True)
        with open(p, "w") as f:
            json.dump(results, f, indent=1, default=str)
    written = list(paths)
    if not args.no_plot:
        from .plot import plot

        png = os.path.splitext(paths[-1])[0] + ".png"
        if plot(results, png):
            written.append(png)
        else:
            sys.stderr.write("matplotlib is not installed: no chart\n")
    return written


def main(argv=None) -> int:
    args = parse(argv)
    peers = [s for s in args.system_list if s in PEERS]
    sys.stderr.write(f"tensorad benchmarks: mode {args.mode}, threads {args.thread_counts}, "
                     f"systems {', '.join(args.system_list)}{'' if peers else ' (no peers)'}, "
                     f"budget {args.budget:.0f} s\n")
    results = run(args)
    print(report.text_table(results))
    for p in save(results, args):
        print(f"wrote {os.path.relpath(p)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
