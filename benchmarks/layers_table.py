"""The README's layers table from several benchmark runs: one column per run.

``python -m benchmarks.layers_table "host, 1 thread=a.json" "haswell, 1 thread=b.json" ...``
prints a Markdown table, tensorad / fastest peer (forward / backward) per layer and run, with
the geometric mean of each column and the rows over :data:`.report.WORST_ALLOWED` in bold.  The
runs are the JSON files ``python -m benchmarks --json FILE`` writes (one thread count each).
"""

from __future__ import annotations

import math
import sys

from .report import WORST_ALLOWED, load, ratios


def _geo(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def _cell(f: float | None, b: float | None) -> str:
    def one(x: float | None) -> str:
        if x is None:
            return "-"
        return f"**{x:.2f}**" if x > WORST_ALLOWED else f"{x:.2f}"
    return f"{one(f)} / {one(b)}"


def table(columns: list[tuple[str, dict]]) -> str:
    """``columns``: (label, run) pairs; the rows are the workloads of the first run."""
    names = list(columns[0][1]["systems"]["tensorad"]["workloads"])
    workloads = [{"name": n} for n in names]
    per = [(label, ratios(run, workloads, "forward"), ratios(run, workloads, "backward"))
           for label, run in columns]
    lines = ["| layer | " + " | ".join(label for label, _, _ in per) + " |",
             "| --- |" + " ---: |" * len(per)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(_cell(f.get(n), b.get(n)) for _, f, b in per) + " |")
    lines.append("| **geometric mean** | " + " | ".join(
        f"**{_geo(list(f.values())):.2f} / {_geo(list(b.values())):.2f}**" for _, f, b in per) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or any("=" not in a for a in args):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    columns = []
    for a in args:
        label, path = a.rsplit("=", 1)
        results = load(path)
        columns.extend((label if len(results["runs"]) == 1 else f"{label}, {r['threads']}t", r)
                       for r in results["runs"])
    print(table(columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
