"""torch.compile as a peer: the same PyTorch forward (``sys_torch``) compiled by Inductor.

The forward runs under ``no_grad`` (a whole model's with gradients enabled, as a training step runs it:
``sys_torch.step_arguments``); the backward runs the compiled forward once with gradients
enabled and times ``torch.autograd.grad`` with the head, which runs the backward graph that
AOTAutograd compiled (reading the tensors the compiled forward saved).  The first call's compile
time is recorded as ``compile``.
"""

from __future__ import annotations

import time

from . import sys_torch
from .systems import Phase, Unavailable

setup_torch = sys_torch.setup


def setup(threads: int) -> dict:
    info = setup_torch(threads)
    torch = sys_torch.torch
    if not hasattr(torch, "compile"):
        raise Unavailable("this PyTorch has no torch.compile")
    return info


def _compiled(workload):
    """A fresh compilation per phase: workloads of one kind share their function's code object
    (the ``convs`` suite's layers), and Dynamo's per-code cache (8 entries) would otherwise
    fill up and leave the later workloads running eager."""
    torch = sys_torch.torch
    torch._dynamo.reset()
    return torch.compile(sys_torch.forward_fn(workload.kind, workload.params), dynamic=False)


def forward(workload, arrays) -> Phase:
    torch = sys_torch.torch
    f = _compiled(workload)
    args = sys_torch.step_arguments(workload, arrays)

    def run():
        with torch.set_grad_enabled(workload.suite == "models"):
            return f(*args)
    t0 = time.perf_counter()
    run()
    return Phase(fn=run, outputs=sys_torch._outputs, prep_s={"compile": time.perf_counter() - t0})


def backward(workload, arrays, head) -> Phase:
    torch = sys_torch.torch
    f = _compiled(workload)
    args = {k: torch.from_numpy(a.copy()).requires_grad_(k in workload.grads) for k, a in arrays.items()}
    t0 = time.perf_counter()
    y = f(*args.values())
    h = torch.from_numpy(head)
    want = [args[g] for g in workload.grads]
    torch.autograd.grad(y, want, h, retain_graph=True)
    return Phase(fn=lambda: torch.autograd.grad(y, want, h, retain_graph=True), outputs=sys_torch._outputs,
                 prep_s={"compile": time.perf_counter() - t0})


def sweep(task: str, arrays) -> Phase:
    raise Unavailable("torch.compile runs the workloads only")
