"""The process's cache of compiled code: ``ta.build`` of a program compiled already is a lookup.

A :class:`CompiledCache` maps a build key (:mod:`.jit.build_key`) to its :class:`.runtime.compiled.Compiled`,
weakly while some kernel uses it (:class:`.jit.engine.LinkedCode`) and strongly for the ``recent`` entries
(a program rebuilt in a loop): it holds the kernels alive plus ``recent``.  :data:`COMPILED` is the
process's cache."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

from .compiled import Compiled

RECENT = 32  # the entries kept beyond their kernels' lives (tens of KiB to a few MiB each)


class CompiledCache:
    """Compiled code by build key: the entries in use (weakly) and the ``recent`` last used."""

    def __init__(self, recent: int = RECENT) -> None:
        if recent < 0:
            raise ValueError(f"recent must be >= 0, got {recent}")
        self.recent = recent
        self._alive: weakref.WeakValueDictionary[str, Compiled] = weakref.WeakValueDictionary()
        self._recent: OrderedDict[str, Compiled] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Compiled | None:
        """The entry of ``key`` (now the most recent), or ``None``."""
        with self._lock:
            compiled = self._alive.get(key)
            if compiled is not None:
                self._keep(key, compiled)
            return compiled

    def put(self, key: str, compiled: Compiled) -> None:
        """Make ``compiled`` the entry of ``key`` (and the most recent)."""
        with self._lock:
            self._alive[key] = compiled
            self._keep(key, compiled)

    def _keep(self, key: str, compiled: Compiled) -> None:
        self._recent[key] = compiled
        self._recent.move_to_end(key)
        while len(self._recent) > self.recent:
            self._recent.popitem(last=False)

    def clear(self) -> None:
        """Forget every entry (kernels keep theirs: their code is freed with them)."""
        with self._lock:
            self._alive.clear()
            self._recent.clear()

    def __len__(self) -> int:
        """The entries held: those in use and the recent ones."""
        return len(self._alive)

    def __contains__(self, key: str) -> bool:
        return key in self._alive


COMPILED = CompiledCache()  # the process's compiled code by build key (bounded: see above)
