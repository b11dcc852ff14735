"""Schedule choices for one nest: loop order and which loop runs in parallel.

The domain module gives each statement the natural schedule (output axes in order, then for a
reduction ``init`` / the reduction axes / ``store``).  Here we keep that order -- the last output
axis is the innermost output loop, so stores are unit-stride -- and declare the outermost output
axis parallel.  Matmul-like contractions are handed to :mod:`.microkernel` instead (when enabled).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from tensorad.ir.tensor import ComputeOp, Tensor

from .domain import OpDomain


@dataclass(frozen=True)
class Options:
    """Options of ``lower``/``build`` (hashable: they key the caches)."""

    parallel: bool = True
    microkernel: bool | None = None  # None: for contractions of at least MICROKERNEL_MIN flops
    tile: tuple | None = None
    inline: tuple = ()
    materialize: tuple = ()
    fastmath: bool = True
    opt_level: int = 3
    vector_width: int | None = None
    num_threads: int | None = None

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
                ts = (ts,) if isinstance(ts, Tensor) else tuple(ts)
                for t in ts:
                    if not isinstance(t, Tensor):
                        raise TypeError(f"option {k}: expected tensors, got {t!r}")
                kw[k] = ts
        if kw.get("tile") is not None:
            kw["tile"] = tuple(int(x) for x in kw["tile"])
        opt = kw.get("opt_level", 3)
        if opt not in (0, 1, 2, 3):
            raise ValueError(f"opt_level must be 0, 1, 2 or 3, got {opt!r}")
        nt = kw.get("num_threads")
        if nt is not None and (not isinstance(nt, int) or nt < 1):
            raise ValueError(f"num_threads must be a positive int or None, got {nt!r}")
        vw = kw.get("vector_width")
        if vw is not None and vw not in (1, 2, 4, 8, 16, 32, 64):
            raise ValueError(f"vector_width must be a power of two up to 64, got {vw!r}")
        return cls(**kw)

    def for_lowering(self) -> Options:
        """The options that change the loop program (the rest only change compilation)."""
        return Options(self.parallel, self.microkernel if self.fastmath else False, self.tile,
                       self.inline, self.materialize)


def schedule_nest(op: ComputeOp, dom: OpDomain, outputs: list, opts: Options) -> tuple[list, dict]:
    """The statements to scan (schedules possibly rewritten) and nest attributes."""
    attrs: dict = {}
    if op.axes:
        attrs["parallel_dim"] = 0
    return dom.stmts, attrs
