"""An innermost loop of order-free updates (a max/min winner's value, first index and tie count) combined
in lanes, so that LLVM's vectorizer takes it.

Such an update is a chain of compares and selects through every accumulator, no reduction LLVM
recognizes.  Its combiner gives the same bits in any order (:attr:`CommReducer.order_free`), so the loop
runs as ``lanes`` independent accumulators, each term going to lane ``k % lanes``::

    lane[l] = identity                                   for l < lanes
    for ko in range(lo, lo + whole, lanes):              # whole: the trips, rounded down to lanes
        for l in range(lanes): lane[l] = update(lane[l], term(ko + l))       # vectorized
    for l in range(lanes): acc = combine(acc, lane[l])   # in lane order
    for k in range(lo + whole, hi): acc = update(acc, term(k))

The lanes live in stack arrays of the nest's function; the loop program and its work are unchanged."""

from __future__ import annotations

import llvmlite.ir as ir

from tensorad.ir.rewrite import substitute

from ..program import Assign, Loop, const_trips
from .expr import LLTYPE
from .ir_loops import I64, for_range, loop_metadata

MIN_LANES = 16  # LLVM's vectorizer leaves a loop of fewer trips alone


def lane_updates(s: Loop) -> tuple[Assign, ...] | None:
    """The order-free updates of an innermost loop of unit step made only of them, else ``None``."""
    if s.step != 1 or not s.body or not all(isinstance(a, Assign) and a.combiner is not None for a in s.body):
        return None
    return s.body


def lane_count(s: Loop, lanes: int) -> int | None:
    """The lanes for ``s`` (``lanes``: a vector register's, at least :data:`MIN_LANES`), or ``None`` when
    its constant trips do not fill two rounds of them."""
    n = max(MIN_LANES, lanes)
    trips = const_trips(s)
    return n if trips is not None and trips >= 2 * n else None


def emit_lanes(emitter, em, s: Loop, updates: tuple[Assign, ...], n: int) -> None:
    """Emit ``s`` as :data:`n` lanes (the module docstring); ``emitter`` the module emitter (its
    :meth:`block` emits an update), ``em`` the expression emitter."""
    b = em.b
    targets = [t for a in updates for t in a.targets]
    here = b.block
    b.position_before(b.function.entry_basic_block.terminator)
    arrays = {t: b.alloca(ir.ArrayType(LLTYPE[t.dtype], n), name=f"{t.name}.lanes") for t in targets}
    b.position_at_end(here)

    def lane(t, at):
        return b.gep(arrays[t], [I64(0), at], inbounds=True)

    with for_range(b, 0, n, name="lane.init") as at:
        for a in updates:
            for t, v in zip(a.targets, a.combiner.identity):
                em.push()
                b.store(em.narrow(em.value(v), LLTYPE[t.dtype]), lane(t, at))
                em.pop()
    lo, hi = em.index(s.lo), em.index(s.hi)
    whole = b.add(lo, b.mul(b.sdiv(b.sub(hi, lo), I64(n)), I64(n)))
    slots = dict(em.accs)
    with for_range(b, lo, whole, n, name=f"{s.var.name}.o") as ko:
        pre, body = b.block, b.append_basic_block(f"{s.var.name}.lane")
        b.branch(body)
        b.position_at_end(body)
        iv = b.phi(I64, name=f"{s.var.name}.l")
        iv.add_incoming(I64(0), pre)
        em.env[s.var] = b.add(ko, iv, flags=("nsw",))
        em.accs.update({t: lane(t, iv) for t in targets})
        emitter.block(em, updates)
        em.accs.update(slots)
        nxt = b.add(iv, I64(1), flags=("nsw",))
        iv.add_incoming(nxt, b.block)
        done = b.append_basic_block(f"{s.var.name}.lanes.done")
        br = b.cbranch(b.icmp_signed("<", nxt, I64(n)), body, done)
        br.set_metadata("llvm.loop", loop_metadata(b.module, width=n, unroll=False))
        b.position_at_end(done)
    with for_range(b, 0, n, name="lane.merge", vectorize=False) as at:
        for a in updates:
            comb = a.combiner
            em.push()
            em.accs.update({r: lane(t, at) for r, t in zip(comb.rhs, a.targets)})
            merged = [em.value(substitute(r, dict(zip(comb.lhs, a.targets)))) for r in comb.result]
            for t, v in zip(a.targets, merged):
                b.store(em.narrow(v, LLTYPE[t.dtype]), em.accs[t])
            for r in comb.rhs:
                del em.accs[r]
            em.pop()
    with for_range(b, whole, hi, name=f"{s.var.name}.tail", vectorize=False) as k:
        em.env[s.var] = k
        emitter.block(em, updates)
    del em.env[s.var]
