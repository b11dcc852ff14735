"""``python -m benchmarks.cpu_ratios WORKLOADS [--peers torch,jax] [--target SPEC] [--rounds N]``

tensorad / fastest peer per workload and pass, in CPU time, at one thread: every system's forward and
backward phase (``sys_*.py``, the same phases ``make bench`` times) are prepared in this one process,
checked once against the float64 reference (``data.py``), then timed in rounds, one batch of calls of
each phase per round, interleaved, by the process's CPU time (``time.process_time``).  On a machine
other processes keep busy, a phase's wall time grows with the load and its CPU time much less; so
this prints what ``make bench`` cannot there: medians of interleaved CPU times, and their ratios;
``step`` rows add each system's forward and backward (a training step).

``WORKLOADS``: names of ``workloads.py`` (comma-separated), or a suite's name (``models``,
``layers``...).  ``--peers`` (default ``torch,jax``; ``torch-compile`` compiles each phase first,
minutes on a busy machine).  ``--target``: tensorad's CPU, as ``make bench --target``; the peers are
then held to its instruction set (``threads.run_again_with_peer_cap``).  ``--json PATH`` writes the
medians and ratios.  The peers share the process: with one thread their libraries' pools stay idle.
Timing lives here, never in the tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from .threads import apply_thread_limit, run_again_with_peer_cap

PHASES = ("forward", "backward")


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cpu_ratios")
    ap.add_argument("workloads", help="comma-separated workload or suite names")
    ap.add_argument("--peers", default="torch,jax")
    ap.add_argument("--target", default="", help="tensorad's target CPU (default: the host)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sample-s", type=float, default=0.05, help="CPU seconds of one batch of calls")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (the harness's smoke test)")
    ap.add_argument("--json", default="")
    return ap.parse_args(argv)


def _prepare(args, names: list[str], systems: dict) -> tuple[dict, list[str]]:
    """``{(workload, phase, system): (call, batch)}`` of the phases that ran and matched the reference,
    and a line per phase that did not."""
    from .check import RTOL, compare
    from .data import workload_data
    from .systems import Unavailable
    from .workloads import BY_NAME

    calls, notes = {}, []
    for name in names:
        w = BY_NAME[name]
        arrays, y_ref, head, g_ref = workload_data(w, args.tiny)
        for sysname, system in systems.items():
            for phase in PHASES:
                try:
                    ph = system.forward(w, arrays) if phase == "forward" else system.backward(w, arrays, head)
                    sync = ph.sync or (lambda r: r)
                    refs = [y_ref] if phase == "forward" else [g_ref[g] for g in w.grads]
                    check = compare(ph.outputs(sync(ph.fn())), refs, w.params.get("grad_rtol") or RTOL)
                except Unavailable as e:
                    notes.append(f"{name} {phase} {sysname}: unavailable: {e}")
                    continue
                except Exception as e:  # noqa: BLE001 - a system's failure is a line of the report
                    notes.append(f"{name} {phase} {sysname}: {type(e).__name__}: {str(e)[:200]}")
                    continue
                if not check["ok"]:
                    notes.append(f"{name} {phase} {sysname}: MISMATCH {check['detail']}")
                    continue
                call = (lambda f=ph.fn, s=sync: s(f()))
                t0 = time.process_time()
                call()
                once = max(time.process_time() - t0, 1e-6)
                calls[(name, phase, sysname)] = (call, max(1, int(args.sample_s / once)))
    return calls, notes


def main(argv: list[str] | None = None) -> dict:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.target:
        run_again_with_peer_cap(args.target, ["-m", "benchmarks.cpu_ratios", *(sys.argv[1:] if argv is None
                                                                               else argv)])
    apply_thread_limit(1, numpy_blas=False)
    from .systems import System, Unavailable
    from .workloads import SUITES, select

    wanted = args.workloads.split(",")
    suites = tuple(x for x in wanted if x in SUITES)
    names = [w.name for w in select(None, suites)] if suites else []
    names += [x for x in wanted if x not in SUITES]
    systems = {}
    for sysname in ["tensorad"] + [p for p in args.peers.split(",") if p]:
        try:
            system = System(sysname)
            system.setup(1, args.target)
            systems[sysname] = system
        except Unavailable as e:
            print(f"{sysname}: unavailable: {e}")
    calls, notes = _prepare(args, names, systems)
    times: dict = {key: [] for key in calls}
    for _ in range(args.rounds):
        for key, (call, batch) in calls.items():
            t0 = time.process_time()
            for _ in range(batch):
                call()
            times[key].append((time.process_time() - t0) / batch)
    out: dict = {"target": args.target or "host", "rows": {}}
    for name in names:
        for phase in PHASES:
            ms = {s: statistics.median(times[(name, phase, s)]) * 1e3 for s in systems
                  if (name, phase, s) in times}
            peers = {s: v for s, v in ms.items() if s != "tensorad"}
            best = min(peers, key=peers.__getitem__) if peers else None
            ratio = ms["tensorad"] / peers[best] if best and "tensorad" in ms else None
            out["rows"][f"{name}:{phase}"] = {"ms": ms, "fastest_peer": best, "ratio": ratio}
            cells = "  ".join(f"{s} {v:9.3f}" for s, v in ms.items())
            tail = f"   tensorad / {best}: {ratio:.3f}" if ratio is not None else ""
            print(f"{name:24s} {phase:8s}  {cells}{tail}")
    for name in names:  # a training step: the forward, then the backward
        steps = {s: out["rows"][f"{name}:forward"]["ms"][s] + out["rows"][f"{name}:backward"]["ms"][s]
                 for s in systems if all(s in out["rows"][f"{name}:{ph}"]["ms"] for ph in PHASES)}
        peers = {s: v for s, v in steps.items() if s != "tensorad"}
        best = min(peers, key=peers.__getitem__) if peers else None
        ratio = steps["tensorad"] / peers[best] if best and "tensorad" in steps else None
        out["rows"][f"{name}:step"] = {"ms": steps, "fastest_peer": best, "ratio": ratio}
        cells = "  ".join(f"{s} {v:9.3f}" for s, v in steps.items())
        print(f"{name:24s} {'step':8s}  {cells}" + (f"   tensorad / {best}: {ratio:.3f}" if ratio else ""))
    for line in notes:
        print(line)
    for phase in (*PHASES, "step"):
        rs = [r["ratio"] for k, r in out["rows"].items() if k.endswith(phase) and r["ratio"]]
        if rs:
            mean = statistics.geometric_mean(rs)
            print(f"{phase} geomean tensorad / fastest peer: {mean:.3f} over {len(rs)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
