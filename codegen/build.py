"""``ta.build``: key, look up, else lower, emit LLVM IR, compile, link, wrap in a :class:`Kernel`.

Compiled code is cached, keyed by a SHA-256 of :func:`.jit.build_key.describe`'s text taken *before*
lowering (with ``tune=True``, of the loop program's text), in the process
(:data:`.runtime.compiled_cache.COMPILED`) and on disk (:mod:`.jit.disk_cache`: object code, entry names,
the libraries it calls, the key text and signature, compared before linking, and the compressed IR), so a
new process links stored code, running neither lowering nor LLVM.  ``cache=False`` (or
``TENSORAD_NO_DISK_CACHE=1``) skips the disk.  A cached kernel lowers only when ``kernel.lowered`` is
asked for; its code is linked into an engine owned by its :class:`Compiled`."""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from tensorad.ir import trace
from tensorad.ir.collect import fewer_collections
from tensorad.ir.dtype import ALL_DTYPES as DTYPES
from tensorad.ir.locks import process_lock
from tensorad.ir.rewrite import kept_walks
from tensorad.ir.tensor import Tensor

from .gemm import library as gemmlib
from .jit import disk_cache as diskcache
from .jit import isolate
from .jit.build_key import describe, digest
from .jit.engine import compile_kernel, fingerprint
from .jit.object_check import object_is_sound
from .llvm.bounds_checks import Checks, has_raise_gather
from .llvm.emit import ModuleEmitter
from .llvm.ir_loops import finish_ir
from .lower import LoweredFunc, argument_names, check_arguments, lower
from .options import Options
from .runtime import compiled_cache
from .runtime.compiled import Compiled
from .runtime.kernel import Kernel, Signature
from .runtime.linking import link
from .runtime.threads import parallel_runtime
from .target import Target, default_num_threads, host_target, parse_target

_LOCK = process_lock()  # one build compiles or links at a time (a second of one key finds it)
_LIBRARY_SYMBOL = re.compile(r"^declare [^@]*@\"?(tensorad_gemm_\w+)", re.M)


@fewer_collections()
def build(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor = (),
          target: str | Target = "llvm", name: str = "kernel", cache: bool = True, **options: Any) -> Kernel:
    """Compile ``outputs`` as functions of ``inputs`` for ``target`` (:mod:`.target`): ``"llvm"`` the host
    CPU, ``"llvm -mcpu=NAME"``, ``"llvm -mattr=+f,-g"``.  A kernel built for a CPU whose vectors this
    machine lacks compiles (its ``asm`` can be read) but refuses to run.

    The options are :class:`.options.Options`'s; ``cache=False`` skips the on-disk cache.

    A kernel found in the process or on disk (:mod:`.jit.build_key`) is returned without lowering;
    ``kernel.lowered`` lowers on first use."""
    return Prepared(outputs, inputs, target, name, cache, options).kernel()


class Prepared:
    """A build keyed (:mod:`.jit.build_key`), not yet looked up: :attr:`estimate` prices its program by the
    cost model and :meth:`kernel` makes it, lowering it at most once between them.  The estimate is kept
    in the disk cache under the build's key, so a build whose estimate and code are stored lowers nothing
    (a symbolic program prices the blocks it may build, :func:`tensorad.symbolic.staged`)."""

    def __init__(self, outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor, target: Any,
                 name: str, cache: Any, options: dict[str, Any], measured: int = 0) -> None:
        if not isinstance(target, (str, Target)):
            raise ValueError(f"unsupported target {target!r}; tensorad compiles for 'llvm' (the host CPU), "
                             f"'llvm -mcpu=NAME' or 'llvm -mattr=+feature,-feature'")
        if not isinstance(cache, bool):
            raise TypeError(f"option cache must be True or False, got {cache!r}")
        self.outs, self.ins = check_arguments(outputs, inputs, name)
        self.target, self.name, self.cache, self.options, self.measured = \
            parse_target(target), name, cache, options, measured
        self.opts = Options.make({**options, "target": self.target})
        with diskcache.disabled(not cache):  # (the pool's object code, on a process's first build)
            self.gomp = parallel_runtime() is not None and self.opts.parallel
        self.lowered: LoweredFunc | None = None
        with diskcache.disabled(not cache):  # (the compiler's source hash, remembered there)
            key_text = describe(self.outs, self.ins, self.opts, self.target, self.gomp)
            if key_text is None:  # keyed by the loop program instead (see .buildkey)
                key_text = "\n".join([self.lowering().text, repr((self.opts.fastmath, self.opts.opt_level,
                                                                   self.opts.vector_width, self.gomp,
                                                                   self.opts.checked)),
                                      fingerprint(self.target)])
        self.key_text, self.key = key_text, digest(key_text)

    def lowering(self) -> LoweredFunc:
        """The program lowered (once)."""
        if self.lowered is None:
            with diskcache.disabled(not self.cache):  # (tune=True keeps its choices there)
                self.lowered = lower(self.outs, self.ins, name=self.name, target=self.target, **self.options)
        return self.lowered

    @cached_property
    def estimate(self) -> float:
        """The cost model's cycles for the program (the sum of ``LoweredFunc.estimates``), read from the
        disk cache, or lowered and stored there."""
        key = digest(f"estimate\n{self.key_text}")
        with diskcache.disabled(not self.cache):
            stored = diskcache.get(key)
            if stored is not None and len(stored) == 8:
                return struct.unpack("<d", stored)[0]
            cycles = float(sum(self.lowering().estimates.values()))
            diskcache.put(key, struct.pack("<d", cycles))
        return cycles

    @cached_property
    def plan(self) -> str:
        """What lowering decided, free of extents (:attr:`.lower.LoweredFunc.plan`, as JSON), read from the
        disk cache, or lowered and stored there: two builds of one program at other sizes that give the
        same made the same choices."""
        key = digest(f"plan\n{self.key_text}")
        with diskcache.disabled(not self.cache):
            stored = diskcache.get(key)
            if stored is not None:
                return stored.decode()
            plan = json.dumps(self.lowering().plan)
            diskcache.put(key, plan.encode())
        return plan

    def kernel(self) -> Kernel:
        """The kernel: linked in the process, loaded from disk, or compiled from the lowering."""
        key, key_text, name, opts, tgt, gomp = self.key, self.key_text, self.name, self.opts, self.target, \
            self.gomp
        host = host_target()
        refuse = None if tgt.runs_here(host) else (
            f"this kernel was compiled for target {tgt} and cannot run on this CPU ({host}); "
            f"build it with target='llvm' to run it here")
        expect = {"inputs": [[list(t.shape), t.dtype] for t in self.ins],
                  "outputs": [[list(t.shape), t.dtype] for t in self.outs]}
        origin = "memory"
        compiled = compiled_cache.COMPILED.get(key)
        if compiled is None or not _fits(compiled.meta, key_text, expect):
            with _LOCK:
                compiled = compiled_cache.COMPILED.get(key)
                if compiled is None or not _fits(compiled.meta, key_text, expect):
                    with diskcache.disabled(not self.cache):
                        compiled, origin = _load(key, key_text, expect, opts.opt_level, gomp, tgt), "disk"
                        trace.record("cache hit" if compiled else "cache miss", 0.0,
                                     f"{name} (disk)" if compiled else name)
                        if compiled is None:
                            if self.lowered is None:
                                isolate.WORKERS.prestart()  # (a worker's start beside lowering)
                            compiled, origin = _compile(self.lowering(), key, opts, gomp, tgt, key_text), \
                                "compiled"
                    compiled_cache.COMPILED.put(key, compiled)
        if origin == "memory":
            trace.record("cache hit", 0.0, f"{name} (memory)")
        in_names, out_names = argument_names(self.outs, self.ins)
        signature = Signature.of(compiled.meta["signature"], in_names, out_names)
        kernel = Kernel(self.lowered or self.lowering, compiled,
                        (opts.num_threads or default_num_threads()) if gomp else 1, refuse, signature, origin)
        kernel.measured = self.measured
        return kernel


def _fits(meta: dict | None, key_text: str, expect: dict) -> bool:
    """Whether linked code (its entry's metadata) was compiled for exactly this key and call."""
    return meta is not None and meta.get("key") == key_text and all(
        meta["signature"][k] == v for k, v in expect.items())


def _compile(lowered, key: str, opts: Options, gomp: bool, target: Target, key_text: str = "") -> Compiled:
    """LLVM on the lowered program; the entry written records ``key_text`` and the kernel's signature."""
    prog = lowered.program
    name = prog.name
    checks = Checks(opts.checked, opts.rows, len(prog.inputs) - 1) if opts.checked or has_raise_gather(prog) \
        else None
    with trace.stage("llvm", name), kept_walks():  # (emission walks each nest's expressions again)
        emitter = ModuleEmitter(prog, f"k{key[:16]}", fastmath=opts.fastmath, use_gomp=gomp,
                                vector_width=opts.vector_width, checks=checks, target=target)
        module = emitter.emit()
        text = finish_ir(str(module))
        libraries = sorted(set(_LIBRARY_SYMBOL.findall(text)))
        plan = gemmlib.LinkPlan(libraries, target)  # (the pieces to compile: beside the kernel)
        text, obj, pieces = compile_kernel(text, opts.opt_level, target, plan.modules())
    meta = {"main": emitter.main_name, "gomp": gomp, "nargs": emitter.nptr,
            "libraries": libraries,
            "checks": checks.to_json() if checks is not None else None, "key": key_text,
            "signature": {"inputs": [[list(b.shape), b.dtype] for b in prog.inputs],
                          "outputs": [[list(b.shape), b.dtype] for b in prog.outputs],
                          "temps": [[list(b.shape), b.dtype] for b in prog.temps], "work": lowered.work,
                          "row_work": lowered.row_work, "once_work": lowered.once_work}}
    with trace.stage("jit", name):
        compiled = link(key, obj, meta, text, opts.opt_level, target, (plan, pieces))
    if trace.dumping():
        stem = f"{name}-{key[:10]}"
        trace.dump(stem, "ll", text)
        trace.dump(stem, "opt.ll", lambda: compiled.llvm_ir)
        trace.dump(stem, "s", lambda: compiled.asm)
    diskcache.put(key, _pack_entry(meta, obj, text))
    return compiled


def _load(key: str, key_text: str, expect: dict, opt_level: int, gomp: bool, target: Target
          ) -> Compiled | None:
    """The kernel from the disk cache, or ``None`` (absent, unreadable, malformed, or cache off): an entry
    is linked only when its metadata is exactly what this program needs (key, entry names, the shapes and
    dtypes ``expect``, argument count, runtime, known library symbols) and its object code is sound."""
    payload = diskcache.get(key)
    if payload is None:
        return None
    try:
        meta, obj, zsource = _unpack_entry(payload)
    except (ValueError, KeyError, TypeError, struct.error, json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not _meta_is_sound(meta, key, gomp) or not _fits(meta, key_text, expect) or not object_is_sound(obj):
        return None
    return link(key, obj, meta, lambda: zlib.decompress(zsource).decode(), opt_level, target)


_META_KEYS = {"main", "gomp", "nargs", "libraries", "checks", "key", "signature"}


def _meta_is_sound(meta: Any, key: str, gomp: bool) -> bool:
    """The metadata an entry for ``key`` must have (as :func:`_compile` writes it)."""
    prefix = f"k{key[:16]}"
    if not isinstance(meta, dict) or set(meta) != _META_KEYS or not isinstance(meta["key"], str):
        return False
    if meta["checks"] is not None:  # checked mode: the access sites (see .checks)
        try:
            Checks.from_json(meta["checks"])
        except (TypeError, ValueError):
            return False
    nargs = _signature_arguments(meta["signature"])
    if nargs is None:
        return False
    nargs += meta["checks"] is not None  # (the violation record)
    libs = meta["libraries"]
    return (meta["main"] == f"{prefix}_main"
            and meta["gomp"] is gomp
            and type(meta["nargs"]) is int and meta["nargs"] == nargs
            and isinstance(libs, list)
            and all(isinstance(x, str) and gemmlib.parse_symbol(x) is not None for x in libs))


def _signature_arguments(sig: Any) -> int | None:
    """The number of arrays a kernel of signature ``sig`` takes, or ``None`` if ``sig`` is not
    a well-formed signature (shapes of non-negative ints, known dtypes, an int work count)."""
    counts = ("work", "row_work", "once_work")
    if not isinstance(sig, dict) or set(sig) != {"inputs", "outputs", "temps", *counts} \
            or any(type(sig[k]) is not int or sig[k] < 0 for k in counts):
        return None
    parts = [sig[k] for k in ("inputs", "outputs", "temps")]
    specs = all(isinstance(items, list) and all(
        isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)
        and all(type(d) is int and d >= 0 for d in item[0]) and item[1] in DTYPES for item in items)
        for items in parts)
    return sum(map(len, parts)) if specs else None


def _pack_entry(meta: dict, obj: bytes, text: str) -> bytes:
    head = json.dumps(meta, sort_keys=True).encode()
    zsource = zlib.compress(text.encode(), 1)
    return struct.pack("<III", len(head), len(obj), len(zsource)) + head + obj + zsource


def _unpack_entry(payload: bytes) -> tuple[dict, bytes, bytes]:
    nh, no, nz = struct.unpack_from("<III", payload)
    if 12 + nh + no + nz != len(payload):
        raise ValueError("truncated cache entry")
    return json.loads(payload[12:12 + nh]), payload[12 + nh:12 + nh + no], payload[12 + nh + no:]
