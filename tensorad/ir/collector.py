"""Python's cyclic garbage collector paused while the compiler works.

Differentiating, optimizing, lowering and emitting a long program allocate millions of small
objects (expression nodes, memo tables, llvmlite values) that live until the call returns.
Each full collection scans every object the process holds, so a 2,000-op chain spent some 15%
of its compile time in collections that freed almost nothing.  :func:`paused` switches the
collector off for the duration of one compiler entry point and back on when it returns
(reference counting still frees everything acyclic at once); a collector the caller had
switched off stays off, and a nested or concurrent entry leaves the switch to the outermost.
It changes no result: only when cyclic garbage is reclaimed.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


def paused(fn: F) -> F:
    """``fn`` run with the cyclic collector off (when it was on)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return run  # type: ignore[return-value]
