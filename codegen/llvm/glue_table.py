"""Repeated glue as one loop over a table of pointer positions (a long chain's glue).

A long chain's program repeats a handful of distinct *segments* (the fills before a nest, then the call of
its function) over other buffers.  :func:`runs` finds maximal runs of consecutive segments with one
:func:`signature` (or of a few segments repeated), and the main function runs each run of at least
:data:`MIN_RUN` as one loop over a constant table of each repetition's pointer positions.  A signature
holds everything a segment's code reads besides its pointers; a segment with a parallel step has none."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..program import Fill, Nest

#: runs shorter than this stay straight-line glue (a loop and its table cost more than a few calls)
MIN_RUN = 4
#: the longest repeated unit of segments looked for
MAX_PERIOD = 8


def segments(steps: Sequence) -> list[tuple[int, int]]:
    """``[start, stop)`` of each segment of ``steps``: the fills up to and including a nest, or to the end."""
    out: list[tuple[int, int]] = []
    start = 0
    for k, step in enumerate(steps):
        if isinstance(step, Nest):
            out.append((start, k + 1))
            start = k + 1
    if start < len(steps):
        out.append((start, len(steps)))
    return out


def signature(steps: Sequence, describe: Callable[[object], tuple | None]) -> tuple | None:
    """The signature of one segment: each step's ``describe``; ``None`` if a step cannot run from a table."""
    out = tuple(map(describe, steps))
    return None if any(d is None for d in out) else out


def fill_signature(step: Fill) -> tuple:
    """What a serial fill's code reads besides its pointer (see :meth:`.llvm.emit.ModuleEmitter.fill`)."""
    return ("fill", step.buffer.dtype, tuple(step.buffer.shape), step.value)


def runs(sigs: Sequence[tuple | None], least: int = MIN_RUN, longest: int = MAX_PERIOD
         ) -> list[tuple[int, int, int]]:
    """``(first, stop, period)`` (segment numbers) of each maximal run of at least ``least`` repetitions
    of ``period <= longest`` consecutive signatures, left to right, each the period covering most."""
    out = []
    k, n = 0, len(sigs)
    while k < n:
        best = (0, 0)  # (segments covered, period)
        for p in range(1, min(longest, (n - k) // least) + 1):
            unit = sigs[k:k + p]
            if any(s is None for s in unit):
                break
            m = 1
            while k + (m + 1) * p <= n and sigs[k + m * p:k + (m + 1) * p] == unit:
                m += 1
            if m >= least and m * p > best[0]:
                best = (m * p, p)
        if best[0]:
            out.append((k, k + best[0], best[1]))
            k += best[0]
        else:
            k += 1
    return out
