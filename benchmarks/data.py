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
    y = sys_numpy.forward(w.kind, a64)
    head = workloads.make_head(y.shape)
    grads = sys_numpy.backward(w.kind, a64, head.astype(np.float64), w.grads)
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
