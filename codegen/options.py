"""The options of ``lower`` and ``build`` (:class:`Options`), and their checks before any work.

A bad option is a clear error naming the option, what it must be and what it got, never a hang or a crash
later.  Checks that need the product's shape and dtype are in :func:`.gemm.contraction.check_tile`; the
target facts they read are here."""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields
from typing import Any

from tensorad.ir.tensor import Tensor

from .target import Target, parse_target

MAX_THREADS = 1024
# tile entries: MR and NR register-tile sides, KC and MC cache blocks
TILE_LIMITS = (("MR", 256), ("NR", 1024), ("KC", 1 << 20), ("MC", 1 << 20))
PACK_LIMIT = 256 << 20  # bytes of packed A and B blocks, allocated on every call
VECTOR_WIDTHS = (1, 2, 4, 8, 16, 32, 64)


def integer(name: str, value: Any, lo: int, hi: int | None = None, what: str = "", note: str = "") -> int:
    """``value`` as an int in ``[lo, hi]`` (NumPy integers accepted; bools, floats, strings are not)."""
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
    return tuple(None if x is None else integer(f"tile {label}", x, 1, hi)
                 for x, (label, hi) in zip(entries, TILE_LIMITS))


def register_file_bytes(target) -> int:
    """Bytes of ``target``'s vector register file (32 x 64 with AVX-512, 16 x 32 with AVX, 16 x 16 SSE)."""
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


@dataclass(frozen=True)
class Options:
    """Options of ``lower``/``build`` (hashable: they key the caches).

    * ``num_threads``: threads of each parallel loop (default: ``OMP_NUM_THREADS`` when set, else the CPUs
      this process may run on; settable as ``kernel.num_threads``); ``parallel=False``: no parallel loop;
      ``parallel_min_work``: nests with fewer innermost-body executions (weighted by :func:`work_weight`) stay
      on one thread.
    * ``fastmath`` (default True): reductions may be reassociated (vectorized, blocked, split in halves:
      :mod:`.gemm.splitk`), multiply-adds fused, and the terms of a sum that share a factor summed as one
      product of their added cofactors (:mod:`.strategies.term_split`: inf where the terms give ``inf - inf``,
      docs/conventions.md); other results at 0, inf, NaN and the ends of the range are IEEE's.  ``False`` adds
      in the loop program's order on every target (so never the micro-kernel).  Either way float32 sums
      accumulate in blocks (:mod:`.loops.cascade`).
    * ``opt_level``: LLVM's 0-3; ``vector_width``: lanes asked of the loop vectorizer where LLVM can take
      them (:mod:`.llvm.vectorizable`; 1 disables it).
    * ``microkernel``: ``None`` uses the packed micro-kernel for contractions of at least
      ``contraction.MICROKERNEL_MIN`` multiply-adds, ``True`` for every one, ``False`` never;
      ``tile = (MR, NR, KC, MC)``: its register tile and cache blocks.
    * ``inline`` / ``materialize``: tensors forced into their readers / into buffers; ``fuse=False`` turns
      epilogue and nest fusion (:mod:`.loops.nest_groups`) off.
    * ``target``: the CPU to generate code for (:class:`.target.Target` or a spec such as
      ``"llvm -mcpu=haswell"``; default the host), which shapes the loop program too.
    * ``checked``: bounds checks on every load and store (:mod:`.llvm.bounds_checks`), raising
      ``IndexError``; contractions then take plain loops.
    * ``tune``: measure the candidate strategies of every op that has several and keep the winners per
      target (:mod:`.tune`); ``choices``: ``{point: label}`` pins strategies (``lower(...).offered`` lists
      them; a label not offered is ignored); ``variants=True`` offers every variant, as ``tune`` does.
    * ``rows``: positions among the inputs, then the outputs, of the arrays whose leading axis is a block's
      rows, run at any count up to that extent (:mod:`.passes.row_bound`, :mod:`.runtime.rows`);
      ``row_sums``: positions among the outputs of the sums over those rows, ``hidden_sums`` of those no
      output of the program (a one-block kernel's, for its own reads); ``finished_sums``: positions among
      the inputs of sums over rows an earlier stage finished, whose epilogues are bookkeeping
      (:func:`.passes.row_bound.finished_epilogues`).
    * ``winograd``: 3x3 sums by Winograd's transforms (:mod:`.passes.winograd`): ``None`` where the cost model
      finds they pay, ``0`` never, ``2`` or ``4`` with that output tile wherever the structure matches."""

    parallel: bool = True
    microkernel: bool | None = None
    tile: tuple | None = None
    inline: tuple = ()
    materialize: tuple = ()
    fastmath: bool = True
    opt_level: int = 3
    vector_width: int | None = None
    num_threads: int | None = None
    fuse: bool = True
    parallel_min_work: int = 1 << 16
    target: Target | None = None
    checked: bool = False
    tune: bool = False
    choices: tuple = ()
    variants: bool = False
    rows: tuple = ()
    row_sums: tuple = ()
    hidden_sums: tuple = ()
    finished_sums: tuple = ()
    winograd: int | None = None

    @classmethod
    def make(cls, options: dict[str, Any]) -> Options:
        names = {f.name for f in fields(cls)}
        for k in options:
            if k not in names:
                raise TypeError(f"unknown option {k!r}; expected one of {', '.join(sorted(names))}")
        kw = dict(options)
        for k in ("inline", "materialize"):
            if k in kw:
                ts = kw[k]
                if isinstance(ts, (str, bytes)) or not (isinstance(ts, Tensor) or hasattr(ts, "__iter__")):
                    raise TypeError(f"option {k}: expected a tensor or a list of tensors, got {ts!r}")
                ts = (ts,) if isinstance(ts, Tensor) else tuple(ts)
                for t in ts:
                    if not isinstance(t, Tensor):
                        raise TypeError(f"option {k}: expected tensors, got {t!r}")
                kw[k] = ts
        # ("no" would silently mean True)
        for k in ("parallel", "fastmath", "fuse", "microkernel", "checked", "tune", "variants"):
            if k in kw and not isinstance(kw[k], bool) and not (k == "microkernel" and kw[k] is None):
                raise TypeError(f"option {k} must be True or False{' or None' * (k == 'microkernel')}, "
                                f"got {kw[k]!r}")
        if "parallel_min_work" in kw:
            kw["parallel_min_work"] = integer("parallel_min_work", kw["parallel_min_work"], 0,
                                                    what="a non-negative int")
        if kw.get("tile") is not None:
            kw["tile"] = tile(kw["tile"])
        if "opt_level" in kw:
            kw["opt_level"] = integer("opt_level", kw["opt_level"], 0, 3, what="0, 1, 2 or 3")
        if kw.get("num_threads") is not None:
            kw["num_threads"] = integer("num_threads", kw["num_threads"], 1, MAX_THREADS,
                                              what="a positive int or None",
                                              note=f" (at most {MAX_THREADS} threads)")
        if kw.get("vector_width") is not None:
            vw = integer("vector_width", kw["vector_width"], 1, 64,
                               what="a power of two up to 64 or None")
            if vw not in VECTOR_WIDTHS:
                raise ValueError(f"vector_width must be a power of two up to 64 or None, got {vw!r}")
            kw["vector_width"] = vw
        if "choices" in kw:
            kw["choices"] = choices(kw["choices"])
        for k in ("rows", "row_sums", "hidden_sums", "finished_sums"):
            if k in kw:
                kw[k] = tuple(integer(k, x, 0, what="argument positions") for x in kw[k])
        wino = kw.get("winograd")
        if wino is not None and (isinstance(wino, bool) or wino not in (0, 2, 4)):
            raise ValueError(f"option winograd must be None, 0, 2 or 4, got {kw['winograd']!r}")
        kw["target"] = parse_target(kw.get("target"))
        return cls(**kw)

    def for_lowering(self) -> Options:
        """The options that change the loop program (the rest only change compilation;
        ``fastmath=False`` keeps a scan's terms in the plain loop's order, :mod:`.strategies.scan`)."""
        plain = not self.fastmath or self.checked
        return Options(self.parallel, False if plain else self.microkernel, self.tile,
                       self.inline, self.materialize, fastmath=self.fastmath, fuse=self.fuse,
                       parallel_min_work=self.parallel_min_work, target=self.target,
                       choices=self.choices, variants=self.variants, rows=self.rows,
                       row_sums=self.row_sums, hidden_sums=self.hidden_sums, finished_sums=self.finished_sums,
                       winograd=self.winograd)
