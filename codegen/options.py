"""Checks of ``build``/``lower`` options: every option's type and range, before any work.

A bad option is a clear error naming the option, what it must be and what it got -- never a
hang or a crash later (issue 8, D11: ``tile=(10**6, 16, 10**6, 10**6)`` unrolled a micro-kernel
of a million rows and never finished compiling).  Checks that need the product's shape and
dtype (the tile's relation to the vector width and registers) are in
:func:`.gemm.contraction.check_tile`; the target facts they read are here.
"""

from __future__ import annotations

import operator
from typing import Any

MAX_THREADS = 1024
# tile entries: MR and NR are register-tile sides (the register check bounds them further),
# KC and MC cache blocks
TILE_LIMITS = (("MR", 256), ("NR", 1024), ("KC", 1 << 20), ("MC", 1 << 20))
PACK_LIMIT = 256 << 20  # bytes of packed A and B blocks, allocated on every call
VECTOR_WIDTHS = (1, 2, 4, 8, 16, 32, 64)


def integer(name: str, value: Any, lo: int, hi: int | None = None, what: str = "", note: str = "") -> int:
    """``value`` as an int in ``[lo, hi]`` (NumPy integers accepted; bools, floats and strings
    are not: ``2.0`` threads or ``True`` as an opt level are mistakes, not numbers)."""
    bad = isinstance(value, bool)
    if not bad:
        try:
            value = operator.index(value)
        except TypeError:
            bad = True
    if bad or value < lo or (hi is not None and value > hi):
        rng = what or (f"an int from {lo} to {hi}" if hi is not None else f"an int >= {lo}")
        raise ValueError(f"{name} must be {rng}, got {value!r}{note}")
    return value


def tile(value: Any) -> tuple:
    """``(MR, NR, KC, MC)``: 1 to 4 positive ints (``None``: that entry's default)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"tile must be a tuple (MR, NR, KC, MC) of positive ints, got {value!r}")
    entries = tuple(value)
    if not 1 <= len(entries) <= 4:
        raise ValueError(f"tile must have 1 to 4 entries (MR, NR, KC, MC), got {value!r}")
    out = []
    for x, (label, hi) in zip(entries, TILE_LIMITS):
        out.append(None if x is None else integer(f"tile {label}", x, 1, hi))
    return tuple(out)


def register_file_bytes(target) -> int:
    """Bytes of ``target``'s vector register file (a :class:`.target.Target`: 32 x 64 with
    AVX-512, 16 x 32 with AVX, 16 x 16 with SSE)."""
    return target.vector_registers * target.vector_bits // 8


def choices(value: Any) -> tuple:
    """``{point: label}`` (or pairs) of strategy choices as sorted pairs of strings."""
    if isinstance(value, dict):
        value = value.items()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"option choices must map strategy points to labels (str -> str), got {value!r}")
    out = []
    for pair in value:
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise TypeError(f"option choices must map strategy points to labels (str -> str), got {pair!r}")
        out.append(pair)
    return tuple(sorted(dict(out).items()))
