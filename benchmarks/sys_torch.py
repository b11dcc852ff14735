"""PyTorch eager as a peer: forward under ``no_grad``; backward by autograd with the same head.

The backward phase runs the forward once with gradients enabled, then times
``torch.autograd.grad(y, inputs, H, retain_graph=True)`` -- the work of ``y.backward(H)``
without accumulating into ``.grad`` -- so it uses the tensors autograd saved in the forward
(PyTorch's normal training path), where tensorad and JAX recompute what they need.
"""

from __future__ import annotations

import numpy as np

from .systems import Phase, Unavailable, as_list, import_failure
from .threads import configure_torch

torch = None


def setup(threads: int) -> dict:
    global torch
    try:
        import torch as _torch
    except ImportError as e:
        raise import_failure("torch", e) from e
    torch = _torch
    configure_torch(torch, threads)
    return {"version": torch.__version__, "threads": torch.get_num_threads()}


def _model(kind: str):
    F = torch.nn.functional
    return {
        "dense": lambda X, W, B: F.linear(X, W, B),
        "conv2d": lambda X, W: F.conv2d(X, W),
        "avg_pool": lambda X: F.avg_pool2d(X, 2, 2),
        "max_pool": lambda X: F.max_pool2d(X, 2, 2),
        "softmax_homebrew": lambda X, W: (lambda e: e / e.sum(-1, keepdim=True))(torch.exp(X @ W.T)),
        "flatten": lambda X: torch.flatten(X, 1),
        "softmax": lambda X: torch.softmax(X, -1),
    }[kind]


def _outputs(r) -> list[np.ndarray]:
    return [x.detach().numpy() for x in as_list(r)]


def forward(workload, arrays) -> Phase:
    f = _model(workload.kind)
    args = [torch.from_numpy(a) for a in arrays.values()]

    def run():
        with torch.no_grad():
            return f(*args)
    return Phase(fn=run, outputs=_outputs)


def backward(workload, arrays, head) -> Phase:
    f = _model(workload.kind)
    args = {k: torch.from_numpy(a.copy()).requires_grad_(k in workload.grads) for k, a in arrays.items()}
    y = f(*args.values())
    h = torch.from_numpy(head)
    want = [args[g] for g in workload.grads]
    return Phase(fn=lambda: torch.autograd.grad(y, want, h, retain_graph=True), outputs=_outputs)


def sweep(task: str, arrays) -> Phase:
    """Preallocated outputs (``out=``) where PyTorch has them (not for avg_pool2d)."""
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}
    F = torch.nn.functional
    a = t.get("A")
    c = torch.empty(a.shape[0], t["B"].shape[1]) if task == "gemm" else \
        torch.empty_like(a) if a is not None else None
    fns = {
        "gemm": lambda: torch.mm(a, t["B"], out=c),
        "add": lambda: torch.add(a, t.get("B"), out=c),
        "relu": lambda: torch.clamp_min(a, 0.0, out=c),
        "avg_pool": lambda: F.avg_pool2d(t.get("X"), 2, 2),
    }
    if task not in fns:
        raise Unavailable(f"no sweep task {task!r}")
    fn = fns[task]

    def run():
        with torch.no_grad():
            return fn()
    return Phase(fn=run, outputs=_outputs)
