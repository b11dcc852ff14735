"""The parallel runtime of generated kernels: libgomp, or a thread pool of our own without it.

Parallel loops call ``GOMP_parallel(body, data, nthreads, 0)``; the outlined ``body(data)``
takes chunks of the iterations from a counter in ``data`` until none is left (a parallel fill
asks ``omp_get_thread_num()`` / ``omp_get_num_threads()`` for its share).

* **libgomp** (about 1.5 us per parallel region on 2 cores) is loaded once per process with
  ``llvm.load_library_permanently`` so that the JIT resolves its symbols.  torch ships its own
  libgomp under the same soname; if one is already in the process we use it rather than load a
  second copy.
* **Fallback** (libgomp missing, or ``TENSORAD_NO_GOMP=1``): the same three symbols are
  registered with the JIT as ctypes callbacks into a Python thread pool.  ``GOMP_parallel``
  runs ``body(data)`` as thread 0 in the calling thread and as threads ``1..n-1`` in pool
  workers, each through a ctypes call that releases the GIL, so the parallel loop really runs
  on several cores; ``omp_get_thread_num`` answers from a thread-local.  A region costs some
  tens of microseconds (a Python callback and thread hand-offs) instead of 1.5: kernels with
  less work than ``parallel_min_work`` stay serial anyway.  The object code is the same either
  way (it calls ``GOMP_parallel`` by name), so cached kernels work with both.
"""

from __future__ import annotations

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import llvmlite.binding as llvm

_LOCK = threading.Lock()
_LOADED: str | None | bool = False  # False: not tried yet; None: unavailable; str: the runtime
THREAD_POOL = "tensorad-thread-pool"


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
    """The runtime of parallel loops: the libgomp in use (a path or soname), or
    :data:`THREAD_POOL` (the fallback); ``None`` when neither can be set up."""
    global _LOADED
    if _LOADED is False:
        with _LOCK:
            if _LOADED is False:
                _LOADED = _load_gomp() or _install_pool()
    return _LOADED or None


def _load_gomp() -> str | None:
    if os.environ.get("TENSORAD_NO_GOMP", "") not in ("", "0"):
        return None
    lib = _already_loaded() or "libgomp.so.1"
    try:
        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
        llvm.load_library_permanently(lib)
    except (OSError, RuntimeError):
        return None
    return lib


def default_threads() -> int:
    """The threads a parallel region uses by default (:func:`.target.default_num_threads`)."""
    from .target import default_num_threads

    return default_num_threads()


# ---- the fallback: GOMP_parallel on a Python thread pool -----------------------------------------

_BODY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_PARALLEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint)
_QUERY = ctypes.CFUNCTYPE(ctypes.c_int)


class _Team(threading.local):
    tid = 0
    size = 1


_TEAM = _Team()
_POOL: ThreadPoolExecutor | None = None
_BODIES: dict[int, object] = {}  # outlined body address -> its ctypes wrapper


def _member(body, data: int, tid: int, size: int) -> None:
    saved = _TEAM.tid, _TEAM.size
    _TEAM.tid, _TEAM.size = tid, size
    try:
        body(data)  # a ctypes call: the GIL is released while the loop runs
    finally:
        _TEAM.tid, _TEAM.size = saved


def _gomp_parallel(fn: int, data: int, nthreads: int, flags: int) -> None:
    body = _BODIES.get(fn)
    if body is None:
        body = _BODIES.setdefault(fn, _BODY(fn))
    n = max(1, int(nthreads) or default_threads())
    futures = [_POOL.submit(_member, body, data, t, n) for t in range(1, n)]
    try:
        _member(body, data, 0, n)
    finally:
        for f in futures:
            f.result()


_CALLBACKS = (_PARALLEL(_gomp_parallel), _QUERY(lambda: _TEAM.tid), _QUERY(lambda: _TEAM.size))


def _install_pool() -> str | None:
    """Register the fallback's symbols with the JIT (once per process)."""
    global _POOL
    try:
        _POOL = ThreadPoolExecutor(max_workers=64, thread_name_prefix="tensorad")
        for name, cb in zip(("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads"), _CALLBACKS):
            llvm.add_symbol(name, ctypes.cast(cb, ctypes.c_void_p).value)
    except (OSError, RuntimeError, AttributeError):  # pragma: no cover - an unusual llvmlite
        return None
    return THREAD_POOL
