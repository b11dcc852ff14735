"""The process-wide LLVM JIT: one target machine and one MCJIT engine, created on first use.

``compile_object(ir_text, opt_level)`` parses, optimizes (the new pass manager at
``speed_level=opt_level`` with loop and SLP vectorization) and compiles a module to object
code; ``load_object`` links object code into the engine (fresh, or read back from the disk
cache -- symbols between objects, such as a kernel's calls into the matrix-product library,
are resolved by the engine).  ``optimized_ir`` and ``assembly`` give the IR and machine code
text on demand.

The target is the host CPU with all its features.  LLVM tunes some AVX-512 CPUs to prefer
256-bit vectors; we add ``-prefer-256-bit`` so the vectorizer uses full 512-bit registers
(measured faster for our kernels on AVX-512 machines), unless ``TENSORAD_PREFER_256`` is set.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import llvmlite.binding as llvm

_LOCK = threading.RLock()


@dataclass
class _JitState:
    target_machine: llvm.TargetMachine
    engine: llvm.ExecutionEngine
    triple: str
    cpu: str
    features: str


_STATE: _JitState | None = None


def host_features() -> str:
    feats = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in feats and not os.environ.get("TENSORAD_PREFER_256"):
        feats += ",-prefer-256-bit"
    return feats


def state() -> _JitState:
    """The target machine and engine (created once per process, thread-safe)."""
    global _STATE
    if _STATE is None:
        with _LOCK:
            if _STATE is None:
                llvm.initialize_native_target()
                llvm.initialize_native_asmprinter()
                triple = llvm.get_process_triple()
                cpu = llvm.get_host_cpu_name()
                feats = host_features()
                target = llvm.Target.from_triple(triple)
                tm = target.create_target_machine(cpu=cpu, features=feats, opt=3, codemodel="jitdefault")
                empty = llvm.parse_assembly("")
                empty.triple = triple
                engine = llvm.create_mcjit_compiler(empty, tm)
                _STATE = _JitState(tm, engine, triple, cpu, feats)
    return _STATE


def target_key() -> str:
    s = state()
    return f"{s.triple}|{s.cpu}|{s.features}"


def data_layout() -> str:
    return str(state().target_machine.target_data)


def optimize(mod: llvm.ModuleRef, opt_level: int) -> None:
    s = state()
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pto.loop_unrolling = opt_level >= 2
    pb = llvm.create_pass_builder(s.target_machine, pto)
    pb.getModulePassManager().run(mod, pb)


def llvm_version() -> str:
    return ".".join(str(x) for x in llvm.llvm_version_info)


_FINGERPRINT: str | None = None


def fingerprint() -> str:
    """What besides the program determines the machine code: the target (triple, CPU,
    features), the LLVM version, tensorad's version and the code generator's own source (so an
    edited emitter never meets object code it did not produce)."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            ver = version("tensorad")
        except PackageNotFoundError:  # pragma: no cover - not installed
            ver = "?"
        h = hashlib.sha256()
        here = Path(__file__).parent
        for f in sorted(here.glob("*.py")):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        _FINGERPRINT = "|".join([target_key(), llvm_version(), ver, h.hexdigest()])
    return _FINGERPRINT


def compile_object(ir_text: str, opt_level: int = 3) -> bytes:
    """Parse, verify, optimize and compile a module to relocatable object code."""
    s = state()
    with _LOCK:
        mod = llvm.parse_assembly(ir_text)
        mod.triple = s.triple
        mod.data_layout = str(s.target_machine.target_data)
        mod.verify()
        if opt_level > 0:
            optimize(mod, opt_level)
        return s.target_machine.emit_object(mod)


def compile_shared_object(ir_text: str, opt_level: int = 3) -> bytes:
    """Like :func:`compile_object`, but position-independent code for a shared library (the
    JIT's own objects use the JIT code model and cannot be linked by ``cc -shared``)."""
    s = state()
    with _LOCK:
        target = llvm.Target.from_triple(s.triple)
        tm = target.create_target_machine(cpu=s.cpu, features=s.features, opt=3, reloc="pic",
                                          codemodel="default")
        mod = llvm.parse_assembly(ir_text)
        mod.triple = s.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
        if opt_level > 0:
            optimize(mod, opt_level)
        return tm.emit_object(mod)


_OBJECTS: list = []  # loaded object files stay referenced for the life of the process


def load_object(obj: bytes, names: list[str]) -> dict[str, int]:
    """Link object code into the engine; returns the addresses of ``names``."""
    s = state()
    with _LOCK:
        ref = llvm.ObjectFileRef.from_data(obj)
        s.engine.add_object_file(ref)
        _OBJECTS.append(ref)
        s.engine.finalize_object()
        addrs = {n: s.engine.get_function_address(n) for n in names}
    for n, a in addrs.items():
        if not a:
            raise RuntimeError(f"JIT: function {n} was not found after linking")
    return addrs


def optimized_ir(ir_text: str, opt_level: int) -> str:
    """The IR that ``compile_object`` compiles for ``ir_text`` (recomputed on demand)."""
    s = state()
    with _LOCK:
        mod = llvm.parse_assembly(ir_text)
        mod.triple = s.triple
        mod.data_layout = str(s.target_machine.target_data)
        if opt_level > 0:
            optimize(mod, opt_level)
        return str(mod)


def assembly(optimized: str) -> str:
    """Machine code text of an optimized module (recompiled on demand, not loaded)."""
    s = state()
    with _LOCK:
        mod = llvm.parse_assembly(optimized)
        return s.target_machine.emit_assembly(mod)

