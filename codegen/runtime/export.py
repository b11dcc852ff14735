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
* ``name.json`` -- what :func:`load_kernel` checks the library and calls against: the
  library's size and SHA-256 hash, the target it was compiled for (triple, CPU and the CPU
  features its code may use, :func:`.target.needed_features`), names, shapes and dtypes of the
  arguments, the entry symbol, the work count and the loop program text.

Each file is written to a new temporary file in its directory and renamed into place, so a
process that has the old library loaded keeps its code (the old file is never rewritten), and a
reader sees a whole old or a whole new file.

**Load** (``ta.load("name.so")``) reads the library's bytes once and checks them against the
``.json`` *before anything is mapped*: a truncated, damaged or replaced library (whose mapping
would raise SIGBUS or run changed code) and a library for a CPU with features this host lacks
(whose code would raise SIGILL) are refused with :class:`LoadError`.  The verified bytes are
then written to a private file (a fresh directory of mode 0700, named by the hash) and that
file is opened with ``ctypes``, so what is mapped is exactly what was checked, whatever happens
to the user's file meanwhile, and each load of a changed library maps the new code (the dynamic
loader reuses a loaded library of the same path).  A ``.json`` written before the size, hash and
target were recorded is refused, asking to export the kernel again: without them the library
cannot be checked.  The ``.json`` itself is trusted (it says how the library is called).  The
result is a :class:`~.runtime.kernel.Kernel` with the same argument checks as a built one.

**Pickling** keeps the object code the JIT linked and its IR: in a process on the same target
the object code is linked again (as the disk cache does); elsewhere the IR is compiled again
for the host.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import stat
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
from ..target import Target, host_target, missing_features, needed_features
from .kernel import Compiled, Kernel

FORMAT = 1  # of a pickled kernel's state
LIBRARY_FORMAT = 2  # of an exported kernel's .json (1: before size, hash and target were recorded)
C_TYPES = {"float32": "float", "float64": "double", "int32": "int32_t", "int64": "int64_t",
           "bool": "uint8_t", "float16": "uint16_t", "bfloat16": "uint16_t"}


class ExportError(RuntimeError):
    """A kernel could not be written as a shared library (no C compiler, a link failure)."""


class LoadError(ExportError):
    """``ta.load`` refused a library: it is not the one its ``.json`` describes (truncated,
    damaged, replaced), it was compiled for a CPU with features this host lacks, or its ``.json``
    predates the checks.  The message names the file and what is wrong."""


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
        library = out.read_bytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    _replace(path, library, 0o777)
    _replace(path.with_suffix(".h"), header.encode(), 0o666)
    meta = {"format": LIBRARY_FORMAT, "function": fn, "main": c.meta["main"],
            "library": {"bytes": len(library), "sha256": hashlib.sha256(library).hexdigest()},
            "target": _target_record(target), **specs,
            "num_threads": kernel.num_threads, "work": kernel.work, "text": kernel.lowered.text,
            "uses_gomp": c.uses_gomp, "opt_level": c.opt_level}
    _replace(path.with_suffix(".json"), json.dumps(meta, indent=1).encode(), 0o666)
    return str(path)


def _target_record(target: Target) -> dict[str, Any]:
    """What ``load`` checks the host against: the triple, CPU and features the code may use."""
    return {"spec": target.spec, "triple": target.triple, "cpu": target.cpu,
            "features": needed_features(target)}


def _replace(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a new file beside ``path`` and rename it over ``path`` (atomic on POSIX:
    an existing file, perhaps mapped by a process that loaded it, is never rewritten).  ``mode``
    is masked by the umask, as for a file a compiler or ``open`` creates."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` sets it for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def load_kernel(path: str | os.PathLike) -> Kernel:
    """``ta.load(path)``: the kernel of a library written by ``kernel.export(path)``."""
    path = Path(path)
    side = path.with_suffix(".json")
    if not path.is_file():
        raise FileNotFoundError(f"load: no such library {str(path)!r}")
    if not side.is_file():
        raise FileNotFoundError(f"load: {str(side)!r} is missing (kernel.export writes it beside "
                                f"the library; it holds the argument shapes and dtypes)")
    meta = _description(side)
    _check_target(path, meta["target"])
    library = _verified_bytes(path, side, meta["library"])
    lib = _open_private_copy(path, library, meta["library"]["sha256"])
    try:
        address = ctypes.cast(getattr(lib, meta["main"]), ctypes.c_void_p).value
    except AttributeError:
        raise LoadError(f"load: {str(path)!r} has no entry point {meta['main']} "
                        f"(named in {str(side)!r})") from None
    checks = Checks.from_json(meta["checks"]) if meta.get("checks") is not None else None
    nargs = len(meta["inputs"]) + len(meta["outputs"]) + len(meta["temps"]) + (checks is not None)
    compiled = Compiled(f"file:{path}", address, lambda: _unavailable(path), meta["uses_gomp"], nargs,
                        None, meta["opt_level"], checks=checks)
    kernel = _kernel(meta, compiled, meta["num_threads"], meta["work"], meta["text"])
    kernel._library = lib  # keeps the library loaded as long as the kernel lives
    return kernel


def _description(side: Path) -> dict[str, Any]:
    """The parsed ``.json`` beside a library, with the fields the checks need."""
    try:
        meta = json.loads(side.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"load: {str(side)!r} is not a tensorad kernel description: {exc}") from None
    if isinstance(meta, dict) and meta.get("format") == 1:
        raise LoadError(f"load: {str(side)!r} was written by an older tensorad and does not record "
                        f"the library's size, hash and target, so the library cannot be checked "
                        f"before it is loaded; export the kernel again")
    if not isinstance(meta, dict) or meta.get("format") != LIBRARY_FORMAT:
        raise ValueError(f"load: {str(side)!r} is not a tensorad kernel description of format "
                         f"{LIBRARY_FORMAT}")
    lib, tgt = meta.get("library"), meta.get("target")
    if not (isinstance(lib, dict) and isinstance(lib.get("bytes"), int)
            and isinstance(lib.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", lib["sha256"])
            and isinstance(tgt, dict) and isinstance(tgt.get("triple"), str)
            and isinstance(tgt.get("features"), list)):
        raise LoadError(f"load: {str(side)!r} does not record the library's size, SHA-256 hash and "
                        f"target properly; export the kernel again")
    return meta


def _check_target(path: Path, recorded: dict[str, Any]) -> None:
    """Refuse a library compiled for another architecture or for CPU features this host lacks."""
    host = host_target()
    arch, here = recorded["triple"].split("-")[0], host.triple.split("-")[0]
    if arch != here:
        raise LoadError(f"load: {str(path)!r} was compiled for {recorded['triple']} and cannot run "
                        f"on this {host.triple} machine")
    missing = missing_features([str(f) for f in recorded["features"]])
    if missing:
        raise LoadError(f"load: {str(path)!r} was compiled for target {recorded.get('spec')!r} "
                        f"(CPU {recorded.get('cpu')}), whose code may use CPU features this CPU "
                        f"({host.cpu}) lacks: {', '.join(missing)}; export the kernel again with "
                        f"a target this CPU supports (target='llvm' on this machine, or "
                        f"'llvm -mcpu=NAME' for a CPU both have)")


def _verified_bytes(path: Path, side: Path, recorded: dict[str, Any]) -> bytes:
    """The library's bytes, read once, when their size and SHA-256 hash are those recorded."""
    want = recorded["bytes"]
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LoadError(f"load: {str(path)!r} is not a regular file")
        data = _read_at_most(fd, want + 1) if st.st_size == want else b""
    finally:
        os.close(fd)
    if st.st_size != want or len(data) != want:
        got = st.st_size if st.st_size != want else len(data)
        raise LoadError(f"load: {str(path)!r} is {got} bytes but {str(side)!r} records {want}: the "
                        f"library was truncated, damaged or replaced after it was exported; "
                        f"export the kernel again")
    digest = hashlib.sha256(data).hexdigest()
    if digest != recorded["sha256"]:
        raise LoadError(f"load: the SHA-256 hash of {str(path)!r} ({digest[:16]}...) is not the one "
                        f"{str(side)!r} records ({recorded['sha256'][:16]}...): the library was "
                        f"changed or replaced after it was exported, or the .json belongs to "
                        f"another library; export the kernel again")
    return data


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _open_private_copy(path: Path, data: bytes, digest: str) -> ctypes.CDLL:
    """``data`` (verified bytes of ``path``) written to a new private file and opened.

    The file is ``<fresh directory of mode 0700>/<hash>.so``: no other user can change it between
    the write and the mapping, and the dynamic loader -- which returns an already loaded library
    for a path it has seen -- can only match a library of the same hash, i.e. the same code.  It
    is removed once mapped (the mapping keeps it).  The system temporary directory is tried
    first, then the library's own (where the temporary one does not allow executable mappings)."""
    failures = []
    for parent in (None, path.parent):
        try:
            folder = tempfile.mkdtemp(prefix="tensorad-load-", dir=parent)
        except OSError as exc:
            failures.append(f"{parent or tempfile.gettempdir()}: {exc}")
            continue
        copy = Path(folder, f"{digest}.so")
        try:
            fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o500)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return ctypes.CDLL(str(copy))
        except OSError as exc:
            failures.append(str(exc))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    raise LoadError(f"load: {str(path)!r} could not be loaded: {'; '.join(failures)}")


def _unavailable(path: Path) -> str:
    raise AttributeError(f"a kernel loaded from {path} has no LLVM IR (build it to see its IR)")


__all__ = ["ExportError", "LoadError", "export_kernel", "kernel_state", "load_kernel", "restore_kernel"]
