"""LLVM's JIT: compiling modules to object code, and linking object code into MCJIT engines.

``compile_object(ir_text, opt_level, target)`` parses, optimizes (the new pass manager with loop and SLP
vectorization) and compiles a module for the target; ``optimized_ir`` and ``assembly`` give the texts on
demand.  A kernel's module is compiled in parts, each at the level its nests ask for (:func:`compile_kernel`;
:func:`.jit.module_split.split` for its optimized IR, export and a pickled kernel's recompile: the same
code).  The pipeline is :mod:`.jit.compile_job`'s, run in compile workers (:mod:`.jit.isolate`).

Object code is linked (fresh, or from the disk cache) in one of two ways:

* :func:`link_object` -- a kernel's code, in an MCJIT engine owned by the :class:`LinkedCode` it returns,
  so a kernel's code lives as long as something refers to it;
* :func:`load_object` -- code every kernel may call (the parallel runtime, the matrix-product library),
  linked for the life of the process into the one resident engine, its global symbols published.

Code for any x86 CPU compiles on any x86 machine; :class:`.runtime.kernel.Kernel` refuses to run code
whose vectors the host lacks."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import llvmlite
import llvmlite.binding as llvm

from tensorad.ir.locks import process_lock

from ..gemm import version as libversion
from ..target import Target, captured_stderr, host_target, new_target_machine
from . import compile_job, isolate
from . import disk_cache as diskcache
from .compile_job import Job, Machine, Pipeline
from .module_split import bundle, merge_duplicates, split, unbundle
from .object_check import defined_symbols, undefined_symbols

_LOCK = process_lock(reentrant=True)


@dataclass
class _JitState:
    engine: llvm.ExecutionEngine  # the resident engine (:func:`load_object`)
    triple: str
    map_limit: int | None = None  # the system's limit on a process's mappings (read once)
    maps_counted: int = 0  # the process's memory mappings when last counted (:func:`_room_for_object`)
    loads_since: int = 0  # objects linked since
    # the kernels' code linked and not freed yet (:func:`link_object`; entries leave with their code)
    linked: weakref.WeakSet = field(default_factory=weakref.WeakSet)
    # the resident engine's object files (:func:`load_object`), kept as long as the engine
    resident: list = field(default_factory=list)


MAP_LIMIT_FILE = "/proc/sys/vm/max_map_count"
MAPS_PER_OBJECT = 4  # memory mappings an object linked into the engine may add (2 seen: code, data)
MAP_HEADROOM = 512  # mappings kept free below the OS limit (Python, NumPy and threads map too)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _count_maps() -> int | None:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def _add_objects(s: _JitState, engine: llvm.ExecutionEngine, parts: list[bytes]) -> list:
    """``parts`` linked into ``engine`` (each after :func:`_room_for_object`), finalized; their objects."""
    refs = []
    for p in parts:
        _room_for_object(s)
        refs.append(llvm.ObjectFileRef.from_data(p))
        engine.add_object_file(refs[-1])
    engine.finalize_object()
    return refs


def _room_for_object(s: _JitState) -> None:
    """Raise before an engine would map past the OS's limit on a process's memory mappings
    (``vm.max_map_count``), where LLVM aborts: counted in ``/proc/self/maps`` at the first link, then when
    the last count plus ``MAPS_PER_OBJECT`` per object linked since nears the limit."""
    limit = s.map_limit
    if limit is None:
        return  # (not Linux: no such limit to watch)
    if s.maps_counted and s.maps_counted + MAPS_PER_OBJECT * (s.loads_since + 1) + MAP_HEADROOM <= limit:
        s.loads_since += 1
        return
    counted = _count_maps()
    if counted is None:
        return
    s.maps_counted, s.loads_since = counted, 1
    if counted + MAPS_PER_OBJECT + MAP_HEADROOM > limit:
        raise RuntimeError(
            f"JIT: this process has {counted} memory mappings, near the system's limit "
            f"(vm.max_map_count = {limit}); linking another kernel could make LLVM abort the "
            f"process.  {len(s.linked)} kernels' code is alive (a kernel's code is freed when "
            "nothing refers to the kernel any more): keep fewer kernels alive at once (reuse a "
            "kernel across calls, drop those no longer needed), or raise vm.max_map_count")


class _Process:
    """What the JIT keeps for the life of the process, each made once: the resident engine's state
    (:func:`state`), a target machine per target named, the source hash (:func:`source_hash`)."""

    def __init__(self) -> None:
        self.state: _JitState | None = None
        self.machines: dict[Machine, llvm.TargetMachine] = {}
        self.source_hash: str | None = None


_PROCESS = _Process()


def target_machine(target: Target) -> llvm.TargetMachine:
    """The target machine of ``target`` (made on first use)."""
    return _machine_of(Machine(target.triple, target.cpu, target.features))


def _machine_of(m: Machine) -> llvm.TargetMachine:
    """This process's target machine of ``m`` (made on first use; a JIT one checked by
    :func:`.target.new_target_machine`)."""
    tm = _PROCESS.machines.get(m)
    if tm is None:
        with _LOCK:
            tm = _PROCESS.machines.get(m) or _PROCESS.machines.setdefault(
                m, m.make() if m.pic else new_target_machine(m.triple, m.cpu, m.features))
    return tm


def host() -> Target:
    return host_target()


def state() -> _JitState:
    """The JIT's state (one per process, thread-safe): the resident engine, kernels' code, mapping count."""
    if _PROCESS.state is None:
        with _LOCK:
            if _PROCESS.state is None:
                h = host()
                tm = target_machine(h)
                empty = llvm.parse_assembly("")
                empty.triple = h.triple
                engine = llvm.create_mcjit_compiler(empty, tm)
                _PROCESS.state = _JitState(engine, h.triple, _read_int(MAP_LIMIT_FILE))
    return _PROCESS.state


def toolchain() -> str:
    """The LLVM and llvmlite versions (part of every cache key of object code)."""
    return f"{'.'.join(str(x) for x in llvm.llvm_version_info)}|llvmlite {llvmlite.__version__}"


def fingerprint(target: Target | None = None) -> str:
    """What besides the program determines the machine code: the target and :func:`source_hash`."""
    return "|".join([(target or host()).key, source_hash()])


def source_hash() -> str:
    """The LLVM and llvmlite versions and the hash of tensorad's source, so that an edited compiler never
    meets object code or a differentiated program (:mod:`tensorad.diffcache`) it did not produce; computed
    once per process and remembered in the disk cache by the files' stamps (:func:`_source_stamp`)."""
    if _PROCESS.source_hash is None:  # (the source stands for tensorad's version: reading the package
        paths = _compiler_sources()  # metadata costs 10 ms, a third of a cached build)
        stamp = _source_stamp(paths)
        key = hashlib.sha256(b"source-stamp\n" + stamp.encode()).hexdigest()
        known = _remembered(key, stamp)
        if known is None:
            h = hashlib.sha256()
            texts: dict[str, bytes] = {}
            for path in paths:
                with open(path, "rb") as f:
                    texts[path] = f.read()
                h.update(os.path.basename(path).encode() + b"\0" + texts[path])
            known = (h.hexdigest(), libversion.version(read=texts.get))  # (the library's key too)
            diskcache.put(key, json.dumps({"stamp": stamp, "source": known[0], "library": known[1]}).encode())
        else:
            libversion.remember(known[1])
        _PROCESS.source_hash = "|".join([toolchain(), known[0]])
    return _PROCESS.source_hash


def _source_stamp(paths: list[str]) -> str:
    """What identifies the contents of ``paths`` without reading them: each file's size, modification and
    change times and inode (no call can set a change time back), and the toolchain."""
    lines = [toolchain()]
    for path in paths:
        st = os.stat(path)
        lines.append(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}")
    return "\n".join(lines)


def _remembered(key: str, stamp: str) -> tuple[str, str] | None:
    """``(source hash, library version)`` recorded under ``key`` for exactly ``stamp``, else ``None``."""
    payload = diskcache.get(key)
    try:
        record = json.loads(payload) if payload is not None else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict) or record.get("stamp") != stamp:
        return None
    source, library = record.get("source"), record.get("library")
    ok = all(isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) for v in (source, library))
    return (source, library) if ok else None


def _compiler_sources() -> list[str]:
    """The Python files of tensorad's packages and subpackages, wherever installed, in a fixed order."""
    import importlib.util

    files = []
    for pkg in ("tensorad", "tensorad.simplify", "tensorad.codegen"):
        module = sys.modules.get(pkg)  # (imported already: build needs them all)
        origin = getattr(module, "__file__", None)
        if origin is None:
            spec = importlib.util.find_spec(pkg)
            origin = spec.origin if spec is not None else None
        if not origin:
            continue
        top = os.path.dirname(origin)
        for folder, subs, names in os.walk(top):
            subs[:] = sorted(s for s in subs if s != "__pycache__")
            rel = os.path.relpath(folder, top)
            files += [(pkg, rel, n, os.path.join(folder, n)) for n in names if n.endswith(".py")]
    return [path for *_, path in sorted(dict.fromkeys(files))]


def ladder(opt_level: int, light: bool = False) -> list[Pipeline]:
    """The pipelines tried in order when LLVM aborts (:mod:`.jit.isolate`): the one asked for, then
    without SLP vectorization and VectorCombine's shuffle folds, then ``-O1``, then ``-O0`` (in this
    process when its worker dies too).  ``-O0`` and the library's light pipeline are their own only rung."""
    if light or opt_level < 1:
        return [Pipeline(opt_level, light=light)]
    if opt_level == 1:
        return [Pipeline(1), Pipeline(0)]
    return [Pipeline(opt_level), Pipeline(opt_level, slp=False), Pipeline(1), Pipeline(0)]


def _compile(modules: Sequence[tuple[str, list[Pipeline]]], target: Target, pic: bool = False,
             ir: bool = False) -> list[tuple[bytes, float]]:
    """Each module (its text and :func:`ladder`) compiled by the first rung whose worker survives (the
    modules side by side, :mod:`.jit.isolate`), with its CPU seconds; a module whose last rung's worker
    dies, or that no worker can take, is compiled here."""
    machine = Machine(target.triple, target.cpu, target.features, pic)
    target_machine(target)  # (LLVM's complaints about the target are raised here, before any job)
    rung, done = [0] * len(modules), [(b"", 0.0)] * len(modules)
    todo = list(range(len(modules)))
    with _LOCK:
        while todo:
            jobs = [Job(modules[i][0], modules[i][1][rung[i]], machine, ir) for i in todo]
            for i, job, (obj, cpu) in zip(todo, jobs, isolate.WORKERS.run(jobs)):
                if obj is isolate.HERE or (obj is None and rung[i] == len(modules[i][1]) - 1):
                    begin = isolate.cpu_seconds()
                    obj = compile_job.run(job, _machine_of)
                    cpu = isolate.cpu_seconds() - begin
                rung[i] += obj is None
                done[i] = (obj, done[i][1] + cpu)
            todo = [i for i in todo if done[i][0] is None]
    return done


def compile_object(ir_text: str, opt_level: int = 3, target: Target | None = None,
                   light: bool = False) -> bytes:
    """Parse, verify, optimize and compile a module to relocatable object code (``light``: the
    :func:`promote` pipeline) in a compile worker: an LLVM abort retries a :func:`ladder` rung."""
    return _compile([(ir_text, ladder(opt_level, light))], target or host())[0][0]


def compile_objects(modules: Sequence[tuple[Callable[[], str], int, bool]],
                    target: Target | None = None) -> list[tuple[bytes, float]]:
    """:func:`compile_object` of several independent modules (each ``(its IR text, made on demand; opt_level;
    light)``) with each one's CPU seconds, as many at a time as there are CPUs."""
    return _compile([(text(), ladder(level, light)) for text, level, light in modules], target or host())


DECLINED = re.compile(r"^remark: .*loop not vectorized.*(?:\n|$)", re.M)
_WIDTH_HINT = '!"llvm.loop.vectorize.width"'
_PREDICATE_HINT = '!"llvm.loop.vectorize.predicate.enable"'  # (always beside a width hint: .masktail)


def compile_kernel(ir_text: str, opt_level: int = 3, target: Target | None = None,
                   beside: Sequence[tuple[Callable[[], str], int, bool]] = ()
                   ) -> tuple[str, bytes, list[tuple[bytes, float]]]:
    """:func:`compile_object` for a kernel whose loops may carry width hints; returns the IR text it compiled
    (:func:`.jit.module_split.merge_duplicates` of ``ir_text``), its object code (:func:`_compile_parts`)
    and that of the modules ``beside`` it with their CPU seconds.  A build must write nothing: where LLVM
    still declines a hinted loop (a remark on stderr), the remark is caught and the module compiled again
    with its width hints renamed out of LLVM's reach.  Anything else written to stderr is passed on."""
    ir_text = merge_duplicates(ir_text)  # (twin internal functions merged)
    target = target or host()
    with _LOCK:
        with captured_stderr() as err:
            obj, others = _compile_parts(ir_text, opt_level, target, beside)
        text = err()
        if _WIDTH_HINT in ir_text and DECLINED.search(text):
            ir_text = ir_text.replace(_WIDTH_HINT, '!"tensorad.declined.vectorize.width"').replace(
                _PREDICATE_HINT, '!"tensorad.declined.vectorize.predicate"')
            with captured_stderr() as err:
                obj, _ = _compile_parts(ir_text, opt_level, target)
            text = DECLINED.sub("", text) + err()
    if text:
        sys.stderr.write(text)
        sys.stderr.flush()
    return ir_text, obj, others


def _compile_parts(ir_text: str, opt_level: int, target: Target,
                   beside: Sequence[tuple[Callable[[], str], int, bool]] = ()
                   ) -> tuple[bytes, list[tuple[bytes, float]]]:
    """The bundled object code of the modules :func:`.jit.module_split.split` cuts a kernel's module into,
    each at its level, a unit read from the disk cache where there (keyed by the fingerprint, level and
    text; a damaged entry is compiled again), and that of the modules ``beside`` it, compiled side by side."""
    parts, units = split(ir_text, opt_level)
    texts = [f"unit\n{fingerprint(target)}\n{level}\n{text}" for text, level in units]
    keys = [(hashlib.sha256(k.encode()).hexdigest(), k) for k in texts]
    found = [diskcache.get_object(h, k) for h, k in keys]
    todo = parts + [u for u, o in zip(units, found) if o is None]
    done = compile_objects([*((lambda t=t: t, level, False) for t, level in todo), *beside], target)
    made = iter(o for o, _ in done[len(parts):len(todo)])
    objs = [o or next(made) for o in found]
    for (h, k), o, f in zip(keys, objs, found):
        if f is None:
            diskcache.put_object(h, k, o)
    return bundle([o for o, _ in done[:len(parts)]] + objs), done[len(todo):]


def compile_shared_objects(parts: list[tuple[str, int]], target: Target | None = None) -> list[bytes]:
    """Like :func:`compile_object` of each module of ``parts`` (its text and level), but
    position-independent code for a shared library (``cc -shared``)."""
    done = _compile([(text, ladder(level)) for text, level in parts], target or host(), pic=True)
    return [obj for obj, _ in done]


def load_object(obj: bytes, names: list[str]) -> dict[str, int]:
    """Link object code (or a :func:`.jit.module_split.bundle`) into the resident engine for the life of
    the process and publish its global symbols to the kernels' engines; returns the addresses of
    ``names``.  For code shared by every kernel; a kernel's own goes through :func:`link_object`."""
    s = state()
    parts = unbundle(obj)
    with _LOCK:
        _check_resolved(parts, lambda n: s.engine.get_function_address(n))
        s.resident += _add_objects(s, s.engine, parts)
        for p in parts:
            for n in defined_symbols(p):
                llvm.add_symbol(n, s.engine.get_global_value_address(n))
        addrs = {n: s.engine.get_function_address(n) for n in names}
    _check_found(addrs)
    return addrs


class Resident:
    """A function of tensorad's own IR, compiled and linked into the resident engine on its first
    :meth:`get`, for the life of the process: its ``main_address`` and ``main``, a callable of ``signature``
    (a ``ctypes.CFUNCTYPE``), so that :func:`.runtime.kernel.put_addresses` may call it as a kernel's main."""

    def __init__(self, ir_text: str, name: str, signature: Any, opt_level: int, light: bool = False) -> None:
        self.made = (ir_text, name, signature, opt_level, light)
        self.main: Any = None
        self.main_address = 0
        self.lock = process_lock()

    def get(self) -> Resident:
        if self.main is None:
            with self.lock:
                if self.main is None:
                    ir_text, name, signature, opt_level, light = self.made
                    obj = compile_object(ir_text, opt_level, light=light)
                    self.main_address = load_object(obj, [name])[name]
                    self.main = signature(self.main_address)
        return self


class LinkedCode:
    """A kernel's object code linked into an MCJIT engine of its own, with its entry ``addresses``, valid
    while this object lives (:class:`.runtime.kernel.Compiled` holds it); collected, the engine is
    disposed of (at interpreter exit the code stays mapped)."""

    __slots__ = ("addresses", "__weakref__")

    def __init__(self, engine: llvm.ExecutionEngine, objects: list, addresses: dict[str, int]) -> None:
        self.addresses = addresses
        release = weakref.finalize(self, _dispose, engine, objects)
        release.atexit = False


def _dispose(engine: llvm.ExecutionEngine, objects: list) -> None:
    """Free an engine and what was linked into it (the object files go after the engine that
    used them).  Takes no lock: engines share nothing that disposing of one touches."""
    engine.close()
    objects.clear()


def link_object(obj: bytes, names: list[str]) -> LinkedCode:
    """Link a kernel's object code (or a :func:`.jit.module_split.bundle`) into a new engine, its
    undefined symbols resolved to the process's (:func:`load_object`); returns the owner of the code, with
    the addresses of ``names``."""
    s = state()
    parts = unbundle(obj)
    with _LOCK:
        _check_resolved(parts)
        engine = _new_engine(s.triple)
        objects = _add_objects(s, engine, parts)
        addrs = {n: engine.get_function_address(n) for n in names}
        code = LinkedCode(engine, objects, addrs)
        s.linked.add(code)
    _check_found(addrs)
    return code


def _new_engine(triple: str) -> llvm.ExecutionEngine:
    """An empty MCJIT engine that only links object code (the triple's generic target machine, no module)."""
    tm = llvm.Target.from_triple(triple).create_target_machine(opt=0, codemodel="jitdefault")
    empty = llvm.parse_assembly("")
    empty.triple = triple
    engine = llvm.create_mcjit_compiler(empty, tm)
    engine.remove_module(empty)
    return engine


def _check_resolved(parts: list[bytes], resident: Callable[[str], int] | None = None) -> None:
    """Raise unless every symbol ``parts`` use is defined by one of them, the process or ``resident`` (the
    resident engine's lookup): the linker would bind it to address 0."""
    siblings = {n for p in parts for n in defined_symbols(p)} if len(parts) > 1 else set()
    missing = [n for p in parts for n in undefined_symbols(p) if n not in siblings
               and not llvm.address_of_symbol(n) and not (resident and resident(n))]
    if missing:
        raise RuntimeError(f"JIT: object code uses symbols nothing defines: {', '.join(missing)}")


def _check_found(addrs: dict[str, int]) -> None:
    for n, a in addrs.items():
        if not a:
            raise RuntimeError(f"JIT: function {n} was not found after linking")


def optimized_ir(ir_text: str, opt_level: int, target: Target | None = None) -> str:
    """The IR that ``compile_object`` compiles for ``ir_text`` (recomputed on demand)."""
    return optimized_parts([(ir_text, opt_level)], target)[0]


def optimized_parts(parts: list[tuple[str, int]], target: Target | None = None) -> list[str]:
    """The optimized IR of each module of ``parts`` (its text and level), as :func:`compile_object`
    optimizes it (recomputed on demand)."""
    done = _compile([(text, ladder(level)) for text, level in parts], target or host(), ir=True)
    return [text.decode() for text, _ in done]


def assembly(optimized: str, target: Target | None = None) -> str:
    """Machine code text of an optimized module (recompiled on demand, not loaded)."""
    mod = llvm.parse_assembly(optimized, context=llvm.create_context())
    with _LOCK:
        return target_machine(target or host()).emit_assembly(mod)
