"""The parallel runtime of generated kernels: libgomp, loaded once per process.

Parallel loops call ``GOMP_parallel`` (about 1.5 us per call on 2 cores).  The library is
loaded with ``llvm.load_library_permanently`` so the JIT resolves its symbols.  torch ships its
own libgomp under the same soname; if one is already in the process we use it rather than load
a second copy.  When libgomp is missing, kernels are compiled without parallel regions and run
serially (``parallel_runtime()`` returns ``None``; ``Kernel.num_threads`` is then 1).
"""

from __future__ import annotations

import ctypes
import os
import threading

import llvmlite.binding as llvm

_LOCK = threading.Lock()
_LOADED: str | None | bool = False  # False: not tried yet; None: unavailable; str: the library


def _already_loaded() -> str | None:
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libgomp" in line and ".so" in line:
                    return line.split()[-1]
    except OSError:
        pass
    return None


def parallel_runtime() -> str | None:
    """The libgomp in use (a path or soname), or ``None`` when there is none."""
    global _LOADED
    if _LOADED is False:
        with _LOCK:
            if _LOADED is False:
                if os.environ.get("TENSORAD_NO_GOMP"):
                    _LOADED = None
                    return None
                lib = _already_loaded() or "libgomp.so.1"
                try:
                    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                    llvm.load_library_permanently(lib)
                    _LOADED = lib
                except (OSError, RuntimeError):
                    _LOADED = None
    return _LOADED or None


def default_threads() -> int:
    """All the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
