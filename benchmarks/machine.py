"""What the numbers were measured on: CPU, memory, versions, and the machine's load.

The load is taken before and after every worker process so that a figure measured while
something else was running can be recognised (on 2 cores a second busy process halves a
2-thread speedup).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The SIMD features that matter for float32 kernels."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return [x for x in ("avx2", "fma", "avx512f", "avx512vl", "avx512_bf16") if x in flags]
    except OSError:
        pass
    return []


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict:
    info = {
        "cpu": cpu_model(),
        "simd": cpu_flags(),
        "logical_cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": {d: version(d) for d in ("tensorad", "numpy", "torch", "jax", "jaxlib",
                                              "llvmlite", "islpy", "matplotlib", "psutil")},
    }
    try:
        import psutil

        info["memory_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    return info


def load_snapshot(interval: float = 0.2) -> dict:
    """Load averages, and the CPU busy percentage over ``interval`` seconds when psutil exists."""
    snap: dict = {"time": time.strftime("%H:%M:%S")}
    try:
        snap["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        snap["loadavg"] = None
    try:
        import psutil

        snap["cpu_percent"] = psutil.cpu_percent(interval=interval, percpu=True)
    except ImportError:
        snap["cpu_percent"] = None
    return snap


def busy_cpu_seconds() -> float | None:
    """CPU-seconds all processes of the machine have spent busy since boot (``/proc/stat``)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal ...: busy = all but idle and iowait
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU-seconds used by this process's finished (waited-for) children."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class ForeignLoad:
    """How many CPUs other processes kept busy while a child process ran.

    The machine's busy CPU-seconds over the interval, minus the CPU-seconds of our children,
    divided by the wall time: 0 on a quiet machine, 1.0 when another process used a whole
    core throughout.  Unlike load snapshots taken before and after, it sees bursts in between.
    """

    def __init__(self) -> None:
        self.wall, self.busy, self.ours = time.perf_counter(), busy_cpu_seconds(), children_cpu_seconds()

    def stop(self) -> float | None:
        busy = busy_cpu_seconds()
        if busy is None or self.busy is None:
            return None
        wall = time.perf_counter() - self.wall
        foreign = (busy - self.busy) - (children_cpu_seconds() - self.ours)
        return round(max(foreign, 0.0) / wall, 3) if wall > 0 else None


def describe_load(snap: dict | None) -> str:
    if not snap:
        return "n/a"
    parts = []
    if snap.get("loadavg"):
        parts.append("loadavg " + " ".join(f"{x:.2f}" for x in snap["loadavg"]))
    if snap.get("cpu_percent") is not None:
        parts.append("cpu% " + "/".join(f"{x:.0f}" for x in snap["cpu_percent"]))
    return ", ".join(parts) or "n/a"
