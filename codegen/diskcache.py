"""A persistent cache of compiled object code, shared by processes.

Entries are files named by a SHA-256 key (the caller hashes everything that determines the
code: the program text, options, target triple, CPU name and features, LLVM version and the
code generator's own source -- :func:`.jit.fingerprint`).  The directory is
``$TENSORAD_CACHE_DIR`` or ``~/.cache/tensorad``; ``TENSORAD_NO_DISK_CACHE=1`` turns the
cache off, and so does :func:`disabled` (``ta.build(..., cache=False)``) in its thread.

An entry is ``MAGIC | sha256(payload) | payload``.  Writes go to a temporary file in the same
directory and are renamed into place (atomic on POSIX: a reader sees a whole entry or none); a
reader that finds a bad magic or checksum ignores the entry (it is rebuilt and rewritten).  A
cache that cannot be written (read-only home, full disk) is silently skipped: it only saves
time.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

MAGIC = b"TADC1\n"
_LOCAL = threading.local()


def directory() -> Path:
    env = os.environ.get("TENSORAD_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tensorad"


def enabled() -> bool:
    if getattr(_LOCAL, "off", 0):
        return False
    return os.environ.get("TENSORAD_NO_DISK_CACHE", "") in ("", "0")


@contextmanager
def disabled(off: bool = True):
    """Within the block (in this thread), the disk cache is neither read nor written."""
    before = getattr(_LOCAL, "off", 0)
    _LOCAL.off = before + (1 if off else 0)
    try:
        yield
    finally:
        _LOCAL.off = before


def path_of(key: str) -> Path:
    return directory() / f"{key}.bin"


def get(key: str) -> bytes | None:
    """The payload stored under ``key``, or ``None`` (missing, corrupted, or cache off)."""
    if not enabled():
        return None
    try:
        data = path_of(key).read_bytes()
    except OSError:
        return None
    head = len(MAGIC) + 32
    if len(data) < head or not data.startswith(MAGIC):
        return None
    payload = data[head:]
    if hashlib.sha256(payload).digest() != data[len(MAGIC):head]:
        return None
    return payload


def put(key: str, payload: bytes) -> None:
    """Store ``payload`` under ``key`` (atomically; errors are ignored)."""
    if not enabled():
        return
    target = path_of(key)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        pass
