"""The chart: tensorad's time over the fastest peer's, per workload, forward and backward.

One panel per thread count; each workload has a forward and a backward bar, on a log scale
centred on a line at 1.0 (below it tensorad is faster, above it slower).  The title names the
machine.  :func:`ratio_rows` computes what is drawn, so that it can be tested without pixels;
:func:`plot` returns ``None`` (and draws nothing) when matplotlib is not installed.
"""

from __future__ import annotations

from .report import ratios

PHASES = ("forward", "backward")
COLORS = {"forward": "#4c72b0", "backward": "#dd8452"}


def ratio_rows(results: dict) -> dict[int, dict[str, tuple[float | None, float | None]]]:
    """``{threads: {workload: (forward ratio, backward ratio)}}``: tensorad (autodiff) over the
    fastest peer whose result matched the reference; ``None`` where either was not timed."""
    out = {}
    for run in results["runs"]:
        per_phase = [ratios(run, results["workloads"], phase) for phase in PHASES]
        out[run["threads"]] = {w["name"]: tuple(r.get(w["name"]) for r in per_phase)
                               for w in results["workloads"]}
    return out


def machine_title(results: dict) -> str:
    m = results["machine"]
    return (f"tensorad / fastest peer (PyTorch, JAX, NumPy) on {m['cpu']}, {m['logical_cpus']} CPUs "
            f"-- below 1.0 tensorad is faster; measured {results['started']}")


def plot(results: dict, path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = ratio_rows(results)
    names = [w["name"] for w in results["workloads"]]
    if not rows or not names:
        return None
    fig, axes = plt.subplots(1, len(rows), figsize=(max(6.0, 0.9 * len(names)) * len(rows), 4.5),
                             squeeze=False, sharey=True)
    every = [x for table in rows.values() for pair in table.values() for x in pair if x]
    lo, hi = min(every + [0.5]), max(every + [2.0])
    for ax, (threads, table) in zip(axes[0], rows.items()):
        for k, phase in enumerate(PHASES):
            xs = [i + (k - 0.5) * 0.4 for i, n in enumerate(names) if table[n][k]]
            ys = [table[n][k] for n in names if table[n][k]]
            # bars grow from the line at 1.0: up where tensorad is slower, down where faster
            ax.bar(xs, [y - 1.0 for y in ys], 0.4, bottom=1.0, label=phase, color=COLORS[phase])
            for x, y in zip(xs, ys):
                ax.annotate(f"{y:.2f}", (x, y), ha="center",
                            va="bottom" if y >= 1 else "top", fontsize=7,
                            xytext=(0, 2 if y >= 1 else -2), textcoords="offset points")
        ax.axhline(1.0, color="black", linewidth=1.2)
        ax.set_yscale("log")
        ax.set_ylim(lo / 1.6, hi * 1.6)
        ticks = [t for t in (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0) if lo / 1.6 <= t <= hi * 1.6]
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{threads} thread(s)", fontsize=9)
        ax.grid(axis="y", which="major", alpha=0.4)
        ax.set_axisbelow(True)
    axes[0][0].set_ylabel("tensorad time / fastest peer's (log)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(machine_title(results), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
