"""NumPy as a peer: the float32 forward and hand-written backward formulas of ``sys_numpy``."""

from __future__ import annotations

import numpy as np

from . import sys_numpy
from .systems import Phase, Unavailable, as_list


def setup(threads: int) -> dict:
    return {"version": np.__version__}


def _phase(fn) -> Phase:
    return Phase(fn=fn, outputs=lambda r: [np.asarray(x) for x in as_list(r)])


def forward(workload, arrays) -> Phase:
    return _phase(lambda: sys_numpy.forward(workload.kind, arrays))


def backward(workload, arrays, head) -> Phase:
    def run():
        g = sys_numpy.backward(workload.kind, arrays, head, workload.grads)
        return [g[n] for n in workload.grads]
    return _phase(run)


def sweep(task: str, arrays) -> Phase:
    a = arrays.get("A")
    if task == "gemm":
        return _phase(lambda: arrays["A"] @ arrays["B"])
    if task == "add":
        return _phase(lambda: np.add(a, arrays["B"]))
    if task == "relu":
        return _phase(lambda: np.maximum(a, np.float32(0)))
    if task == "avg_pool":
        return _phase(lambda: sys_numpy.forward("avg_pool", arrays))
    if task == "copy":   # bandwidth probe: read A, write a preallocated buffer
        out = np.empty_like(a)
        return _phase(lambda: np.copyto(out, a) or out)
    raise Unavailable(f"no sweep task {task!r}")
