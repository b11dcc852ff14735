"""``ta.load(path)``: a kernel from a library written by ``kernel.export(path)`` (:mod:`.runtime.export`),
checked before it is mapped.

The library's bytes are read once and checked against the trusted ``.json``: a truncated, damaged or
replaced library, one for CPU features this host lacks, and a ``.json`` without size, hash and target are
refused with :class:`LoadError`.  The checked bytes are written to a private file and opened with
``ctypes``, so what is mapped is what was checked.  The result is a :class:`~.runtime.kernel.Kernel` with
a built one's argument checks."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tensorad.lang import size_var
from tensorad.lang.sizes import RowKind

from ..jit.disk_cache import read_at_most
from ..llvm.bounds_checks import Checks
from ..target import host_target, missing_features
from .compiled import Compiled
from .export import GENERIC_FORMAT, LIBRARY_FORMAT, LoadError
from .kernel import Kernel
from .pickling import kernel_from_specs, specs_digest
from .rows import RowsKernel


def load_kernel(path: str | os.PathLike) -> Kernel | RowsKernel:
    """``ta.load(path)``: the kernel of a library written by ``kernel.export(path)``; of a part of a
    generic kernel's, the generic kernel (:func:`_generic`)."""
    kernel, meta = _load_one(Path(path))
    return kernel if meta["format"] == LIBRARY_FORMAT else _generic(Path(path), meta["generic"])


def _generic(path: Path, description: Any) -> RowsKernel:
    """The generic kernel of ``description`` (:meth:`RowsKernel.description`, which the digest of each
    part's library covers), each part loaded from the library it names beside ``path`` and checked to
    be of that kernel: its description the same, its arrays those of its rows."""
    try:
        name, least, most, unit = description["size"]
        size = size_var(name, min=least, max=most, multiple_of=unit)
        kinds, sized = [RowKind(k) for k in description["kinds"]], [bool(on) for on in description["sized"]]
        parts = [(int(rows), str(stem), bool(bounded), (int(row), int(once)))
                 for rows, stem, bounded, row, once in description["parts"]]
        names, why = [str(n) for n in description["names"]], str(description["why"])
    except (TypeError, ValueError, KeyError) as exc:
        raise LoadError(f"load: {str(path)!r} does not describe a generic kernel properly ({exc}); "
                        f"export the kernel again") from None
    loaded, arrays = [], set()
    for rows, stem, _, work in parts:
        if Path(stem).name != stem or not stem:
            raise LoadError(f"load: {str(path)!r} names a part {stem!r} outside its folder")
        kernel, meta = _load_one(path.with_name(f"{stem}.so"), work)
        sig = kernel.signature
        if meta.get("generic") != description or len(sig.inputs) != len(sized) + 1 \
                or len(sig.outputs) != len(kinds) or sig.inputs[-1][1:] != ((2,), np.dtype("int64")):
            raise LoadError(f"load: {stem}.so beside {str(path)!r} is not a part of the generic kernel "
                            f"{str(path)!r} describes; export the kernel again")
        rowed = [*sized, *(k is RowKind.ROWS for k in kinds)]
        if any(on and s[:1] != (rows,) for on, (_, s, _) in zip(rowed, [*sig.inputs[:-1], *sig.outputs])):
            raise LoadError(f"load: the arrays of {stem}.so are not of its {rows} rows; export the kernel "
                            f"again")
        arrays.add(tuple((n, s[1:] if on else s, str(d))
                         for on, (n, s, d) in zip(rowed, [*sig.inputs[:-1], *sig.outputs])))
        loaded.append((rows, kernel))
    if len(arrays) != 1 or [r for r, _ in loaded] != sorted({r for r, _ in loaded}, reverse=True):
        raise LoadError(f"load: the parts {str(path)!r} describes disagree on their arrays or rows; "
                        f"export the kernel again")
    return RowsKernel(size, loaded, sized, kinds, names, [b for _, _, b, _ in parts], why)


def _load_one(path: Path, rows: tuple[int, int] = (0, 0)) -> tuple[Kernel, dict[str, Any]]:
    """The kernel of one library and its checked description; ``rows``: its work per row and once."""
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
    _check_specs(path, side, lib, meta)
    checks = Checks.from_json(meta["checks"]) if meta.get("checks") is not None else None
    compiled = Compiled(f"file:{path}", address, lambda: _unavailable(path), meta["uses_gomp"],
                        meta["opt_level"], checks=checks, code=lib)  # (the library stays loaded with it)
    kernel = kernel_from_specs(Kernel, meta, compiled, meta["num_threads"], meta["work"], meta["text"], rows)
    return kernel, meta


def _description(side: Path) -> dict[str, Any]:
    """The parsed ``.json`` beside a library, with the fields the checks need."""
    try:
        meta = json.loads(side.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:  # not text, or not JSON
        raise ValueError(f"load: {str(side)!r} is not a tensorad kernel description: {exc}") from None
    if isinstance(meta, dict) and meta.get("format") == 1:
        raise LoadError(f"load: {str(side)!r} was written by an older tensorad and does not record "
                        f"the library's size, hash and target, so the library cannot be checked "
                        f"before it is loaded; export the kernel again")
    if not isinstance(meta, dict) or meta.get("format") not in (LIBRARY_FORMAT, GENERIC_FORMAT) \
            or (meta["format"] == GENERIC_FORMAT and not isinstance(meta.get("generic"), dict)):
        raise ValueError(f"load: {str(side)!r} is not a tensorad kernel description of format "
                         f"{LIBRARY_FORMAT} or {GENERIC_FORMAT}")
    lib, tgt = meta.get("library"), meta.get("target")
    if not (isinstance(meta.get("main"), str) and isinstance(lib, dict) and isinstance(lib.get("bytes"), int)
            and isinstance(lib.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", lib["sha256"])
            and isinstance(tgt, dict) and isinstance(tgt.get("triple"), str)
            and isinstance(tgt.get("features"), list)):
        raise LoadError(f"load: {str(side)!r} does not record the library's entry point, size, SHA-256 "
                        f"hash and target properly; export the kernel again")
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
        data = read_at_most(fd, want + 1) if st.st_size == want else b""
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


def _open_private_copy(path: Path, data: bytes, digest: str) -> ctypes.CDLL:
    """``data`` (the verified bytes of ``path``) written to ``<fresh 0700 directory>/<hash>.so`` and
    opened, so that what is mapped is what was checked (a loaded path can only match the same code), then
    removed; in the system temporary directory, else the library's own."""
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


def _check_specs(path: Path, side: Path, lib: ctypes.CDLL, meta: dict[str, Any]) -> None:
    """Refuse a ``.json`` whose argument shapes, dtypes or checks are not those the library's code was
    made for (the digest it holds): run on arrays of other sizes, the code would write past them."""
    try:
        held = (ctypes.c_char * 65).in_dll(lib, f"{meta['function']}_specs").value.decode()
    except (AttributeError, ValueError, TypeError):
        raise LoadError(f"load: {str(path)!r} holds no digest of its argument specs (an older tensorad "
                        f"exported it); export the kernel again") from None
    if held != specs_digest(meta):
        raise LoadError(f"load: the argument shapes, dtypes and checks that {str(side)!r} records are "
                        f"not those {str(path)!r} was compiled for: the .json was changed or damaged "
                        f"after it was exported; export the kernel again")


def _unavailable(path: Path) -> str:
    raise AttributeError(f"a kernel loaded from {path} has no LLVM IR (build it to see its IR)")
