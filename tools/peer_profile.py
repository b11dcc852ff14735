"""``python tools/peer_profile.py WORKLOADS [--phase forward|backward] [--calls N] [--top N]``

What the peers do for a benchmark workload, to set beside ``tools/profile_kernel.py``'s shares of
tensorad's kernel: PyTorch eager's operators by their share of self CPU time (``torch.profiler``), and
the computations XLA compiled the JAX forward into (each fusion, its kind and shape: what XLA fused).
The phases are those ``benchmarks/sys_torch.py`` and ``benchmarks/sys_jax.py`` time, at one thread.
``WORKLOADS``: comma-separated names of ``benchmarks/workloads.py``.  Run from a tree's root with
``PYTHONPATH=.``; shares are of CPU time, so a loaded machine changes them little.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import sys_jax, sys_torch, workloads  # noqa: E402
from benchmarks.threads import apply_thread_limit  # noqa: E402


def torch_shares(w, phase: str, calls: int, top: int) -> list[str]:
    """Lines ``share  operator  calls per phase call`` of PyTorch's operators, by self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    arrays = workloads.make_inputs(w)
    ph = sys_torch.forward(w, arrays)
    if phase == "backward":
        shape = ph.outputs(ph.fn())[0].shape
        ph = sys_torch.backward(w, arrays, workloads.make_head(shape))
    for _ in range(5):
        ph.fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            ph.fn()
    rows = [(e.self_cpu_time_total, e.key, e.count) for e in prof.key_averages()]
    total = sum(r[0] for r in rows) or 1.0
    rows.sort(reverse=True)
    return [f"  {100 * t / total:6.2f}%  {key}  x{count // calls}" for t, key, count in rows[:top]]


def xla_fusions(w) -> list[str]:
    """One line per computation of the compiled JAX forward's entry: its kind and result shape."""
    import jax.numpy as jnp

    arrays = workloads.make_inputs(w)
    f = sys_jax.jax.jit(sys_jax._model(w.kind, w.params))  # noqa: SLF001 - the peer's own model
    text = f.lower(*[jnp.asarray(a) for a in arrays.values()]).compile().as_text()
    entry = text[text.find("ENTRY"):]
    lines = []
    for line in entry.splitlines()[1:]:
        m = re.match(r"\s*(?:ROOT\s+)?%(\S+)\s*=\s*(\S+)\s+(\w[\w-]*)\(", line)
        if m and m.group(3) not in ("parameter", "constant", "bitcast", "tuple", "get-tuple-element"):
            kind = re.search(r"kind=(k\w+)", line)
            kind = kind.group(1) if kind else ""
            lines.append(f"  {m.group(3):12s} {kind:8s} {m.group(2):24s} {m.group(1)}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("workloads")
    ap.add_argument("--phase", choices=("forward", "backward"), default="forward")
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    apply_thread_limit(1, numpy_blas=False)
    sys_torch.setup(1)
    sys_jax.setup(1)
    for name in args.workloads.split(","):
        w = workloads.BY_NAME[name]
        print(f"{name} {args.phase}: PyTorch eager, share of self CPU time")
        print("\n".join(torch_shares(w, args.phase, args.calls, args.top)))
        if args.phase == "forward":
            fused = xla_fusions(w)
            print(f"{name} forward: XLA's {len(fused)} computations")
            print("\n".join(fused))


if __name__ == "__main__":
    main()
