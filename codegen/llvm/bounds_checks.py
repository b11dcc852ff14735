"""Bounds checks for ``build(..., checked=True)``: every load and store of the generated code.

Each access site gets a number.  Before the access the code tests every index against its buffer's extent
with one unsigned comparison; a failure branches to a cold block that records it in an ``int64`` record,
one more buffer argument, and returns from the nest without touching memory:

    record[0] = site + 1      (0: no violation; compare-and-swap, so the first thread's wins)
    record[1 + d] = v_d       (the index values of that access; written only by the winner)

The entry point returns after a nest that left a violation, and :meth:`Checks.raise_for` turns the record
into an ``IndexError`` naming the tensor, the access, the index expressions and their values.  Gather
indices under ``mode="raise"`` are checked the same way in every kernel (:meth:`Checks.emit_gather`)."""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir
import numpy as np

from tensorad.ir.expr import DataIndex, Op
from tensorad.ir.printer import Namer, expr_to_str
from tensorad.ir.rewrite import walk

from ..loops.shared_nests import RenamedNest
from ..program import Fill, Nest, nest_exprs

I64 = ir.IntType(64)


@dataclass(frozen=True)
class Site:
    """One checked access: ``kind`` ``"read"`` or ``"write"``, ``index`` the printed indices; for
    ``kind="gather"``, ``tensor`` and ``shape`` the gathered tensor and axis extent, ``index``
    ``(axis, printed index, tensor read, its ndim)``."""

    tensor: str
    kind: str
    shape: tuple[int, ...]
    index: tuple[str, ...]


class Checks:
    """The access sites of one module and the emission of their tests."""

    def __init__(self, every_access: bool = True, rows: tuple[int, ...] = (), count: int = -1) -> None:
        self.sites: list[Site] = []
        self.namer = Namer()
        self.every_access = every_access  # checked=True; else only gather indices are tested
        # a generic kernel's block (the ``rows`` option): the arguments whose leading axis is its rows,
        # tested against the count of rows at argument ``count`` (the rows a call gives) when it runs
        self.rows, self.count = frozenset(rows), count

    def emit(self, b: ir.IRBuilder, record: ir.Value, name: str, kind: str, shape: tuple[int, ...],
             index_exprs: tuple, values: list[ir.Value], rows: ir.Value | None = None) -> None:
        """Test ``values`` against ``shape`` (its first extent ``rows`` where given, a value read when the
        code runs); on failure record the site and ``ret void``.  Leaves ``b`` in the block where the
        access may proceed."""
        if not shape:
            return
        site = len(self.sites)
        self.sites.append(Site(name, kind, tuple(shape),
                               tuple(expr_to_str(e, self.namer) for e in index_exprs)))
        ok = None
        for d, (v, n) in enumerate(zip(values, shape)):
            c = b.icmp_unsigned("<", v, rows if d == 0 and rows is not None else I64(n))
            ok = c if ok is None else b.and_(ok, c)
        _test(b, record, ok, f"oob{site}", f"inb{site}", site, values)

    def emit_gather(self, b: ir.IRBuilder, record: ir.Value, node, value: ir.Value,
                    position: tuple[str, list[ir.Value]] | None) -> None:
        """Test gather index ``value`` (``i64``) of ``DATA_INDEX`` ``node`` against its extent; on failure
        record it and ``position`` (where it was read from) and return; ``b`` is left where access runs."""
        info = node.arg
        site = len(self.sites)
        src, coords = position if position is not None else ("", [])
        self.sites.append(Site(info.tensor, "gather", (info.extent,),
                               (str(info.axis), expr_to_str(node.src[0], self.namer), src, str(len(coords)))))
        ok = b.icmp_unsigned("<", value, I64(info.extent))
        _test(b, record, ok, f"gather_oob{site}", f"gather_ok{site}", site, [value, *coords])

    def failed(self, b: ir.IRBuilder, record: ir.Value) -> ir.Value:
        """An ``i1``: a violation has been recorded."""
        return b.icmp_unsigned("!=", b.load(record, typ=I64), I64(0))

    @staticmethod
    def new_record(max_ndim: int) -> np.ndarray:
        """A record for a program whose buffers have at most ``max_ndim`` dimensions (sized
        from the program, never from stored metadata)."""
        return np.zeros(2 + max_ndim, np.int64)  # (a gather: its value, then a position)

    def raise_for(self, record: np.ndarray) -> None:
        """Raise ``IndexError`` for a record holding a violation (nothing for a clean one)."""
        code = int(record[0])
        if code == 0:
            return
        if not 0 < code <= len(self.sites):
            raise IndexError(f"out-of-bounds access (site {code - 1}; detected by checked=True)")
        site = self.sites[code - 1]
        if site.kind == "gather":
            raise IndexError(gather_message(site, [int(x) for x in record[1:]]))
        raise IndexError(violation_message(site, [int(x) for x in record[1:]]))

    def to_json(self) -> list:
        return [[s.tensor, s.kind, list(s.shape), list(s.index)] for s in self.sites]

    @classmethod
    def from_json(cls, data: list) -> Checks:
        c = cls(every_access=any(k != "gather" for _, k, _, _ in data))
        c.sites = [Site(str(t), str(k), tuple(int(x) for x in sh), tuple(str(x) for x in ix))
                   for t, k, sh, ix in data]
        return c


def _test(b: ir.IRBuilder, record: ir.Value, ok: ir.Value, fail_name: str, ok_name: str, site: int,
          values: list[ir.Value]) -> None:
    """Branch on ``ok``; where it fails, record ``site`` and ``values`` (the first thread's, by
    compare-and-swap) and ``ret void``.  Leaves ``b`` in the block where the access proceeds."""
    fail, cont = b.append_basic_block(fail_name), b.append_basic_block(ok_name)
    b.cbranch(ok, cont, fail)
    b.position_at_end(fail)
    pair = b.cmpxchg(record, I64(0), I64(site + 1), "monotonic", "monotonic")
    with b.if_then(b.extract_value(pair, 1)):
        for d, v in enumerate(values):
            b.store(v, b.gep(record, [I64(1 + d)], inbounds=True, source_etype=I64))
    b.ret_void()
    b.position_at_end(cont)


def _raise_gather(exprs) -> bool:
    return any(n.op is Op.DATA_INDEX and n.arg.mode == "raise" for e in exprs for n in walk(e))


def has_raise_gather(program) -> bool:
    """Whether some expression of ``program`` holds a gather index under ``mode="raise"``."""
    # (a renamed nest's gathers are its source's: each distinct body is read once)
    bodies = {id(b): b for b in (step.source.body if isinstance(step, RenamedNest) else step.body
                                 for step in program.steps if isinstance(step, Nest))}
    exprs = [e for b in bodies.values() for e in nest_exprs(b)]
    return _raise_gather(exprs + [s.value for s in program.steps if isinstance(s, Fill)])


def has_raise_gather_in(nest: Nest) -> bool:
    """Whether ``nest`` (a renamed nest: its source) holds a gather index under ``mode="raise"``."""
    return _raise_gather(nest_exprs(nest.source.body if isinstance(nest, RenamedNest) else nest.body))


def gather_message(site: Site, values: list[int]) -> str:
    axis, index, src, ndim = site.index
    value, coords = values[0], values[1:1 + int(ndim)]
    where = f"{src}[{', '.join(map(str, coords))}]" if src else "a computed index"
    info = DataIndex(site.shape[0], "raise", site.tensor, int(axis))
    return info.message(value, index, where, "kernel")


def violation_message(site: Site, values: list[int]) -> str:
    vals = values[:len(site.shape)]
    bad = [d for d, (v, n) in enumerate(zip(vals, site.shape)) if not 0 <= v < n]
    where = "; ".join(f"dimension {d} is {vals[d]}, outside [0, {site.shape[d]})" for d in bad)
    return (f"out-of-bounds {site.kind} of tensor {site.tensor} (shape {list(site.shape)}) at index "
            f"[{', '.join(site.index)}] = {vals}: {where} (detected by checked=True)")
