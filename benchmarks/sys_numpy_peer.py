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
    if workload.kind not in sys_numpy.FORWARD and workload.kind not in sys_numpy.LAYER_FORWARD:
        raise Unavailable(f"no NumPy formula for {workload.kind}")
    return _phase(lambda: sys_numpy.forward(workload.kind, arrays, workload.params))


def backward(workload, arrays, head) -> Phase:
    if workload.kind not in sys_numpy.BACKWARD:
        raise Unavailable(f"no hand-written NumPy backward for {workload.kind}")
    def run():
        g = sys_numpy.backward(workload.kind, arrays, head, workload.grads)
        return [g[n] for n in workload.grads]
    return _phase(run)


def sweep(task: str, arrays) -> Phase:
    """Sweep rows write into preallocated outputs (``out=``): they measure the loops."""
    a = arrays.get("A")
    c = np.empty_like(a) if a is not None else None
    if task == "gemm":
        c = np.empty((a.shape[0], arrays["B"].shape[1]), np.float32)
        return _phase(lambda: np.matmul(a, arrays["B"], out=c))
    if task == "add":
        return _phase(lambda: np.add(a, arrays["B"], out=c))
    if task == "relu":
        return _phase(lambda: np.maximum(a, np.float32(0), out=c))
    if task == "exp":
        return _phase(lambda: np.exp(a, out=c))
    if task == "avg_pool":
        x = arrays["X"]
        n, ch, h, w = x.shape
        c = np.empty((n, ch, h // 2, w // 2), np.float32)
        return _phase(lambda: x.reshape(n, ch, h // 2, 2, w // 2, 2).mean(axis=(3, 5), out=c))
    if task == "copy":   # bandwidth probe: read A, write a preallocated buffer
        return _phase(lambda: np.copyto(c, a) or c)
    raise Unavailable(f"no sweep task {task!r}")
