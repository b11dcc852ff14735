"""Reading a results JSON: the fixed-width stdout table and the README's markdown table.

``python -m benchmarks.report [PATH]`` prints the markdown of ``results/latest.json`` (or PATH).
Ratios are tensorad's median over the fastest peer's (below 1: tensorad is faster); only
entries whose check against the float64 reference passed count as the fastest peer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from .machine import describe_load
from .systems import PEERS

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
LATEST_JSON = os.path.join(RESULTS_DIR, "latest.json")
SYSTEM_ORDER = ("tensorad", "tensorad-hand", "torch", "torch-compile", "jax", "numpy")
WORST_ALLOWED = 1.5   # the bar: no layer worse than this against the fastest peer


def load(path: str = LATEST_JSON) -> dict:
    with open(path) as f:
        return json.load(f)


# ---- accessors ----------------------------------------------------------------------------


def systems_of(run: dict) -> list[str]:
    return [s for s in SYSTEM_ORDER if s in run["systems"]] + \
        sorted(s for s in run["systems"] if s not in SYSTEM_ORDER)


def entry(run: dict, system: str, workload: str, phase: str) -> dict | None:
    res = run["systems"].get(system) or {}
    return (res.get("workloads", {}).get(workload) or {}).get(phase)


def median(e: dict | None) -> float | None:
    """The median in ms of an entry that was timed (mismatching ones included)."""
    return e["timing"]["median_ms"] if e and "timing" in e else None


def fastest_peer(run: dict, workload: str, phase: str) -> tuple[str, float] | None:
    best = None
    for s in PEERS:
        e = entry(run, s, workload, phase)
        if e and e.get("status") == "ok" and "timing" in e:
            m = e["timing"]["median_ms"]
            if best is None or m < best[1]:
                best = (s, m)
    return best


def ratios(run: dict, workloads: list[dict], phase: str) -> dict[str, float]:
    """tensorad (autodiff) / fastest correct peer per workload, where both were timed."""
    out = {}
    for w in workloads:
        m, bp = median(entry(run, "tensorad", w["name"], phase)), fastest_peer(run, w["name"], phase)
        if m and bp:
            out[w["name"]] = m / bp[1]
    return out


def summary_lines(results: dict, run: dict) -> list[str]:
    """Per suite: the geometric mean of tensorad / fastest peer and the workloads worse than
    ``WORST_ALLOWED``, forward and backward."""
    lines = []
    for suite in sorted({w.get("suite", "seed") for w in results["workloads"]}):
        ws = [w for w in results["workloads"] if w.get("suite", "seed") == suite]
        parts = []
        for phase in ("forward", "backward"):
            r = ratios(run, ws, phase)
            if not r:
                continue
            geo = math.exp(sum(math.log(x) for x in r.values()) / len(r))
            worst = sorted((n for n, x in r.items() if x > WORST_ALLOWED), key=lambda n: -r[n])
            behind = "; behind >1.5x: " + ", ".join(f"{n} {r[n]:.2f}x" for n in worst) if worst else ""
            parts.append(f"{phase} geomean {geo:.2f}x over {len(r)}{behind}")
        if parts:
            lines.append(f"  suite {suite}: tensorad / fastest peer: " + " | ".join(parts))
    return lines


def system_status(run: dict, system: str) -> str:
    res = run["systems"].get(system) or {}
    return res.get("status", "missing")


def why(run: dict, system: str, e: dict | None) -> str:
    """A short reason for an entry without a timing (or with a failed check)."""
    st = system_status(run, system)
    if st != "ok":
        return st
    if e is None:
        return "not run"
    if e.get("status") == "mismatch":
        return f"MISMATCH {e['check']['detail']}"
    if "timing" in e:
        return ""
    return f"{e.get('status')}: {e.get('reason', '')}"


def fmt_ms(m: float | None) -> str:
    if m is None:
        return "-"
    if m >= 100:
        return f"{m:.0f}"
    if m >= 1:
        return f"{m:.2f}"
    return f"{m:.3f}"


def fmt_seed(m: float) -> str:
    """The seed printed whole milliseconds (``int(1000 * seconds)``): 0 means below 1 ms."""
    return "<1" if m == 0 else f"{m:.0f}"


def fmt_ratio(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x" if x < 100 else f"{x:.0f}x"


# ---- fixed-width table ----------------------------------------------------------------------


def _prep(e: dict | None) -> str:
    if not e or not e.get("prep_s"):
        return ""
    return f"{sum(e['prep_s'].values()):.2f}"


def workload_block(results: dict, run: dict, w: dict) -> list[str]:
    name = w["name"]
    lines = [f"{name}: {w['title']}  [{w['describe']}]"]
    hdr = (f"  {'system':<14}{'fwd ms':>10}{'IQR':>8}{'bwd ms':>10}{'IQR':>8}{'bwd/fwd':>9}"
           f"  {'fwd/peer':<13}{'bwd/peer':<13}{'prep s':>11}  note")
    lines.append(hdr)
    best = {ph: fastest_peer(run, name, ph) for ph in ("forward", "backward")}
    for s in systems_of(run):
        cols = []
        f, b = entry(run, s, name, "forward"), entry(run, s, name, "backward")
        for e in (f, b):
            m = median(e)
            cols += [fmt_ms(m), fmt_ms(e["timing"]["iqr_ms"]) if m is not None else ""]
        mf, mb = median(f), median(b)
        ratio = fmt_ratio(mb / mf) if mf and mb else "-"
        vs = []
        for ph, m in (("forward", mf), ("backward", mb)):
            bp = best[ph]
            vs.append(f"{fmt_ratio(m / bp[1])} {bp[0]}" if s not in PEERS and m and bp else "")
        nf, nb = why(run, s, f), why(run, s, b)
        note = nf if nf == nb else "; ".join(f"{ph} {n}" for ph, n in (("fwd", nf), ("bwd", nb)) if n)
        if not note and f and b and "work" in f and "work" in b:
            note = f"work {f['work']:.2e} / {b['work']:.2e}"
        prep = "/".join(x for x in (_prep(f), _prep(b)) if x)
        lines.append(f"  {s:<14}{cols[0]:>10}{cols[1]:>8}{cols[2]:>10}{cols[3]:>8}{ratio:>9}"
                     f"  {vs[0]:<13}{vs[1]:<13}{prep:>11}  {note[:90]}")
    sf, sb = w["seed_ms"]
    if not (sf or sb):
        return lines
    lines.append(f"  {'seed 2018':<14}{fmt_seed(sf):>10}{'':>8}{fmt_seed(sb):>10}{'':>8}"
                 f"{fmt_ratio(sb / sf) if sf else '-':>9}  {'':<26}{'':>11}  TVM, seed 003 (reference only)")
    return lines


def sweep_block(run: dict, kind: str, tasks: list[dict]) -> list[str]:
    rows = [t for t in tasks if t["kind"] == kind]
    if not rows:
        return []
    unit = "GFLOP/s" if kind == "gemm" else "GB/s"
    peak = sweep_peak(run, kind, tasks)
    systems = [s for s in systems_of(run) if any(
        (run["systems"][s].get("sweeps") or {}).get(t["name"]) for t in rows)]
    if not systems:
        return []
    title = "GEMM float32 C[M,N] = A[M,K] B[K,N], MxNxK" if kind == "gemm" else \
        "memory-bound (bytes = inputs read once + outputs written once)"
    ref = f"measured peak = best peer {peak[1]:.1f} {unit} ({peak[0]})" if peak else "no peak measured"
    lines = [f"{title}; {unit}, % of {ref}", f"  {'row':<24}" + "".join(f"{s:>18}" for s in systems)]
    for t in rows:
        cells = []
        for s in systems:
            e = (run["systems"][s].get("sweeps") or {}).get(t["name"])
            if not e or (e.get("reason") or "").startswith("no sweep task"):
                cells.append("")
            elif e.get("status") == "mismatch":
                cells.append("MISMATCH")
            elif "rate" in e:
                pct = f" ({100 * e['rate'] / peak[1]:.0f}%)" if peak else ""
                cells.append(f"{e['rate']:.1f}{pct}")
            else:
                cells.append(e.get("status", "-"))
        label = t["name"] + (" *" if t["probe"] else "")
        lines.append(f"  {label:<24}" + "".join(f"{c:>18}" for c in cells))
    return lines


def sweep_peak(run: dict, kind: str, tasks: list[dict]) -> tuple[str, float] | None:
    """The best rate any peer reached on a sweep kind (probes included): the reference."""
    best = None
    for t in tasks:
        if t["kind"] != kind:
            continue
        for s in PEERS:
            e = ((run["systems"].get(s) or {}).get("sweeps") or {}).get(t["name"])
            if e and e.get("status") == "ok" and "rate" in e and (best is None or e["rate"] > best[1]):
                best = (f"{s} {t['name']}", e["rate"])
    return best


# Other processes kept this many CPUs busy on average while a worker ran: its figures are noisy
# (on 2 cores a 2-thread parallel region then waits for a time slice, 4-8 ms, at every barrier).
BUSY_CPUS = 0.1


def busy(res: dict) -> bool:
    return (res.get("foreign_cpus") or 0.0) > BUSY_CPUS


def run_is_busy(results: dict) -> bool:
    """Did other processes keep the machine busy while any system ran?"""
    return any(busy(res) for run in results.get("runs", []) for res in run["systems"].values())


def load_lines(run: dict) -> list[str]:
    out = []
    for s in systems_of(run):
        res = run["systems"][s]
        if "load_before" in res:
            fc = res.get("foreign_cpus")
            other = f"others used {fc:.2f} CPUs; " if fc is not None else ""
            flag = "  << BUSY: figures are noisy" if busy(res) else ""
            out.append(f"  {s:<14} {other}before: {describe_load(res.get('load_before'))}; "
                       f"after: {describe_load(res.get('load_after'))}{flag}")
    return out


def peer_note(results: dict) -> str:
    """Which instruction set the peers were held to (``--peer-isa match``), if any."""
    cap = results["options"].get("peer_isa") or {}
    return f" (peers held to {cap['ONEDNN_MAX_CPU_ISA']}; JAX's products keep the host's)" if cap else ""


def text_table(results: dict) -> str:
    m = results["machine"]
    v = {k: x for k, x in m["versions"].items() if x}
    lines = [f"tensorad benchmarks  {results['started']}  mode={results['options']['mode']}  "
             f"tensorad target={results['options'].get('target', 'host')}{peer_note(results)}  "
             f"elapsed {results.get('elapsed_s', 0):.0f} s",
             f"machine: {m['cpu']} ({m['logical_cpus']} logical CPUs, {m.get('memory_gib', '?')} GiB, "
             f"{' '.join(m['simd'])}); " + ", ".join(f"{k} {x}" for k, x in v.items()),
             f"load at start: {describe_load(results['load']['start'])}; "
             f"at end: {describe_load(results['load']['end'])}",
             "times: median of repeated runs after warm-up, IQR = interquartile range; "
             "x/peer = tensorad / fastest correct peer (< 1: tensorad faster); "
             "prep s = autodiff or definition + build (JAX: jit) seconds, forward/backward; "
             "work = innermost loop-body executions of the kernel, forward / backward"]
    for run in results["runs"]:
        lines += ["", f"===== {run['threads']} thread(s) " + "=" * 60,
                  "load per worker (CPUs kept busy by other processes while it ran; loadavg 1/5/15 min "
                  "and busy % per CPU before and after):"] + load_lines(run)
        lines += [""] + summary_lines(results, run)
        for w in results["workloads"]:
            lines += [""] + workload_block(results, run, w)
        for kind in ("gemm", "memory"):
            block = sweep_block(run, kind, results.get("sweep_tasks", []))
            if block:
                lines += [""] + block
        if any(t["probe"] for t in results.get("sweep_tasks", [])):
            lines.append("  (* a probe that measures the peak; tensorad does not run it)")
    return "\n".join(lines)


# ---- markdown ---------------------------------------------------------------------------------


def markdown(results: dict) -> str:
    out = [f"Measured {results['started']} on {results['machine']['cpu']} "
           f"({results['machine']['logical_cpus']} CPUs, {' '.join(results['machine']['simd'])}), "
           f"tensorad target `{results['options'].get('target', 'host')}`{peer_note(results)}, "
           f"mode `{results['options']['mode']}`. "
           "Milliseconds, median of repeated runs, forward / backward; "
           "x peer = tensorad (autodiff) / fastest peer."]
    for run in results["runs"]:
        systems = systems_of(run)
        out += ["", f"**{run['threads']} thread(s)**", "",
                "| workload | " + " | ".join(systems) + " | tensorad x peer | seed 2018 |",
                "| --- | " + " | ".join("---:" for _ in systems) + " | ---: | ---: |"]
        for w in results["workloads"]:
            cells = []
            for s in systems:
                f, b = (entry(run, s, w["name"], ph) for ph in ("forward", "backward"))
                mark = " (!)" if any(e and e.get("status") == "mismatch" for e in (f, b)) else ""
                cells.append(f"{fmt_ms(median(f))} / {fmt_ms(median(b))}{mark}")
            ratios = []
            for ph in ("forward", "backward"):
                m, bp = median(entry(run, "tensorad", w["name"], ph)), fastest_peer(run, w["name"], ph)
                ratios.append(fmt_ratio(m / bp[1]) if m and bp else "-")
            sf, sb = w["seed_ms"]
            out.append(f"| {w['name']} | " + " | ".join(cells) + f" | {ratios[0]} / {ratios[1]} | "
                       f"{fmt_seed(sf)} / {fmt_seed(sb)} |")
        out += [""] + [line.strip() for line in summary_lines(results, run)]
        noisy = [f"{s} ({run['systems'][s]['foreign_cpus']:.2f} CPUs)" for s in systems
                 if busy(run["systems"][s])]
        if noisy:
            out += ["", f"Other processes kept the machine busy while these ran: {', '.join(noisy)}; "
                    "their figures are noisy."]
    out += ["", "(!) = result did not match the float64 reference (NumPy formulas; PyTorch autograd "
            "for the layers); - = not available."]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.report",
                                 description="print a benchmark results JSON as markdown or text")
    ap.add_argument("path", nargs="?", default=LATEST_JSON)
    ap.add_argument("--text", action="store_true", help="the fixed-width table instead of markdown")
    args = ap.parse_args(argv)
    try:
        results = load(args.path)
    except FileNotFoundError:
        print(f"no results at {args.path}: run `make bench` first", file=sys.stderr)
        return 1
    print(text_table(results) if args.text else markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
