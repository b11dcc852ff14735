"""Loops of order-free updates (a max/min winner's value, first index and tie count) run in lanes, so
that LLVM's vectorizer takes them.

Such an update is a chain of compares and selects through every accumulator, no reduction LLVM
recognizes.  Its combiner gives the same bits in any order (:attr:`CommReducer.order_free`), so the
loop over its terms may run as ``n`` independent accumulators, term ``k`` going to lane ``k % n``::

    lane[l] = identity                                  for l < n
    for ko in range(lo, lo + whole, n):                 # whole: the trips, rounded down to n
        for l in range(n): lane[l] = update(lane[l], term(ko + l))      # vectorized
    for l in range(n): acc = combine(acc, lane[l])      # in lane order
    for k in range(lo + whole, hi): acc = update(acc, term(k))

The lanes live in stack arrays of the nest's function; the loop program and its work are unchanged."""

from __future__ import annotations

from contextlib import contextmanager

import llvmlite.ir as ir

from tensorad.ir.rewrite import substitute

from ..program import Assign, Loop, const_trips
from .expr import LLTYPE
from .ir_loops import I64, for_range, loop_metadata
from .vectorizable import vectorizable

MIN_LANES = 16  # LLVM's vectorizer leaves a loop of fewer trips alone


def emit_in_lanes(emitter, em, s: Loop, lanes_of) -> bool:
    """Whether the loop ``s`` was emitted in lanes (the module docstring): an innermost serial loop of
    unit step made only of order-free updates whose constant trips fill two rounds of the lanes;
    ``emitter`` the module emitter (its :meth:`block` emits statements), ``em`` the expression emitter,
    ``lanes_of(dtype)`` a vector register's lanes."""
    if s.kind != "serial" or s.step != 1 or not s.body \
            or not all(isinstance(a, Assign) and a.combiner is not None for a in s.body):
        return False
    n = max(MIN_LANES, lanes_of(s.body[0].targets[0].dtype))
    if (const_trips(s) or 0) < 2 * n:
        return False
    b, updates = em.b, s.body
    lanes = _Lanes(em, [t for a in updates for t in a.targets], n)
    with lanes.each():
        emitter.block(em, tuple(Assign(a.targets, a.combiner.identity, counted=False) for a in updates))
    lo, hi = em.index(s.lo), em.index(s.hi)
    whole = b.add(lo, b.mul(b.sdiv(b.sub(hi, lo), I64(n)), I64(n)))
    with for_range(b, lo, whole, n, name=f"{s.var.name}.o") as ko:
        with lanes.each(s.var, ko):
            emitter.block(em, updates)
    with for_range(b, I64(0), I64(n), name="lane.merge", vectorize=False) as lane:
        for a in updates:
            comb = a.combiner
            em.push()
            em.accs.update({r: lanes.at(t, lane) for r, t in zip(comb.rhs, a.targets)})
            merged = [em.value(substitute(r, dict(zip(comb.lhs, a.targets)))) for r in comb.result]
            for t, v in zip(a.targets, merged):
                b.store(em.narrow(v, LLTYPE[t.dtype]), em.accs[t])
            for r in comb.rhs:
                del em.accs[r]
            em.pop()
    with for_range(b, whole, hi, name=f"{s.var.name}.tail", vectorize=False) as k:  # (the trips left)
        em.env[s.var] = k
        em.push()
        emitter.block(em, updates)
        em.pop()
    del em.env[s.var]
    return True


class _Lanes:
    """The lane arrays of some accumulators, in the entry block of the function being emitted."""

    def __init__(self, em, targets, n: int) -> None:
        self.em, self.n = em, n
        b = em.b
        here = b.block
        b.position_before(b.function.entry_basic_block.terminator)
        self.arrays = {t: b.alloca(ir.ArrayType(LLTYPE[t.dtype], n), name=f"{t.name}.lanes") for t in targets}
        b.position_at_end(here)

    def at(self, t, lane: ir.Value) -> ir.Value:
        return self.em.b.gep(self.arrays[t], [I64(0), lane], inbounds=True)

    @contextmanager
    def each(self, var=None, base: ir.Value | None = None):
        """A loop over the lanes, each accumulator bound to its lane (``var`` to ``base`` + the lane),
        with a width hint where LLVM can take one (:func:`.llvm.vectorizable.vectorizable`)."""
        em, b = self.em, self.em.b
        slots = dict(em.accs)
        pre, body = b.block, b.append_basic_block("lane")
        b.branch(body)
        b.position_at_end(body)
        lane = b.phi(I64, name="lane")
        lane.add_incoming(I64(0), pre)
        em.accs.update({t: self.at(t, lane) for t in self.arrays})
        if var is not None:
            em.env[var] = b.add(base, lane, flags=("nsw",))
        em.push()
        yield lane
        em.pop()
        em.accs.clear()
        em.accs.update(slots)
        em.env.pop(var, None)
        nxt = b.add(lane, I64(1), flags=("nsw",))
        lane.add_incoming(nxt, b.block)
        done = b.append_basic_block("lane.done")
        br = b.cbranch(b.icmp_signed("<", nxt, I64(self.n)), body, done)
        if vectorizable(body, b.block, lane, slots.values()):  # (no trip count: never unrolled nor peeled)
            br.set_metadata("llvm.loop", loop_metadata(b.module, width=self.n, unroll=False))
        b.position_at_end(done)
