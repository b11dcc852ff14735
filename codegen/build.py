"""``ta.build``: lower, emit LLVM IR, compile to object code (cached), link, wrap in a :class:`Kernel`.

Compiled code is cached at two levels, both keyed by a SHA-256 of the exact program text
(constants are printed with ``repr``), the compilation options and :func:`.jit.fingerprint`
(target triple, CPU, features, LLVM version, tensorad version, the code generator's source):

* in the process: a rebuild of the same program costs a lowering-cache lookup and a dictionary
  lookup (microseconds);
* on disk (:mod:`.diskcache`): a new process links the stored object code instead of running
  LLVM (a few milliseconds plus lowering).  ``cache=False`` (or ``TENSORAD_NO_DISK_CACHE=1``)
  neither reads nor writes it.

A disk entry holds the object code, the entry-point names, the matrix-product libraries it
calls (:mod:`.gemmlib`, loaded first so that the linker finds them) and the emitted IR
(compressed; ``kernel.llvm_ir`` recomputes the optimized IR from it on demand).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
import zlib
from collections.abc import Sequence
from typing import Any

from tensorad.ir.tensor import Tensor

from . import diskcache, gemmlib
from .irloops import finish_ir
from .jit import compile_object, fingerprint, load_object
from .kernel import ARRAY_DATA_OFFSET, Compiled, Kernel
from .llvm_emit import ModuleEmitter
from .lower import lower
from .objcheck import object_is_sound
from .runtime import default_threads, parallel_runtime
from .schedule import Options

_COMPILED: dict[str, Compiled] = {}
_LOCK = threading.Lock()
STATS = {"compiled": 0, "loaded": 0}  # kernels compiled by LLVM / linked from the disk cache
TARGETS = ("llvm",)
_LIBRARY_SYMBOL = re.compile(r"^declare [^@]*@\"?(tensorad_gemm_\w+)", re.M)


def build(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor = (),
          target: str = "llvm", name: str = "kernel", cache: bool = True, **options: Any) -> Kernel:
    """Compile ``outputs`` as functions of ``inputs`` for the host CPU.

    Options (:class:`.schedule.Options`): ``num_threads`` (default: all cores), ``fastmath``
    (default True: reductions may be reassociated -- vectorized sums round differently from a
    sequential loop -- and multiply-adds fused; ``False`` keeps IEEE order), ``opt_level``
    (0-3), ``vector_width``, ``tile`` and ``microkernel`` (the contraction kernel),
    ``parallel``, ``parallel_min_work``, ``inline``, ``materialize``, ``fuse``.
    ``cache=False`` skips the on-disk cache of compiled code (the in-process one still holds).
    """
    if not isinstance(target, str) or target.split()[0] not in TARGETS:
        raise ValueError(f"unsupported target {target!r}; tensorad compiles for 'llvm' (the host CPU)")
    if not isinstance(cache, bool):
        raise TypeError(f"option cache must be True or False, got {cache!r}")
    opts = Options.make(options)
    lowered = lower(outputs, inputs, name=name, **options)
    gomp = parallel_runtime() is not None and opts.parallel
    key_text = "\n".join([lowered.text, repr((opts.fastmath, opts.opt_level, opts.vector_width, gomp,
                                               ARRAY_DATA_OFFSET)), fingerprint()])
    key = hashlib.sha256(key_text.encode()).hexdigest()
    compiled = _COMPILED.get(key)
    if compiled is None:
        with _LOCK:
            compiled = _COMPILED.get(key)
            if compiled is None:
                with diskcache.disabled(not cache):
                    compiled = _load(key, opts.opt_level, len(lowered.program.arguments), gomp) \
                        or _compile(lowered, key, opts, gomp)
                _COMPILED[key] = compiled
    threads = opts.num_threads or default_threads()
    return Kernel(lowered, compiled, threads if gomp else 1)


def _compile(lowered, key: str, opts: Options, gomp: bool) -> Compiled:
    emitter = ModuleEmitter(lowered.program, f"k{key[:16]}", fastmath=opts.fastmath, use_gomp=gomp,
                            vector_width=opts.vector_width, data_offset=ARRAY_DATA_OFFSET)
    module = emitter.emit()
    text = finish_ir(str(module))
    call = emitter.call_name if ARRAY_DATA_OFFSET is not None else None
    obj = compile_object(text, opts.opt_level)
    meta = {"main": emitter.main_name, "call": call, "gomp": gomp, "nargs": len(lowered.program.arguments),
            "libraries": sorted(set(_LIBRARY_SYMBOL.findall(text)))}
    compiled = _link(key, obj, meta, text, opts.opt_level)
    diskcache.put(key, _pack_entry(meta, obj, text))
    STATS["compiled"] += 1
    return compiled


def _link(key: str, obj: bytes, meta: dict, source, opt_level: int) -> Compiled:
    for symbol in meta["libraries"]:
        gemmlib.ensure_symbol(symbol)
    names = [meta["main"]] + ([meta["call"]] if meta["call"] else [])
    addrs = load_object(obj, names)
    return Compiled(key, addrs[meta["main"]], source, meta["gomp"], meta["nargs"],
                    addrs.get(meta["call"]) if meta["call"] else None, opt_level)


def _load(key: str, opt_level: int, nargs: int, gomp: bool) -> Compiled | None:
    """The kernel from the disk cache, or ``None`` (absent, unreadable, malformed, or cache
    off): an entry is linked only when its metadata is exactly what this program needs (entry
    names derived from the key, argument count, runtime, known library symbols) and its object
    code is structurally sound -- anything else is rebuilt (and rewritten) by the caller."""
    payload = diskcache.get(key)
    if payload is None:
        return None
    try:
        meta, obj, zsource = _unpack_entry(payload)
    except (ValueError, KeyError, TypeError, struct.error, json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not _meta_is_sound(meta, key, nargs, gomp) or not object_is_sound(obj):
        return None
    compiled = _link(key, obj, meta, lambda: zlib.decompress(zsource).decode(), opt_level)
    STATS["loaded"] += 1
    return compiled


def _meta_is_sound(meta: Any, key: str, nargs: int, gomp: bool) -> bool:
    """The metadata an entry for ``key`` must have (as :func:`_compile` writes it)."""
    prefix = f"k{key[:16]}"
    if not isinstance(meta, dict) or set(meta) != {"main", "call", "gomp", "nargs", "libraries"}:
        return False
    libs = meta["libraries"]
    return (meta["main"] == f"{prefix}_main"
            and meta["call"] in (None, f"{prefix}_call")
            and (meta["call"] is None) == (ARRAY_DATA_OFFSET is None)
            and meta["gomp"] is gomp
            and type(meta["nargs"]) is int and meta["nargs"] == nargs
            and isinstance(libs, list)
            and all(isinstance(x, str) and gemmlib.parse_symbol(x) is not None for x in libs))


def _pack_entry(meta: dict, obj: bytes, text: str) -> bytes:
    head = json.dumps(meta, sort_keys=True).encode()
    zsource = zlib.compress(text.encode(), 1)
    return struct.pack("<III", len(head), len(obj), len(zsource)) + head + obj + zsource


def _unpack_entry(payload: bytes) -> tuple[dict, bytes, bytes]:
    nh, no, nz = struct.unpack_from("<III", payload)
    if 12 + nh + no + nz != len(payload):
        raise ValueError("truncated cache entry")
    meta = json.loads(payload[12:12 + nh])
    obj = payload[12 + nh:12 + nh + no]
    for k in ("main", "call", "gomp", "nargs", "libraries"):
        meta[k]  # noqa: B018 - KeyError for an entry without it
    return meta, obj, payload[12 + nh + no:]


def cache_size() -> int:
    """Number of compiled modules held by this process."""
    return len(_COMPILED)
