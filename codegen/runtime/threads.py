"""The parallel runtime of generated kernels: tensorad's own thread pool, or libgomp.

Parallel loops call ``GOMP_parallel(body, data, nthreads, 0)``, so cached and exported kernels work with
both runtimes: **the pool** (default, :mod:`.runtime.pool`), or **libgomp**
(``TENSORAD_PARALLEL_RUNTIME=gomp``, or when the pool cannot be set up), loaded once per process, reusing
a libgomp already there.  Exported kernels always link libgomp."""

from __future__ import annotations

import ctypes
import os

import llvmlite.binding as llvm

from tensorad.ir.locks import process_lock


class _Runtime:
    """The parallel runtime this process set up, once (the first build that needs one), for the
    life of the process: which one it is, and tensorad's pool when it is that one."""

    def __init__(self) -> None:
        self.lock = process_lock()
        self.loaded: str | None | bool = False  # False: not tried yet; None: unavailable; str: the runtime
        self.pool = None  # the pool (.pool.Pool) when it is the runtime


_RUNTIME = _Runtime()
POOL = "tensorad-pool"


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
    """The runtime of parallel loops: :data:`POOL`, or the libgomp in use (a path or soname), or ``None``."""
    if _RUNTIME.loaded is False:
        with _RUNTIME.lock:
            if _RUNTIME.loaded is False:
                choice = os.environ.get("TENSORAD_PARALLEL_RUNTIME", "pool")
                if choice not in ("pool", "gomp"):
                    raise ValueError(f"TENSORAD_PARALLEL_RUNTIME={choice!r}: expected 'pool' or 'gomp'")
                _RUNTIME.loaded = (choice == "pool" and _install_pool()) or _load_gomp()
    return _RUNTIME.loaded or None


def ensure_workers(num_threads: int) -> None:
    """Start the pool's workers a region of ``num_threads`` threads uses (a no-op on libgomp)."""
    if _RUNTIME.pool is not None and num_threads > 1:
        _RUNTIME.pool.ensure_workers(num_threads - 1)


def _install_pool() -> str | None:
    from . import pool

    try:
        started = pool.start()
        for name, symbol in pool.SYMBOLS.items():
            llvm.add_symbol(name, started.addresses[symbol])
    except (OSError, RuntimeError):  # pragma: no cover - an unusual libc or llvmlite
        return None
    _RUNTIME.pool = started
    return POOL


def _load_gomp() -> str | None:
    lib = _already_loaded() or "libgomp.so.1"
    try:
        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
        llvm.load_library_permanently(lib)
    except (OSError, RuntimeError):
        return None
    return lib
