"""Kernels that travel as Python objects: a pickled kernel's state, and the kernel made again from it.

A pickled kernel keeps its object code and IR: on the same target the code is linked again, elsewhere the
IR is compiled for the host.  The functions take the kernel class as an argument
(:meth:`.runtime.kernel.Kernel.__reduce__`), so this module never imports the kernel."""

from __future__ import annotations

import hashlib
import json
import zlib
from types import SimpleNamespace
from typing import Any

from ..gemm import library as gemmlib
from ..jit import engine as jit
from ..program import Buffer
from . import compiled_cache
from .compiled import Compiled
from .linking import link

FORMAT = 1  # of a pickled kernel's state


def specs_of(kernel: Any) -> dict[str, Any]:
    """A kernel's arguments and temporaries (names, shapes, dtypes) and its run-time checks."""
    sig, checks = kernel.signature, kernel.compiled.checks  # (checked=True, gathers: one more argument)
    return {"inputs": [[n, list(s), str(d)] for n, s, d in sig.inputs],
            "outputs": [[n, list(s), str(d)] for n, s, d in sig.outputs],
            "temps": [[list(s), str(d)] for s, d in sig.temps],
            "checks": checks.to_json() if checks is not None else None,
            "record": len(checks.new_record(sig.max_ndim)) if checks is not None else 0}


def specs_digest(specs: dict[str, Any]) -> str:
    """The SHA-256 hex digest of the argument specs of :func:`specs_of` (as a ``.json`` reads them back):
    an exported library holds it, so that ``ta.load`` runs its code only on the shapes it was made for
    (and, of a generic kernel's part, in the kernel its ``generic`` description says)."""
    keys = ("inputs", "outputs", "temps", "checks", "record") + ("generic",) * ("generic" in specs)
    return hashlib.sha256(json.dumps([specs.get(k) for k in keys], sort_keys=True).encode()).hexdigest()


def kernel_state(kernel: Any) -> dict[str, Any]:
    """Everything a pickled kernel needs: argument specs, object code, IR, entry names."""
    c = kernel.compiled
    if c.meta is None or c.obj is None:
        raise TypeError("this kernel cannot be pickled: it was not built by ta.build in this process")
    return {"format": FORMAT, **specs_of(kernel), "num_threads": kernel.num_threads,
            "work": kernel.work, "text": kernel.lowered.text, "key": c.key, "meta": c.meta,
            "obj": c.obj, "ir": zlib.compress(c.llvm_ir_unoptimized.encode(), 1),
            "opt_level": c.opt_level, "target": jit.fingerprint(c.target)}


def kernel_from_specs(cls: type, specs: dict, compiled: Compiled, num_threads: int, work: int,
                      text: str, rows: tuple[int, int] = (0, 0)) -> Any:  # (row_work, once_work)
    """A :class:`.runtime.kernel.Kernel` of class ``cls`` over ``compiled``, its checks from ``specs``."""
    def buffers(items, kind):
        return [Buffer(n, tuple(s), d, kind, None) for n, s, d in items]

    program = SimpleNamespace(inputs=buffers(specs["inputs"], "input"),
                              outputs=buffers(specs["outputs"], "output"),
                              temps=buffers([["temp", s, d] for s, d in specs["temps"]], "temp"))
    lowered = SimpleNamespace(program=program, work=work, text=text, inputs=program.inputs,
                              outputs=program.outputs, row_work=rows[0], once_work=rows[1])
    return cls(lowered, compiled, num_threads)


def restore_kernel(cls: type, state: dict[str, Any]) -> Any:
    """Unpickle a kernel of class ``cls``: link the object code again (same target) or recompile the IR."""
    if state.get("format") != FORMAT:
        raise ValueError(f"a pickled tensorad kernel of format {state.get('format')!r}; "
                         f"this version reads format {FORMAT}")
    ir_text = zlib.decompress(state["ir"]).decode()
    compiled = compiled_cache.COMPILED.get(state["key"])
    if compiled is None:
        obj, host = state["obj"], jit.host()
        if state["target"] != jit.fingerprint(host):  # another CPU or LLVM: compile for this one
            ir_text, obj, _ = jit.compile_kernel(ir_text, state["opt_level"], host)
        meta = dict(state["meta"])
        meta["libraries"] = [retarget(sym, host) for sym in meta["libraries"]]
        compiled = link(state["key"], obj, meta, ir_text, state["opt_level"], host)
    return kernel_from_specs(cls, state, compiled, state["num_threads"], state["work"], state["text"],
                             tuple(state["meta"]["signature"].get(k, 0) for k in ("row_work", "once_work")))


def retarget(symbol: str, target) -> str:
    """A library symbol's name for ``target`` (the names carry the target they were built for)."""
    piece = gemmlib.parse_symbol(symbol)
    if piece is None:
        raise ValueError(f"unknown library function {symbol}")
    return symbol.replace(piece[3], gemmlib.target_tag(target), 1)
