"""A workload's inputs, head and float64 reference results, computed once per benchmark run.

Every worker process needs the same data (the inputs are seeded) and the same oracle; for the
big workloads making them costs seconds (avg pool's input alone is 170 MB), so the first
worker saves them (uncompressed ``.npz``) in the run's temporary directory and the others
load them.
"""

from __future__ import annotations

import os

import numpy as np

from . import sys_numpy, workloads


def _compute(w: workloads.Workload, tiny: bool) -> dict[str, np.ndarray]:
    arrays = workloads.make_inputs(w, tiny)
    a64 = {k: v.astype(np.float64) for k, v in arrays.items()}
    if w.kind in sys_numpy.BACKWARD:   # the seed's kinds: NumPy formulas written by hand
        y = sys_numpy.forward(w.kind, a64, w.params)
        head = workloads.make_head(y.shape)
        grads = sys_numpy.backward(w.kind, a64, head.astype(np.float64), w.grads)
    else:                              # the layers: PyTorch's autograd in float64
        from . import sys_torch

        y, head, grads = sys_torch.autograd_reference(w, arrays, workloads.make_head)
    return {**{f"in_{k}": v for k, v in arrays.items()}, "head": head, "y": y,
            **{f"grad_{k}": v for k, v in grads.items()}}


def workload_data(w: workloads.Workload, tiny: bool, cache_dir: str | None = None):
    """(inputs by name in workload order, float64 Y, head, float64 gradients by name)."""
    path = os.path.join(cache_dir, f"{w.name}-{'tiny' if tiny else 'full'}.npz") if cache_dir else None
    if path and os.path.exists(path):
        with np.load(path) as z:
            d = {k: z[k] for k in z.files}
    else:
        d = _compute(w, tiny)
        if path:
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                np.savez(f, **d)
            os.replace(tmp, path)
    arrays = {k: d[f"in_{k}"] for k in w.input_shapes(tiny)}
    return arrays, d["y"], d["head"], {k: d[f"grad_{k}"] for k in w.grads}


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.data --cache DIR --workloads a,b [--tiny]``: fill the run's data
    cache; prints the workloads that need PyTorch for their reference when it is missing."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks.data")
    ap.add_argument("--cache", required=True)
    ap.add_argument("--workloads", default="")
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: F401 - only to know whether the layers' oracle is available
        have_torch = True
    except ImportError:
        have_torch = False
    for w in workloads.select([n for n in args.workloads.split(",") if n]):
        if w.kind not in sys_numpy.BACKWARD and not have_torch:
            print(w.name)
            continue
        workload_data(w, args.tiny, args.cache)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
