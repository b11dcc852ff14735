"""``make bench-readme``: publish a benchmark run as the README's table and chart.

``make bench`` writes its results to the untracked ``benchmarks/results/``; the README shows
``benchmarks/readme/latest.{json,png}`` and a markdown table between the markers
``<!-- bench:start -->`` and ``<!-- bench:end -->``: tensorad / fastest peer per workload,
forward and backward, and the rows where tensorad is behind (:func:`ratio_markdown`).  This
step copies a run there and rewrites the table -- and refuses a run that cannot stand for the project's speed:

* a quick or tiny run (``options.mode`` is not ``full``, or ``flags.quick``);
* a busy run: other processes kept more than :data:`.report.BUSY_CPUS` CPUs busy while some
  system ran (``foreign_cpus``, or ``flags.busy``), or the load was not recorded at all;
* a run with a result that did not match the float64 reference.

``python -m benchmarks.readme [RESULTS.json]`` (default: ``benchmarks/results/latest.json``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from . import report

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(os.path.dirname(HERE), "README.md")
PUBLISHED = os.path.join(HERE, "readme")
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def refusal(results: dict) -> str | None:
    """Why ``results`` may not become the README's table, or ``None`` when it may."""
    flags = results.get("flags", {})
    mode = results.get("options", {}).get("mode")
    if mode != "full" or flags.get("quick"):
        return f"the run is a {mode or 'quick'} run, not a full one (run `make bench` without --quick)"
    runs = results.get("runs") or []
    if not runs:
        return "the run measured nothing"
    unknown = [s for run in runs for s, res in run["systems"].items() if res.get("foreign_cpus") is None]
    if unknown:
        return f"the machine's load was not recorded for {', '.join(sorted(set(unknown)))}"
    noisy = sorted({f"{s} ({run['threads']} thread(s): others used {res['foreign_cpus']:.2f} CPUs)"
                    for run in runs for s, res in run["systems"].items() if report.busy(res)})
    if noisy or flags.get("busy"):
        return "the machine was busy: " + ("; ".join(noisy) or "flagged busy") + \
            " -- rerun when it is quiet (`make bench ARGS=--wait-quiet 60`)"
    for run in runs:
        for s, res in run["systems"].items():
            for w, phases in res.get("workloads", {}).items():
                for ph, e in phases.items():
                    if isinstance(e, dict) and e.get("status") == "mismatch":
                        return f"{s} {w} {ph} did not match the float64 reference"
    return None


PEER_NAMES = {"torch": "PyTorch", "torch-compile": "torch.compile", "jax": "JAX", "numpy": "NumPy"}


def ratio_markdown(results: dict) -> str:
    """The README's table: one row per workload, one column per thread count, each cell
    tensorad / fastest peer as ``forward / backward``; then the cells over 1.0, in words."""
    m = results["machine"]
    runs = results["runs"]
    out = [f"Measured {results['started']} on {m['cpu']} ({m['logical_cpus']} CPUs; "
           f"{', '.join(m['simd'])}), tensorad target `{results['options'].get('target', 'host')}`. "
           "Each cell is tensorad's median time over the fastest of PyTorch, JAX and NumPy, "
           "forward / backward: below 1.00 tensorad is faster.", "",
           "| workload | shapes | " + " | ".join(f"{r['threads']} thread(s)" for r in runs) + " |",
           "| --- | --- | " + " | ".join("---:" for _ in runs) + " |"]
    behind = []
    for w in results["workloads"]:
        cells = []
        for run in runs:
            pair = []
            for phase in ("forward", "backward"):
                mine = report.median(report.entry(run, "tensorad", w["name"], phase))
                peer = report.fastest_peer(run, w["name"], phase)
                if not (mine and peer):
                    pair.append("-")
                    continue
                ratio = mine / peer[1]
                pair.append(f"{ratio:.2f}")
                if ratio > 1.0:
                    behind.append(f"{w['name']} {phase} at {run['threads']} thread(s) "
                                  f"({ratio:.2f}, {PEER_NAMES.get(peer[0], peer[0])})")
            cells.append(" / ".join(pair))
        shapes = w["describe"].split(";")[0]
        out.append(f"| {w['name']} | {shapes} | " + " | ".join(cells) + " |")
    out += ["", "Behind the fastest peer: " + "; ".join(behind) + "." if behind
            else "tensorad is at least as fast as every peer on every row."]
    return "\n".join(out)


def rewrite_readme(text: str, table: str) -> str:
    """``text`` with the part between the markers replaced by ``table``."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise ValueError(f"the README needs one {START} ... {END} section for the benchmark table")
    head, rest = text.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{table}\n{END}{tail}"


def publish(path: str, readme: str = README, folder: str = PUBLISHED) -> list[str]:
    """Copy the run at ``path`` (and its chart) to ``folder`` and rewrite ``readme``'s table;
    raises ``ValueError`` with the reason when the run is refused."""
    results = report.load(path)
    why = refusal(results)
    if why is not None:
        raise ValueError(f"{path}: not published: {why}")
    with open(readme) as f:
        text = rewrite_readme(f.read(), ratio_markdown(results))
    os.makedirs(folder, exist_ok=True)
    written = [os.path.join(folder, "latest.json")]
    shutil.copyfile(path, written[0])
    png = os.path.splitext(path)[0] + ".png"
    if os.path.exists(png):
        written.append(os.path.join(folder, "latest.png"))
        shutil.copyfile(png, written[-1])
    with open(readme, "w") as f:
        f.write(text)
    return written + [readme]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.readme", description=__doc__.split("\n")[0])
    ap.add_argument("path", nargs="?", default=report.LATEST_JSON)
    args = ap.parse_args(argv)
    try:
        written = publish(args.path)
    except FileNotFoundError:
        print(f"no results at {args.path}: run `make bench` first", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"bench-readme: {exc}", file=sys.stderr)
        return 1
    for p in written:
        print(f"wrote {os.path.relpath(p)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
