"""Kernels that leave the process: ``kernel.export(path)``, ``ta.load(path)`` and pickling.

**Export** writes three files beside each other (``name`` is the path without ``.so``):

* ``name.so`` -- a shared library linked by the system C compiler (``cc -shared``) from the
  kernel's LLVM IR compiled again as position-independent code, the matrix-product library
  pieces it calls (:mod:`.gemm.library`) and a small C wrapper.  A parallel kernel calls libgomp's
  ``GOMP_parallel`` and is linked with ``-lgomp`` (``libgomp.so.1`` is then a dependency of the
  library; the Python thread-pool fallback of :mod:`.runtime.threads` cannot travel in a file).
* ``name.h`` -- the C interface, one function::

      void name(const float *X, const float *W, float *Y, int num_threads);

  Arguments are plain pointers to row-major (C-contiguous) arrays of exactly the tensors'
  shapes: the inputs in the order given to ``build``, then the outputs; ``num_threads`` <= 1
  runs serially.  Temporaries are allocated (and freed) inside the call.  Output arrays must
  not overlap any other argument.
* ``name.json`` -- what :func:`load_kernel` checks calls against: names, shapes and dtypes of
  the arguments, the entry symbol, the work count and the loop program text.

**Load** (``ta.load("name.so")``) opens the library with ``ctypes`` and returns a
:class:`~.runtime.kernel.Kernel` with the same argument checks as a built one.

**Pickling** keeps the object code the JIT linked and its IR: in a process on the same target
the object code is linked again (as the disk cache does); elsewhere the IR is compiled again
for the host.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import tempfile
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..gemm import library as gemmlib
from ..jit import engine as jit
from ..llvm.bounds_checks import Checks
from ..program import Buffer
from .kernel import Compiled, Kernel

FORMAT = 1
C_TYPES = {"float32": "float", "float64": "double", "int32": "int32_t", "int64": "int64_t",
           "bool": "uint8_t", "float16": "uint16_t", "bfloat16": "uint16_t"}


class ExportError(RuntimeError):
    """A kernel could not be written as a shared library (no C compiler, a link failure)."""


# ---- the state that describes a kernel --------------------------------------------------------

def _specs(kernel: Kernel) -> dict[str, Any]:
    checks = kernel._compiled.checks  # run-time checks (checked=True, gathers): one more argument
    return {"inputs": [[n, list(s), str(d)] for n, s, d in kernel._inputs],
            "outputs": [[n, list(s), str(d)] for n, s, d in kernel._outputs],
            "temps": [[list(s), str(d)] for s, d in kernel._temps],
            "checks": checks.to_json() if checks is not None else None,
            "record": len(checks.new_record(kernel._max_ndim)) if checks is not None else 0}


def kernel_state(kernel: Kernel) -> dict[str, Any]:
    """Everything a pickled kernel needs: argument specs, object code, IR, entry names."""
    c = kernel._compiled
    if c.meta is None or c.obj is None:
        raise TypeError("this kernel cannot be pickled: it was not built by ta.build in this process")
    return {"format": FORMAT, **_specs(kernel), "num_threads": kernel.num_threads,
            "work": kernel.work, "text": kernel.lowered.text, "key": c.key, "meta": c.meta,
            "obj": c.obj, "ir": zlib.compress(c.llvm_ir_unoptimized.encode(), 1),
            "opt_level": c.opt_level, "target": jit.fingerprint(c.target)}


def _kernel(specs: dict, compiled: Compiled, num_threads: int, work: int, text: str) -> Kernel:
    """A :class:`Kernel` over ``compiled`` whose argument checks come from ``specs``."""
    def buffers(items, kind):
        return [Buffer(n, tuple(s), d, kind, None) for n, s, d in items]

    program = SimpleNamespace(inputs=buffers(specs["inputs"], "input"),
                              outputs=buffers(specs["outputs"], "output"),
                              temps=buffers([["temp", s, d] for s, d in specs["temps"]], "temp"))
    lowered = SimpleNamespace(program=program, work=work, text=text, inputs=program.inputs,
                              outputs=program.outputs)
    return Kernel(lowered, compiled, num_threads)


def restore_kernel(state: dict[str, Any]) -> Kernel:
    """Unpickle: link the object code again (same target) or recompile the IR (another one)."""
    from ..build import COMPILED, link  # build imports kernel, which imports this lazily

    if state.get("format") != FORMAT:
        raise ValueError(f"a pickled tensorad kernel of format {state.get('format')!r}; "
                         f"this version reads format {FORMAT}")
    ir_text = zlib.decompress(state["ir"]).decode()
    compiled = COMPILED.get(state["key"])
    if compiled is None:
        obj, host = state["obj"], jit.host()
        if state["target"] != jit.fingerprint(host):  # another CPU or LLVM: compile for this one
            obj = jit.compile_object(ir_text, state["opt_level"], host)
        meta = dict(state["meta"])
        meta["libraries"] = [_retarget(sym, host) for sym in meta["libraries"]]
        compiled = link(state["key"], obj, meta, ir_text, state["opt_level"], host)
    return _kernel(state, compiled, state["num_threads"], state["work"], state["text"])


# ---- export -----------------------------------------------------------------------------------

def _c_name(stem: str) -> str:
    name = re.sub(r"\W", "_", stem)
    return name if name and not name[0].isdigit() else f"k_{name}"


def _header(fn: str, specs: dict) -> str:
    def ctype(dtype: str) -> str:
        if dtype not in C_TYPES:
            raise ExportError(f"export: no C type for dtype {dtype}")
        return C_TYPES[dtype]

    params, docs = [], []
    for kind, items in (("input", specs["inputs"]), ("output", specs["outputs"])):
        for n, s, d in items:
            arg = _c_name(n)
            const = "const " if kind == "input" else ""
            params.append(f"{const}{ctype(d)} *{arg}")
            docs.append(f" *   {arg}: {kind} {n}, {d}{s} ({int(np.prod(s))} elements)")
    guard = f"TENSORAD_{fn.upper()}_H"
    ret = "void"
    if specs["checks"] is not None:  # (see _wrapper)
        ret = "int"
        docs.append(" * Returns 0, or k > 0 when an index was out of range (a gather index under")
        docs.append(" * mode='raise', or any access with checked=True): the call stopped there and the")
        docs.append(" * outputs are incomplete; k - 1 numbers the check in the .json file's \"checks\".")
    return "\n".join([
        f"/* {fn}: a kernel generated by tensorad.",
        " * Every array is row-major (C-contiguous) with exactly the shape below: the inputs in",
        " * the order given to ta.build, then the outputs.  Outputs must not overlap any other",
        " * argument.  num_threads <= 1 runs on the calling thread.",
        *docs, " */",
        f"#ifndef {guard}", f"#define {guard}", "#include <stdint.h>",
        "#ifdef __cplusplus", 'extern "C" {', "#endif",
        f"{ret} {fn}({', '.join(params + ['int num_threads'])});",
        "#ifdef __cplusplus", "}", "#endif", f"#endif /* {guard} */", ""])


def _wrapper(fn: str, main: str, specs: dict, line: int) -> str:
    """The C entry point: the argument array, and each temporary on a cache line of the kernel's
    target (``line``, as :class:`.runtime.kernel.Kernel` places them: threads that split a buffer own
    whole lines; the code itself assumes only its elements' alignment)."""
    n_io = len(specs["inputs"]) + len(specs["outputs"])
    n_all = n_io + len(specs["temps"])
    args = [f"a{k}" for k in range(n_io)]
    record = specs["checks"] is not None  # the violation record of run-time checks, zeroed per call
    params = ", ".join([f"void *{a}" for a in args] + ["int num_threads"])
    lines = ["#include <stdlib.h>", "#include <stdint.h>",
             f"extern void {main}(void **args, int32_t nthreads);",
             f"{'int' if record else 'void'} {fn}({params}) {{",
             f"  void *args[{max(n_all + record, 1)}];"]
    lines += [f"  args[{k}] = {a};" for k, a in enumerate(args)]
    if record:
        lines += [f"  int64_t record[{specs['record']}] = {{0}};", f"  args[{n_all}] = record;"]
    for t, (shape, dtype) in enumerate(specs["temps"]):
        nbytes = int(np.prod(shape)) * np.dtype(dtype if dtype not in ("bfloat16",) else "uint16").itemsize
        lines.append(f"  args[{n_io + t}] = aligned_alloc({line}, {-(-max(nbytes, 1) // line) * line});")
    lines.append(f"  {main}(args, num_threads);")
    lines += [f"  free(args[{n_io + t}]);" for t in range(len(specs["temps"]))]
    if record:
        lines.append("  return (int)record[0];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _retarget(symbol: str, target) -> str:
    """A library symbol's name for ``target`` (the names carry the target they were built for)."""
    piece = gemmlib.parse_symbol(symbol)
    if piece is None:
        raise ValueError(f"unknown library function {symbol}")
    return symbol.replace(piece[3], gemmlib.target_tag(target), 1)


def _library_objects(symbols: list[str], target) -> list[bytes]:
    """Position-independent objects of the matrix-product library pieces the kernel calls."""
    pieces: dict[tuple, None] = {}
    for symbol in symbols:
        piece = gemmlib.parse_symbol(symbol)
        if piece is None:
            raise ExportError(f"export: unknown library function {symbol}")
        dtype, mr, nr, _tag, part = piece
        pieces[(dtype, mr, nr, "core")] = None
        pieces[(dtype, mr, nr, part)] = None
    return [jit.compile_shared_object(gemmlib.piece_ir(*p, target), 1, target) for p in pieces]


def export_kernel(kernel: Kernel, path: str | os.PathLike) -> str:
    """Write ``path`` (a shared library), ``.h`` and ``.json`` beside it; returns the path."""
    path = Path(path)
    if path.suffix != ".so":
        raise ValueError(f"export: the library's name must end in .so, got {str(path)!r}")
    c = kernel._compiled
    if c.meta is None:
        raise TypeError("export: this kernel has no object code of its own (was it loaded?); "
                        "export the kernel ta.build returned")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise ExportError("export: no C compiler found (set CC, or install cc/gcc/clang)")
    fn = _c_name(path.stem)
    specs = _specs(kernel)
    header = _header(fn, specs)
    with tempfile.TemporaryDirectory(prefix="tensorad-export-") as tmp:
        target = c.target or jit.host()
        objs = [jit.compile_shared_object(c.llvm_ir_unoptimized, c.opt_level, target)]
        objs += _library_objects(c.meta["libraries"], target)
        files = []
        for k, obj in enumerate(objs):
            files.append(Path(tmp, f"part{k}.o"))
            files[-1].write_bytes(obj)
        wrapper = Path(tmp, "wrapper.c")
        wrapper.write_text(_wrapper(fn, c.meta["main"], specs, kernel._line))
        out = Path(tmp, "lib.so")
        cmd = [cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(wrapper), *map(str, files), "-lm"]
        if c.uses_gomp:
            cmd.append("-lgomp")
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ExportError(f"export: linking with {' '.join(cmd)} failed:\n{done.stderr.strip()}")
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, path)
    path.with_suffix(".h").write_text(header)
    meta = {"format": FORMAT, "function": fn, "main": c.meta["main"], **specs,
            "num_threads": kernel.num_threads, "work": kernel.work, "text": kernel.lowered.text,
            "uses_gomp": c.uses_gomp, "opt_level": c.opt_level}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1))
    return str(path)


def load_kernel(path: str | os.PathLike) -> Kernel:
    """``ta.load(path)``: the kernel of a library written by ``kernel.export(path)``."""
    path = Path(path)
    side = path.with_suffix(".json")
    if not path.is_file():
        raise FileNotFoundError(f"load: no such library {str(path)!r}")
    if not side.is_file():
        raise FileNotFoundError(f"load: {str(side)!r} is missing (kernel.export writes it beside "
                                f"the library; it holds the argument shapes and dtypes)")
    try:
        meta = json.loads(side.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"load: {str(side)!r} is not a tensorad kernel description: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"load: {str(side)!r} is not a tensorad kernel description of format {FORMAT}")
    lib = ctypes.CDLL(str(path.resolve()))
    address = ctypes.cast(getattr(lib, meta["main"]), ctypes.c_void_p).value
    checks = Checks.from_json(meta["checks"]) if meta.get("checks") is not None else None
    nargs = len(meta["inputs"]) + len(meta["outputs"]) + len(meta["temps"]) + (checks is not None)
    compiled = Compiled(f"file:{path}", address, lambda: _unavailable(path), meta["uses_gomp"], nargs,
                        None, meta["opt_level"], checks=checks)
    kernel = _kernel(meta, compiled, meta["num_threads"], meta["work"], meta["text"])
    kernel._library = lib  # keeps the library loaded as long as the kernel lives
    return kernel


def _unavailable(path: Path) -> str:
    raise AttributeError(f"a kernel loaded from {path} has no LLVM IR (build it to see its IR)")


__all__ = ["ExportError", "export_kernel", "kernel_state", "load_kernel", "restore_kernel"]
