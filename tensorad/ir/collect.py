"""Fewer garbage collections while the compiler runs (:func:`fewer_collections`): around ``Jacobian``,
``JacobianRecursive``, ``jvp``, the HVP, ``lower`` and ``build`` the young threshold is :data:`YOUNG`
(only when to collect changes, never what is computed).  Overlapping calls share one raised threshold:
the first to enter saves the old one and the last to leave restores it, unless the user set another
meanwhile; a threshold of 0 or one already as high is left alone."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from .locks import process_lock

YOUNG = 20_000  # net allocations between young collections during a call

_LOCK = process_lock()
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
