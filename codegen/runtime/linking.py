"""Linking a kernel's object code: the library pieces it calls first, then its own code in an engine of
its own (:func:`.jit.engine.link_object`), owned by a :class:`.runtime.compiled.Compiled`."""

from __future__ import annotations

from collections.abc import Callable

from ..gemm import library as gemmlib
from ..jit.engine import link_object
from ..llvm.bounds_checks import Checks
from ..target import Target
from .compiled import Compiled
from .threads import parallel_runtime


def link(key: str, obj: bytes, meta: dict, source: str | Callable[[], str], opt_level: int,
         target: Target, pieces: tuple[gemmlib.LinkPlan, list] | None = None) -> Compiled:
    """Link a kernel's object code (``meta``: its entry as :func:`_compile` writes it) and the library
    pieces it calls (``pieces``: a plan compiled beside the kernel, with their code; else linked or read
    by name).  The result owns the code."""
    if meta["gomp"] and parallel_runtime() is None:  # its GOMP_* symbols, before the engine links
        raise RuntimeError("this kernel runs parallel loops, but no parallel runtime could be set up")
    library: dict[str, str] = {}  # the library pieces this kernel links, and how each was obtained
    if pieces is None:
        gemmlib.link_symbols(meta["libraries"], target, library)
    else:
        pieces[0].link(pieces[1], library)
    code = link_object(obj, [meta["main"]])
    checks = Checks.from_json(meta["checks"]) if meta.get("checks") is not None else None
    return Compiled(key, code.addresses[meta["main"]], source, meta["gomp"], opt_level, target, meta=meta,
                    obj=obj, checks=checks, library=library, code=code)
