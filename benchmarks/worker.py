"""One worker process: one system at one thread count (``python -m benchmarks.worker``).

The thread limit is applied first, before NumPy or any framework is imported (see
``threads.py``); then, for every workload, the forward and backward phases are prepared,
checked once against the float64 NumPy reference, and timed.  The result JSON is rewritten
after every item, so that a worker killed at the time limit still leaves what it measured.
Nothing a system does wrong stops the worker: it is recorded as that entry's status.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

from .threads import apply_thread_limit

# Entry statuses.
OK, MISMATCH, UNAVAILABLE, ERROR, SKIPPED = "ok", "mismatch", "unavailable", "error", "skipped"


def _parse(argv):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.worker")
    ap.add_argument("--system", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--mode", choices=("full", "quick", "tiny"), default="full")
    ap.add_argument("--workloads", default="")
    ap.add_argument("--no-sweeps", action="store_true")
    ap.add_argument("--target-s", type=float, default=0.3)
    ap.add_argument("--min-runs", type=int, default=5)
    ap.add_argument("--deadline", type=float, default=0.0, help="epoch seconds; 0: none")
    ap.add_argument("--out", required=True)
    ap.add_argument("--target", default="", help="tensorad's target CPU (ta.build target=); default host")
    ap.add_argument("--cache", default="", help="directory shared by the run's workers (data.py)")
    return ap.parse_args(argv)


class Worker:
    def __init__(self, args, cpus: list[int]) -> None:
        from .machine import load_snapshot

        self.args = args
        self.tiny = args.mode == "tiny"
        self.result = {"system": args.system, "threads": args.threads, "cpus": cpus, "status": OK,
                       "mode": args.mode, "load_before": load_snapshot(), "workloads": {}, "sweeps": {}}
        self.start = time.perf_counter()

    # -- bookkeeping -------------------------------------------------------------------------
    def save(self) -> None:
        self.result["elapsed_s"] = round(time.perf_counter() - self.start, 3)
        tmp = self.args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.result, f, indent=1, default=str)
        os.replace(tmp, self.args.out)

    def remaining(self) -> float:
        return self.args.deadline - time.time() if self.args.deadline else float("inf")

    # -- one phase ---------------------------------------------------------------------------
    def phase(self, make, refs, label: str, rtol: float | None = None) -> dict:
        """Prepare, check once (within ``rtol``, default ``check.RTOL``), then time one phase;
        every failure becomes the entry's status."""
        from .check import RTOL, compare
        from .systems import Unavailable
        from .timing import measure

        if self.remaining() <= 0:
            return {"status": SKIPPED, "reason": "time budget spent"}
        try:
            ph = make()
        except Unavailable as e:
            return {"status": UNAVAILABLE, "reason": str(e)}
        except Exception as e:  # noqa: BLE001 - a system's bug is a result, not a crash
            traceback.print_exc(limit=4, file=sys.stderr)
            return {"status": ERROR, "reason": f"preparing: {type(e).__name__}: {e}"[:400]}
        entry = {"prep_s": {k: round(v, 4) for k, v in ph.prep_s.items()}, **ph.info}
        sync = ph.sync or (lambda r: r)
        try:
            t0 = time.perf_counter()
            r = sync(ph.fn())
            first = time.perf_counter() - t0
            entry["check"] = compare(ph.outputs(r), refs, rtol or RTOL)
            del r
        except Exception as e:  # noqa: BLE001
            traceback.print_exc(limit=4, file=sys.stderr)
            return {**entry, "status": ERROR, "reason": f"running: {type(e).__name__}: {e}"[:400]}
        entry["first_call_s"] = round(first, 4)
        if not entry["check"]["ok"]:
            sys.stderr.write(f"\n!!! MISMATCH {self.args.system} {label}: {entry['check']['detail']}\n")
        if first * (self.args.min_runs + 1) > self.remaining():
            return {**entry, "status": SKIPPED,
                    "reason": f"one call takes {first:.1f} s: no time left to time it"}
        timing = measure(ph.fn, self.args.target_s, self.args.min_runs,
                         warmup=0 if first > 0.2 else 1, sync=ph.sync, estimate_s=first)
        entry["timing"] = timing.to_json()
        entry["status"] = OK if entry["check"]["ok"] else MISMATCH
        return entry

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> None:
        import gc

        from . import sweeps, workloads
        from .data import workload_data
        from .machine import load_snapshot
        from .progress import Progress
        from .systems import SWEEP_SYSTEMS, System, Unavailable

        args = self.args
        chosen = workloads.select([n for n in args.workloads.split(",") if n])
        tasks = [] if args.no_sweeps or args.system not in SWEEP_SYSTEMS else sweeps.sweep_tasks(args.mode)
        if args.system.startswith("tensorad"):
            tasks = [t for t in tasks if not t.probe]
        try:
            system = System(args.system)
            self.result["setup"] = system.setup(args.threads, args.target)
        except Unavailable as e:
            self.result["status"] = str(e) if str(e).startswith("not installed") else f"unavailable: {e}"
            self.result["load_after"] = load_snapshot()
            self.save()
            return
        bar = Progress(2 * len(chosen) + len(tasks), f"threads={args.threads} {args.system:<13}")
        for w in chosen:
            arrays, y_ref, head, g_ref = workload_data(w, self.tiny, args.cache or None)
            entry = {}
            bar.step(f"{w.name} forward")
            entry["forward"] = self.phase(lambda w=w, a=arrays: system.forward(w, a), [y_ref],
                                          f"{w.name} forward")
            gc.collect()
            bar.step(f"{w.name} backward")
            entry["backward"] = self.phase(lambda w=w, a=arrays, h=head: system.backward(w, a, h),
                                           [g_ref[g] for g in w.grads], f"{w.name} backward",
                                           w.params.get("grad_rtol"))
            self.result["workloads"][w.name] = entry
            del arrays, y_ref, head, g_ref
            gc.collect()
            self.save()
        for t in tasks:
            bar.step(t.name)
            a = sweeps.sweep_inputs(t)
            e = self.phase(lambda t=t, a=a: system.sweep(t.task, a), sweeps.sweep_reference(t, a), t.name)
            if "timing" in e:
                e["rate"] = sweeps.rate(t, e["timing"]["median_ms"])
            self.result["sweeps"][t.name] = e
            del a
            gc.collect()
            self.save()
        bar.close()
        self.result["load_after"] = load_snapshot()
        self.save()


def main(argv=None) -> int:
    args = _parse(argv)
    cpus = apply_thread_limit(args.threads, numpy_blas=args.system == "numpy")  # before NumPy's import
    worker = Worker(args, cpus)
    try:
        worker.run()
    except Exception as e:  # noqa: BLE001 - keep what was measured
        traceback.print_exc(file=sys.stderr)
        worker.result["status"] = f"error: {type(e).__name__}: {e}"[:400]
        worker.save()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
