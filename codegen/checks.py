"""Bounds checks for ``build(..., checked=True)``: every load and store of the generated code.

Each access site (a load or a store of one tensor at index expressions) gets a number.  Before
the access, the emitted code tests every index against its buffer's extent, ``0 <= v < n``, with
one unsigned comparison (a negative ``v`` is a huge unsigned number).  A failing test branches to
a cold block that records the violation in an ``int64`` record passed as one more buffer
argument, then returns from the nest function without touching memory:

    record[0] = site + 1      (0: no violation; written by compare-and-swap, so with several
                               threads the first violation wins and the others leave it alone)
    record[1 + d] = v_d       (the index values of that access; written only by the winner)

The entry point returns after any nest that left a violation, and :meth:`Checks.raise_for`
turns a nonzero record into an ``IndexError`` naming the tensor, the access, the index
expressions and their values.  Matrix products are lowered to plain loops in checked mode (the
packed micro-kernel's loads are not instrumented), so every access is checked.
"""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir
import numpy as np

from tensorad.ir.printer import Namer, expr_to_str

I64 = ir.IntType(64)


@dataclass(frozen=True)
class Site:
    """One checked access: ``kind`` is ``"read"`` or ``"write"``; ``index`` the printed indices."""

    tensor: str
    kind: str
    shape: tuple[int, ...]
    index: tuple[str, ...]


class Checks:
    """The access sites of one module and the emission of their tests."""

    def __init__(self, namer: Namer | None = None) -> None:
        self.sites: list[Site] = []
        self.namer = namer or Namer()

    @property
    def record_size(self) -> int:
        """Slots of the violation record: the site, then one index value per dimension."""
        return 1 + max((len(s.shape) for s in self.sites), default=0)

    def emit(self, b: ir.IRBuilder, record: ir.Value, name: str, kind: str, shape: tuple[int, ...],
             index_exprs: tuple, values: list[ir.Value]) -> None:
        """Test ``values`` against ``shape``; on failure record the site and return (``ret void``).

        Leaves ``b`` positioned in the block where the access may proceed."""
        if not shape:
            return
        site = len(self.sites)
        self.sites.append(Site(name, kind, tuple(shape),
                               tuple(expr_to_str(e, self.namer) for e in index_exprs)))
        ok = None
        for v, n in zip(values, shape):
            c = b.icmp_unsigned("<", v, I64(n))
            ok = c if ok is None else b.and_(ok, c)
        fail = b.append_basic_block(f"oob{site}")
        cont = b.append_basic_block(f"inb{site}")
        b.cbranch(ok, cont, fail, )
        b.position_at_end(fail)
        pair = b.cmpxchg(record, I64(0), I64(site + 1), "monotonic", "monotonic")
        won = b.extract_value(pair, 1)
        with b.if_then(won):
            for d, v in enumerate(values):
                b.store(v, b.gep(record, [I64(1 + d)], inbounds=True, source_etype=I64))
        b.ret_void()
        b.position_at_end(cont)

    def failed(self, b: ir.IRBuilder, record: ir.Value) -> ir.Value:
        """An ``i1``: a violation has been recorded."""
        return b.icmp_unsigned("!=", b.load(record, typ=I64), I64(0))

    @staticmethod
    def new_record(max_ndim: int) -> np.ndarray:
        """A record for a program whose buffers have at most ``max_ndim`` dimensions (sized
        from the program, never from stored metadata)."""
        return np.zeros(1 + max_ndim, np.int64)

    def raise_for(self, record: np.ndarray) -> None:
        """Raise ``IndexError`` for a record holding a violation (nothing for a clean one)."""
        code = int(record[0])
        if code == 0:
            return
        if not 0 < code <= len(self.sites):
            raise IndexError(f"out-of-bounds access (site {code - 1}; detected by checked=True)")
        raise IndexError(violation_message(self.sites[code - 1], [int(x) for x in record[1:]]))

    def to_json(self) -> list:
        return [[s.tensor, s.kind, list(s.shape), list(s.index)] for s in self.sites]

    @classmethod
    def from_json(cls, data: list) -> Checks:
        c = cls()
        c.sites = [Site(str(t), str(k), tuple(int(x) for x in sh), tuple(str(x) for x in ix))
                   for t, k, sh, ix in data]
        return c


def violation_message(site: Site, values: list[int]) -> str:
    vals = values[:len(site.shape)]
    bad = [d for d, (v, n) in enumerate(zip(vals, site.shape)) if not 0 <= v < n]
    where = "; ".join(f"dimension {d} is {vals[d]}, outside [0, {site.shape[d]})" for d in bad)
    return (f"out-of-bounds {site.kind} of tensor {site.tensor} (shape {list(site.shape)}) at index "
            f"[{', '.join(site.index)}] = {vals}: {where} (detected by checked=True)")
