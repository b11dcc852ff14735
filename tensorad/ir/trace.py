"""Seeing what the compiler does: stage times to ``logging`` and each stage's text to files.

Stages: ``define``, ``differentiate``, ``optimize``, ``lower``, ``llvm``, ``jit``, and the events
``cache hit`` and ``cache miss``.  ``TENSORAD_LOG=passes`` logs every stage's time on the logger
"tensorad"; ``TENSORAD_DUMP=DIR`` writes each stage's text to DIR (docs/visibility.md); :func:`config`
sets either for a block, never changing what is computed; :func:`collect` gathers a block's stage times."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

LOGGER = logging.getLogger("tensorad")
LOG_KINDS = ("passes",)


@dataclass(frozen=True)
class Config:
    """What to report: ``log`` (a set of kinds: ``"passes"``) and ``dump`` (a folder or None)."""

    log: frozenset[str] = frozenset()
    dump: Path | None = None


_CONFIG: ContextVar[Config | None] = ContextVar("tensorad_config", default=None)
_TIMINGS: ContextVar[list | None] = ContextVar("tensorad_timings", default=None)


def _parse_log(value: str | None, what: str) -> frozenset[str]:
    kinds = frozenset(k for k in re.split(r"[,\s]+", value or "") if k)
    bad = sorted(kinds - set(LOG_KINDS))
    if bad:
        raise ValueError(f"{what}: unknown log kind(s) {', '.join(bad)}; known: {', '.join(LOG_KINDS)}")
    return kinds


def current() -> Config:
    """The configuration in force: the innermost :func:`config`, else the environment."""
    cfg = _CONFIG.get()
    return cfg if cfg is not None else _from_environment(os.environ.get("TENSORAD_LOG"),
                                                         os.environ.get("TENSORAD_DUMP"))


@functools.lru_cache(maxsize=8)
def _from_environment(log: str | None, dump: str | None) -> Config:
    """The configuration the environment's values ask for, parsed once per pair; a bad value always raises."""
    return Config(_parse_log(log, "TENSORAD_LOG"), Path(dump) if dump else None)


@contextmanager
def config(log: str | None = None, dump: str | os.PathLike | None = None) -> Iterator[Config]:
    """``with ta.config(log="passes", dump=DIR):`` -- report the stages of the code inside;
    ``log=None``/``dump=None`` turn that report off inside the block."""
    if log is not None and not isinstance(log, str):
        raise TypeError(f"config: log must be a string such as 'passes', got {type(log).__name__}")
    if dump is not None and not isinstance(dump, (str, os.PathLike)):
        raise TypeError(f"config: dump must be a folder path, got {type(dump).__name__}")
    cfg = Config(_parse_log(log, "config(log=...)"), Path(dump) if dump is not None else None)
    token = _CONFIG.set(cfg)
    try:
        yield cfg
    finally:
        _CONFIG.reset(token)


@contextmanager
def collect() -> Iterator[list[tuple[str, float, str]]]:
    """Gather ``(stage, seconds, detail)`` of every stage run inside the block."""
    found: list[tuple[str, float, str]] = []
    token = _TIMINGS.set(found)
    try:
        yield found
    finally:
        _TIMINGS.reset(token)


def _log(message: str, *args) -> None:
    if not LOGGER.handlers and not logging.getLogger().handlers:
        # asked for on the command line, but the program configured no logging: show it anyway
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        LOGGER.addHandler(handler)
    if LOGGER.level == logging.NOTSET:
        LOGGER.setLevel(logging.INFO)
    LOGGER.info(message, *args)


def record(name: str, seconds: float, detail: str = "") -> None:
    """Report one finished stage (or, with ``seconds == 0``, an event such as a cache hit)."""
    found = _TIMINGS.get()
    if found is not None:
        found.append((name, seconds, detail))
    if "passes" in current().log:
        _log("%-13s %9.3f ms  %s", name, seconds * 1e3, detail)


_UNTIMED = nullcontext()  # (reusable: a stage nobody records costs no generator)


def stage(name: str, detail: str = "") -> AbstractContextManager[None]:
    """Time the block as stage ``name``; reported when it ends (also on an exception)."""
    return _UNTIMED if _TIMINGS.get() is None and not current().log else _timed(name, detail)


@contextmanager
def _timed(name: str, detail: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        record(name, time.perf_counter() - start, detail)


def dumping() -> bool:
    return current().dump is not None


def dump(stem: str, suffix: str, text: str | Callable[[], str]) -> Path | None:
    """Write ``text`` (or what the function returns: computed only when dumping) to
    ``DIR/<stem>.<suffix>``; ``stem`` should identify the object (a name and a content hash)."""
    folder = current().dump
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{re.sub(r'[^A-Za-z0-9_.#+-]', '_', stem)}.{suffix}"
    path.write_text(text() if callable(text) else text)
    return path


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]
