"""A persistent cache of compiled object code, shared by processes, that cannot be fooled.

Entries are files named by a SHA-256 key of everything that determines the code, in ``$TENSORAD_CACHE_DIR`` or
``~/.cache/tensorad`` (mode 0700).  ``TENSORAD_NO_DISK_CACHE=1`` turns the cache off, as :func:`disabled` does
in its thread.  A process with no home directory and no cache variable has no cache and warns once.

An entry is ``MAGIC | len(key) | key | sha256(key | payload) | payload``: another key's entry copied over
this file and a damaged or truncated file are both rejected.  Only a regular file owned by the user, no
larger than :data:`MAX_ENTRY_BYTES`, is read, without following a link or blocking.  Whatever is wrong,
:func:`get` answers ``None``: a cache never raises.  Writes go to a temporary file renamed into place; a
cache that cannot be written is skipped."""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import tempfile
import threading
import warnings
from contextlib import contextmanager, suppress
from pathlib import Path

from .object_check import object_is_sound

MAGIC = b"TADC2\n"
MAX_ENTRY_BYTES = 256 << 20  # an entry larger than this is not read (a kernel's is ~10 KB-10 MB)
_LOCAL = threading.local()
_NO_HOME_WARNED = threading.Event()  # set by _no_home once its warning was given (one per process)


def directory() -> Path | None:
    """The cache directory, or ``None`` when there is none (no home directory to put it in)."""
    env = os.environ.get("TENSORAD_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "tensorad"
    try:
        home = Path.home()
    except (RuntimeError, KeyError):  # no HOME and no passwd entry for this user
        return _no_home()
    return home / ".cache" / "tensorad"


def _no_home() -> None:
    if not _NO_HOME_WARNED.is_set():
        _NO_HOME_WARNED.set()
        warnings.warn("tensorad: no home directory (HOME is unset and this user has no passwd "
                      "entry), so compiled kernels are not cached on disk; set TENSORAD_CACHE_DIR "
                      "to a writable directory to cache them", RuntimeWarning, stacklevel=3)
    return None


def enabled() -> bool:
    return False if getattr(_LOCAL, "off", 0) else os.environ.get("TENSORAD_NO_DISK_CACHE", "") in ("", "0")


@contextmanager
def disabled(off: bool = True):
    """Within the block (in this thread), the disk cache is neither read nor written."""
    before = getattr(_LOCAL, "off", 0)
    _LOCAL.off = before + (1 if off else 0)
    try:
        yield
    finally:
        _LOCAL.off = before


def path_of(key: str) -> Path | None:
    """The file of ``key``'s entry, or ``None`` when there is no cache directory."""
    folder = directory()
    return None if folder is None else folder / f"{key}.bin"


def get(key: str) -> bytes | None:
    """The payload stored under ``key``, or ``None``: missing, not a regular file of ours, too
    large, damaged, written for another key -- or the cache is off or has no directory."""
    path = path_of(key) if enabled() else None
    if path is None:
        return None
    data = _read_entry(path)
    return None if data is None else _unpack(key, data)


def put(key: str, payload: bytes) -> None:
    """Store ``payload`` under ``key`` (atomically; errors are ignored)."""
    target = path_of(key) if enabled() else None
    if target is None:
        return
    with suppress(OSError):
        _make_directory(target.parent)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(pack(key, payload))
            os.replace(tmp, target)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
            raise


def get_object(key: str, key_text: str) -> bytes | None:
    """Object code :func:`put_object` stored for exactly ``key_text`` whose code is sound, else ``None``."""
    payload = get(key)
    if payload is None or len(payload) < 4:
        return None
    (n,) = struct.unpack_from("<I", payload)
    k = key_text.encode()
    if n != len(k) or payload[4:4 + n] != k:
        return None
    obj = payload[4 + n:]
    return obj if object_is_sound(obj) else None


def read_at_most(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of the open file ``fd``, read in chunks (never more, whatever the file says)."""
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def put_object(key: str, key_text: str, obj: bytes) -> None:
    """Store object code under ``key`` with the full text of its key before it."""
    k = key_text.encode()
    put(key, struct.pack("<I", len(k)) + k + obj)


def pack(key: str, payload: bytes) -> bytes:
    """The bytes of an entry for ``payload`` under ``key`` (see the module docstring)."""
    k = key.encode()
    return MAGIC + struct.pack("<I", len(k)) + k + hashlib.sha256(k + payload).digest() + payload


def _unpack(key: str, data: bytes) -> bytes | None:
    k = key.encode()
    head = len(MAGIC) + 4
    if len(data) < head or not data.startswith(MAGIC):
        return None
    (n,) = struct.unpack_from("<I", data, len(MAGIC))
    if n != len(k) or data[head:head + n] != k:
        return None  # written for another key (a copied or renamed entry)
    digest, payload = data[head + n:head + n + 32], data[head + n + 32:]
    return None if len(digest) != 32 or hashlib.sha256(k + payload).digest() != digest else payload


def _read_entry(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file owned by this user and not too large."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # missing, a symbolic link (ELOOP), unreadable
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
            return None
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return None
        data = read_at_most(fd, st.st_size + 1)  # one byte more: a file that grew is rejected
        return data if len(data) == st.st_size else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _make_directory(d: Path) -> None:
    """Create the cache directory private to the user (mode 0700); one owned by another is an ``OSError``."""
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.stat(d)
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise PermissionError(f"cache directory {d} belongs to another user")
