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


def describe_load(snap: dict | None) -> str:
    if not snap:
        return "n/a"
    parts = []
    if snap.get("loadavg"):
        parts.append("loadavg " + " ".join(f"{x:.2f}" for x in snap["loadavg"]))
    if snap.get("cpu_percent") is not None:
        parts.append("cpu% " + "/".join(f"{x:.0f}" for x in snap["cpu_percent"]))
    return ", ".join(parts) or "n/a"
