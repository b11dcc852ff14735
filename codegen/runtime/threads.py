"""The parallel runtime of generated kernels: tensorad's own thread pool, or libgomp.

Parallel loops call ``GOMP_parallel(body, data, nthreads, 0)``; the outlined ``body(data)``
takes chunks of the iterations from a counter in ``data`` until none is left (a parallel fill
asks ``omp_get_thread_num()`` / ``omp_get_num_threads()`` for its share).  The object code
names those three symbols either way, so cached and exported kernels work with both runtimes:

* **the pool** (default, :mod:`.runtime.pool`): the symbols resolve to a small JIT-compiled runtime
  whose regions never wait for a worker that has not started -- on a loaded machine the
  caller runs the missing threads' shares itself instead of waiting a scheduler tick.
* **libgomp** (``TENSORAD_PARALLEL_RUNTIME=gomp``, or when the pool cannot be set up): loaded
  once per process with ``llvm.load_library_permanently``; torch ships its own libgomp under
  the same soname, and if one is already in the process it is used rather than a second copy.
  Exported kernels (:mod:`.runtime.export`) always link libgomp.
"""

from __future__ import annotations

import ctypes
import os
import threading

import llvmlite.binding as llvm

_LOCK = threading.Lock()
_LOADED: str | None | bool = False  # False: not tried yet; None: unavailable; str: the runtime
_POOL = None  # the pool (.pool.Pool) when it is the runtime
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
    """The runtime of parallel loops: :data:`POOL`, or the libgomp in use (a path or soname);
    ``None`` when neither can be set up."""
    global _LOADED
    if _LOADED is False:
        with _LOCK:
            if _LOADED is False:
                choice = os.environ.get("TENSORAD_PARALLEL_RUNTIME", "pool")
                if choice not in ("pool", "gomp"):
                    raise ValueError(f"TENSORAD_PARALLEL_RUNTIME={choice!r}: expected 'pool' or 'gomp'")
                _LOADED = (choice == "pool" and _install_pool()) or _load_gomp()
    return _LOADED or None


def ensure_workers(num_threads: int) -> None:
    """Start the pool's workers a region of ``num_threads`` threads uses (no-op on libgomp,
    which starts its own)."""
    if _POOL is not None and num_threads > 1:
        _POOL.ensure_workers(num_threads - 1)


def _install_pool() -> str | None:
    global _POOL
    from . import pool

    try:
        started = pool.start()
        for name, symbol in pool.SYMBOLS.items():
            llvm.add_symbol(name, started.addresses[symbol])
    except (OSError, RuntimeError):  # pragma: no cover - an unusual libc or llvmlite
        return None
    _POOL = started
    return POOL


def _load_gomp() -> str | None:
    lib = _already_loaded() or "libgomp.so.1"
    try:
        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
        llvm.load_library_permanently(lib)
    except (OSError, RuntimeError):
        return None
    return lib


def default_threads() -> int:
    """The threads a parallel region uses by default (:func:`.target.default_num_threads`)."""
    from ..target import default_num_threads

    return default_num_threads()
