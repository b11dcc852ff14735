"""``python tools/profile_kernel.py WORKLOAD [--phase forward|backward] [--target SPEC] [--seconds S]``

Where a benchmark workload's kernel spends its time, per function of its machine code: each nest
(``kNNN_nest12``, with the op it computes), its packers and epilogues, and the matrix-product
library's pieces (micro-kernels, packers, driver).  The forward is ``ta.build`` of the workload's
output, the backward ``ta.function(...).backward`` reading the forward's residuals, as
``benchmarks/sys_tensorad.py`` times them, at one thread.

The kernel's code lives in the JIT, which ``perf`` cannot name: this script records the address and
size of every function it links (``/tmp/perf-PID.map``, perf's map of JIT code) and, compiling outside the
disk cache, which nest each unit named by its content (``tensorad_fn_<hash>``, its packers and epilogue
``..._packA``, ``..._finish``) was cut from, then samples its own
process with ``perf record`` (Linux; ``perf`` on the PATH, ``kernel.perf_event_paranoid`` <= 2) while
the kernel runs for ``--seconds`` of CPU time, and prints each symbol's share of the samples.  Shares
are of CPU samples, so a loaded machine changes them little; compare two trees by their shares and
the CPU milliseconds per call printed first.  Run from a tree's root with ``PYTHONPATH=.``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import tensorad.codegen.jit.engine as engine
import tensorad.codegen.jit.module_split as module_split

import tensorad as ta

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import sys_tensorad, workloads  # noqa: E402

LINKED: list[tuple[object, list[bytes]]] = []  # (engine, object files) of every link of this run
CUT_FROM: dict[str, str] = {}  # a unit's content name -> the nest it was cut from, in this run


def record_links() -> None:
    """Wrap the JIT's linking so that every engine and the objects linked into it are kept (this script
    only: the addresses are read after the kernel is built)."""
    add = engine._add_objects  # noqa: SLF001 - wrapped for this script's profile only

    def recording(state, eng, parts):
        refs = add(state, eng, parts)
        LINKED.append((eng, list(parts)))
        return refs
    engine._add_objects = recording  # noqa: SLF001


def record_units() -> None:
    """Wrap the module splitter so that each unit's content name maps to the nest it was cut from (this
    script only; the disk cache is off, so that every kernel is split here)."""
    units = module_split._units  # noqa: SLF001 - wrapped for this script's profile only

    def recording(*a):
        calls, made = units(*a)
        CUT_FROM.update((content, nest) for nest, content in calls.items())
        return calls, made
    os.environ["TENSORAD_NO_DISK_CACHE"] = "1"
    module_split._units = recording  # noqa: SLF001


def function_map() -> list[tuple[int, int, str]]:
    """``(address, size, name)`` of every function defined by the linked objects (``nm -S``)."""
    out = []
    for eng, parts in LINKED:
        for part in parts:
            with tempfile.NamedTemporaryFile(suffix=".o", delete=False) as f:
                f.write(part)
            try:
                listing = subprocess.run(["nm", "-S", "--defined-only", f.name], capture_output=True,
                                         text=True, check=False).stdout
            finally:
                os.unlink(f.name)
            for line in listing.splitlines():
                bits = line.split()
                if len(bits) == 4 and bits[2] in "Tt":
                    address = eng.get_function_address(bits[3])
                    if address:
                        out.append((address, int(bits[1], 16), bits[3]))
    return out


def phase_call(name: str, phase: str, target: str):
    """The timed call of ``benchmarks/sys_tensorad.py`` and the loop program it runs."""
    sys_tensorad.setup(1, target)
    options = {"num_threads": 1, **({"target": target} if target else {})}
    w = workloads.BY_NAME[name]
    arrays = workloads.make_inputs(w)
    args = list(arrays.values())
    p = {k: ta.placeholder(v.shape, str(v.dtype), k) for k, v in arrays.items()}
    y = sys_tensorad.topi_forward(w.kind, p, w.params)
    kernel = ta.build([y], list(p.values()), **options)
    if phase == "forward":
        return (lambda: kernel(*args)), kernel.lowered
    f = ta.function(y, list(p.values()), wrt=[p[g] for g in w.grads], **options)
    head = workloads.make_head(np.asarray(kernel(*args)).shape)
    _, residuals = f.forward(*args)
    return (lambda: f.backward(residuals, head)), f.backward_kernel.lowered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("workload", choices=sorted(workloads.BY_NAME))
    ap.add_argument("--phase", choices=("forward", "backward"), default="forward")
    ap.add_argument("--target", default="", help="ta.build's target (default: the host)")
    ap.add_argument("--seconds", type=float, default=4.0, help="CPU seconds of calls to sample")
    ap.add_argument("--top", type=int, default=30, help="symbols printed")
    args = ap.parse_args()
    record_links()
    record_units()
    call, lowered = phase_call(args.workload, args.phase, args.target)
    call()
    symbols = function_map()
    with open(f"/tmp/perf-{os.getpid()}.map", "w") as f:
        f.writelines(f"{a:x} {s:x} {n}\n" for a, s, n in symbols)
    data = tempfile.mktemp(suffix=".perf")
    perf = subprocess.Popen(["perf", "record", "-q", "-F", "2000", "-o", data, "-p", str(os.getpid())])
    time.sleep(0.5)  # (perf attaches)
    t0, calls = time.process_time(), 0
    while time.process_time() - t0 < args.seconds:
        call()
        calls += 1
    per_call = (time.process_time() - t0) / calls
    perf.send_signal(2)
    perf.wait()
    report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "sym"], capture_output=True,
                            text=True, check=False).stdout
    os.unlink(data)
    names = {str(k): getattr(s, "name", "") for k, s in enumerate(lowered.program.steps)}
    print(f"{args.workload} {args.phase} ({args.target or 'host'}): {per_call * 1e3:.3f} CPU ms a call, "
          f"{calls} calls")
    shown = 0
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[[.k]\]\s+(\S+)", line)
        if not m or shown >= args.top:
            continue
        unit = re.match(r"tensorad_fn_[0-9a-f]+", m.group(2))
        nest = re.search(r"_nest(\d+)", CUT_FROM.get(unit.group(0), "") if unit else m.group(2))
        what = names.get(nest.group(1), "") if nest else ""
        print(f"  {float(m.group(1)):6.2f}%  {m.group(2)}  {what}")
        shown += 1


if __name__ == "__main__":
    main()
