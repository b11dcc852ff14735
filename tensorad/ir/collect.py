"""Fewer garbage collections while the compiler runs (:func:`fewer_collections`): around
``Jacobian``, ``JacobianRecursive``, ``jvp``, the HVP, ``lower`` and ``build``.

Differentiating, optimizing, lowering and emitting a layer allocates hundreds of thousands of short-lived
containers (expression nodes, tuples, memo entries) while the process holds every module it
imported.  With CPython's default thresholds (a young collection every 700 net allocations,
an older one every 10 of those, a full one every 10 older ones) such a call runs dozens of
collections, and each full one walks every object of the process again -- numpy, islpy,
llvmlite and the whole IR -- to find the few cycles the call made: the Transformer block's
gradient ran 66 collections, one of them full, about 8% of its CPU time.  During the call the
young threshold is :data:`YOUNG` instead (the older generations' thresholds count young
collections, so they run as much less often): the same garbage is found in 7 collections.
A 60-op chain's differentiate, lower and build ran 30 collections, then 2; a 2,000-op chain's
collections took 2.1-2.5 of its 15-18 CPU-s.

Only when to collect changes, never what a program computes.  The setting is the process's
(``gc`` has no other), so calls that overlap -- nested, or in two threads -- share one
raised threshold: the first to enter saves the old one and the last to leave puts it back,
unless the user set another meanwhile; a threshold of 0 (collection off) or one already as
high is left alone.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 20_000  # net allocations between young collections during a call

_LOCK = threading.Lock()
_state: dict = {"depth": 0, "saved": None}  # calls inside; the thresholds to put back (None: none)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the block with the young-generation threshold raised to :data:`YOUNG`."""
    with _LOCK:
        if _state["depth"] == 0:
            saved = gc.get_threshold()
            if 0 < saved[0] < YOUNG:
                gc.set_threshold(YOUNG, *saved[1:])
                _state["saved"] = saved
        _state["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _state["depth"] -= 1
            saved = _state["saved"]
            if _state["depth"] == 0 and saved is not None:
                if gc.get_threshold()[0] == YOUNG:  # (not changed by the user meanwhile)
                    gc.set_threshold(*saved)
                _state["saved"] = None
