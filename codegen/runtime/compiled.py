"""Compiled code a kernel runs: the entry points of object code linked into the JIT, and the IR
it came from (the optimized IR and the assembly are recomputed from it on demand)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..jit.engine import assembly, optimized_parts
from ..jit.module_split import modules
from ..llvm.bounds_checks import Checks

_MAIN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)


@dataclass
class Compiled:
    """Object code linked into the JIT: entry addresses and their IR.  ``code`` (a
    :class:`.jit.engine.LinkedCode`) is freed with this object; ``source`` is the emitted IR text or a
    function returning it, from which the optimized IR and assembly are recomputed on demand."""

    key: str
    main_address: int
    source: str | Callable[[], str]
    uses_gomp: bool
    opt_level: int = 3
    target: Any = None  # the :class:`.target.Target` it was compiled for (None: the host)
    meta: dict | None = None  # entry-point names and libraries (build.py), for export/pickle
    obj: bytes | None = None  # the object code that was linked, for pickling
    checks: Checks | None = None  # checked mode: the access sites (the record is the last argument)
    # the library pieces linked for this code (gemmlib.piece_name): "compiled", "disk" or "process"
    library: dict[str, str] = field(default_factory=dict)
    code: Any = None  # the owner of the linked code (None: code that lives as long as the process)

    def __post_init__(self) -> None:
        self.main = _MAIN(self.main_address)

    @property
    def llvm_ir_unoptimized(self) -> str:
        if callable(self.source):
            self.source = self.source()
        return self.source

    @cached_property
    def optimized(self) -> list[str]:
        """The optimized IR of each part of the module at its level (:func:`.jit.module_split.modules`)."""
        return optimized_parts(modules(self.llvm_ir_unoptimized, self.opt_level), self.target)

    @property
    def llvm_ir(self) -> str:
        return "\n".join(self.optimized)

    @cached_property
    def asm(self) -> str:
        return "\n".join(assembly(part, self.target) for part in self.optimized)
