"""The chart: forward and backward time per workload per system, log scale (matplotlib, Agg).

One column of panels per thread count, forward on top and backward below; the seed's 2018
figures are drawn as grey bars where they are non-zero.  Returns None (and draws nothing) when
matplotlib is not installed.
"""

from __future__ import annotations

from .report import entry, median, systems_of

COLORS = {"tensorad": "#d62728", "tensorad-hand": "#ff9896", "torch": "#1f77b4",
          "torch-compile": "#17becf", "jax": "#2ca02c",
          "numpy": "#9467bd", "seed 2018": "#7f7f7f"}


def plot(results: dict, path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    runs = results["runs"]
    names = [w["name"] for w in results["workloads"]]
    if not runs or not names:
        return None
    fig, axes = plt.subplots(2, len(runs), figsize=(max(7, 1.3 * len(names)) * len(runs), 8),
                             squeeze=False, sharey="row")
    for col, run in enumerate(runs):
        systems = systems_of(run) + ["seed 2018"]
        width = 0.8 / len(systems)
        for row, phase in enumerate(("forward", "backward")):
            ax = axes[row][col]
            for k, s in enumerate(systems):
                xs, ys = [], []
                for i, w in enumerate(results["workloads"]):
                    if s == "seed 2018":
                        m = w["seed_ms"][row] or None
                    else:
                        m = median(entry(run, s, w["name"], phase))
                    if m:
                        xs.append(i + (k - (len(systems) - 1) / 2) * width)
                        ys.append(m)
                ax.bar(xs, ys, width, label=s, color=COLORS.get(s))
            ax.set_yscale("log")
            ax.set_axisbelow(True)
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
            ax.set_title(f"{phase}, {run['threads']} thread(s)")
            ax.set_ylabel("ms (median, log scale)")
            ax.grid(axis="y", which="major", alpha=0.4)
    axes[0][0].legend(fontsize=8, ncol=2)
    fig.suptitle(f"tensorad benchmarks {results['started']} ({results['machine']['cpu']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
