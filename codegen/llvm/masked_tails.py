"""Short innermost loops on a target with masked vector memory operations: one masked tail.

LLVM runs a vectorized loop of ``T`` trips as ``T // VF`` vector iterations and ``T % VF`` scalar ones.
With cheap masked loads and stores that never fault (AVX-512), such a loop is asked to fold its tail into
masked vector iterations (``llvm.loop.vectorize.predicate.enable``) when:

* the target has masked vector memory operations (:attr:`.target.Target.masked_memory`);
* the loop is innermost, of constant trips ``T`` with ``L < T < SHORT_VECTORS * L`` and ``T % L != 0``
  (``L``: the lanes of its narrowest-laned dtype);
* its statements are stores, each moving by one element a trip, and every read moves by one element or
  not at all; and LLVM can take a width hint there (:func:`.llvm.vectorizable.vectorizable`).

Such a loop is also kept from LLVM's unroller when it is :func:`pointwise`, so that SLP does not pack its
unrolled copies; without masked memory such a row (:func:`short_row_width`) is asked for the target's
lanes with a plain remainder, kept rolled too.  A stencil stays unrollable: its rows share loads.

Without masked memory a row of stores of ``L < T < TINY_TRIPS`` trips (LLVM leaves it scalar) whose nest reads
nothing it stores (:func:`overlapped_width`: a Winograd transform's rows of 14 tiles) runs as its whole
vectors, then one vector ending at its end: that one stores again, at the points it shares with the last,
the values stored there already.

A row narrower than the lanes (:func:`narrow_row_width`: ``T`` a power of two, ``NARROW_MIN <= T < L``, a
Winograd transform's 4 tiles on AVX2) is one vector of ``T`` lanes: it is asked for that width, forced
past LLVM's threshold of tiny trip counts, and kept rolled, stencil or not; unrolled, SLP packs its copies
across the loops around it element by element."""

from __future__ import annotations

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import free_vars, walk
from tensorad.poly.linear import var_coefficients

from ..program import Loop, Store
from ..target import Target
from .expr import recombine_digits
from .vectorizable import TINY_TRIPS

SHORT_VECTORS = 4  # a loop of at least this many vectors keeps LLVM's scalar remainder
NARROW_MIN = 4  # the narrowest row asked for a vector of its own (an SSE register of float32)
_LANED = ("float32", "float64", "int32", "int64")


def masked_tail_width(loop: Loop, target: Target, strides_of) -> int | None:
    """The width to ask of LLVM's vectorizer, its tail folded into masked iterations, for the innermost
    ``loop`` on ``target`` (``strides_of``: element strides), or ``None`` (the module docstring's rule)."""
    return short_row_width(loop, target, strides_of) if target.masked_memory else None


def short_row_width(loop: Loop, target: Target, strides_of) -> int | None:
    """:func:`masked_tail_width` on any target: the lanes of a short innermost row of stores."""
    row = _row(loop, target, strides_of)
    if row is None:
        return None
    trips, lanes = row
    return None if not lanes < trips < SHORT_VECTORS * lanes or trips % lanes == 0 else lanes


def overlapped_width(loop: Loop, target: Target, strides_of, read_in_nest) -> int | None:
    """The lanes of a row of stores run as overlapping vectors (module docstring), else ``None``."""
    width = None if target.masked_memory else short_row_width(loop, target, strides_of)
    short = width is not None and int(loop.hi.arg) - int(loop.lo.arg) < TINY_TRIPS
    return width if short and not any(read_in_nest(s.buffer.tensor) for s in loop.body) else None


def narrow_row_width(loop: Loop, target: Target, strides_of) -> int | None:
    """The width to force on an innermost row narrower than ``target``'s lanes: its trips (the module
    docstring's rule), else ``None``."""
    row = _row(loop, target, strides_of)
    return row[0] if row is not None and NARROW_MIN <= row[0] < row[1] and not row[0] & (row[0] - 1) else None


def _row(loop: Loop, target: Target, strides_of) -> tuple[int, int] | None:
    """``(trips, lanes)`` of an innermost ``loop`` of constant trips whose statements are stores moving by
    one element a trip, every read moving by one or none, of laned dtypes (``lanes``: the narrowest's on
    ``target``), else ``None``."""
    if loop.step != 1 or loop.lo.op is not Op.CONST or loop.hi.op is not Op.CONST:
        return None
    if not loop.body or not all(isinstance(s, Store) for s in loop.body):
        return None
    dtypes = set()
    for s in loop.body:
        if _stride(s.index, s.buffer.strides, loop.var) != 1:
            return None
        dtypes.add(s.buffer.dtype)
        for n in walk(s.value):
            if n.op is Op.READ:
                if _stride(n.src, strides_of(n.arg), loop.var) not in (0, 1):
                    return None
                dtypes.add(n.dtype)
    if not dtypes <= set(_LANED):
        return None
    return int(loop.hi.arg) - int(loop.lo.arg), min(target.lanes(d) for d in dtypes)


def _stride(index: tuple[Expr, ...], strides, v: Expr) -> int | None:
    """The element stride along ``v`` of the address ``index`` into an array of ``strides`` (``None``: not
    linear in ``v``), digits of one value taken as that value."""
    total = 0
    for idx, st in recombine_digits(index, strides):
        if v not in free_vars(idx):
            continue
        co = var_coefficients(idx)
        if co is None:
            return None
        total += co.get(v, 0) * st
    return total


def pointwise(loop: Loop, read_in_nest) -> bool:
    """Whether each tensor ``loop``'s statements read is read at one index only (a copy, a mask, an
    elementwise function; not a stencil), and nothing in its nest reads what it stores (``read_in_nest``)."""
    if any(read_in_nest(s.buffer.tensor) for s in loop.body):
        return False
    reads: dict = {}
    for s in loop.body:
        for n in walk(s.value):
            if n.op is Op.READ:
                first = reads.setdefault(n.arg, n.src)
                if len(first) != len(n.src) or any(a is not b for a, b in zip(first, n.src)):
                    return False
    return True
