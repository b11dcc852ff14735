"""Loops of order-free updates (a max/min winner's value, first index and tie count) run in lanes, so
that LLVM's vectorizer takes them.

Such an update is a chain of compares and selects through every accumulator, no reduction LLVM
recognizes.  Its combiner gives the same bits in any order (:attr:`CommReducer.order_free`), so the
loop over its terms may run as ``n`` independent accumulators, term ``k`` going to lane ``k % n``
(*inner lanes*)::

    lane[l] = identity                                  for l < n
    for ko in range(lo, lo + whole, n):                 # whole: the trips, rounded down to n
        for l in range(n): lane[l] = update(lane[l], term(ko + l))      # vectorized
    for l in range(n): acc = combine(acc, lane[l])      # in lane order
    for k in range(lo + whole, hi): acc = update(acc, term(k))

When the terms walk memory better along the output axis ``j`` of the loop around (a max over a middle
axis, at least ``2n`` terms an output), ``n`` outputs accumulate side by side instead (*outer lanes*),
each lane one output, in the order of the plain loops::

    for jo in range(lo, lo + whole, n):
        for l in range(n): lane[l] = identity
        for k...: for l in range(n): lane[l] = update(lane[l], term(jo + l, k))   # vectorized
        for l in range(n): (the stores after the reduction, reading lane[l] at j = jo + l)
    for j in range(lo + whole, hi): (the plain body)

The lanes live in stack arrays of the nest's function; the loop program and its work are unchanged."""

from __future__ import annotations

import math
from contextlib import contextmanager

import llvmlite.ir as ir

from tensorad.ir.expr import Op
from tensorad.ir.rewrite import free_vars, substitute, walk

from ..loops.schedule import access_cost, strides
from ..program import Assign, Loop, const_trips, walk_stmts
from .expr import LLTYPE
from .ir_loops import I64, for_range, loop_metadata
from .vectorizable import vectorizable

MIN_LANES = 16  # LLVM's vectorizer leaves a loop of fewer trips alone
MAX_OUTER = 256  # outer lanes: the outputs side by side, a strip whose lanes stay in L1


def emit_in_lanes(emitter, em, s: Loop, lanes_of) -> bool:
    """Whether the loop ``s`` was emitted in lanes (the module docstring): the updates in it or in the
    reduction nest it holds; ``lanes_of(dtype)`` a vector register's lanes."""
    acc = next((a for a in walk_stmts(s.body) if isinstance(a, Assign) and a.combiner is not None), None)
    if acc is None or s.kind != "serial":
        return False
    lanes = lanes_of(acc.targets[0].dtype)
    form = _outer_form(s, lanes)
    if form is not None:
        _outer_lanes(emitter, em, s, *form)
        return True
    updates = _updates(s, max(MIN_LANES, lanes))
    if updates is not None:
        _inner_lanes(emitter, em, s, updates, max(MIN_LANES, lanes))
    return updates is not None


def _updates(s: Loop, n: int) -> tuple[Assign, ...] | None:
    """The order-free updates of an innermost serial loop of unit step made only of them whose constant
    trips fill two rounds of ``n`` lanes, else ``None``."""
    if s.step != 1 or (const_trips(s) or 0) < 2 * n or not s.body \
            or not all(isinstance(a, Assign) and a.combiner is not None for a in s.body):
        return None
    return s.body


def _outer_form(s: Loop, lanes: int) -> tuple[int, tuple, Loop, tuple] | None:
    """``(n, inits, reduction, after)`` when the body of the output loop ``s`` is the accumulators'
    initialisation, one loop nest of at least ``2n`` order-free updates (bounds free of ``s``'s variable)
    and statements without loops, and its terms walk memory better along ``s`` than along the innermost
    reduction loop (or that loop is too short for inner lanes); else ``None``."""
    unit, trips = max(MIN_LANES, lanes), const_trips(s) or 0
    k = next((i for i, x in enumerate(s.body) if isinstance(x, Loop)), None)
    if s.step != 1 or trips < unit or k is None or not all(isinstance(x, Assign) and not x.counted
                                                           for x in s.body[:k]):
        return None
    n, loops = trips if trips <= MAX_OUTER else MAX_OUTER // unit * unit, [s.body[k]]
    while len(loops[-1].body) == 1 and isinstance(loops[-1].body[0], Loop):
        loops.append(loops[-1].body[0])
    inner = loops[-1]
    updates = _updates(inner, 0)
    after = s.body[k + 1:]
    if updates is None or any(s.var in free_vars(e) for x in loops for e in (x.lo, x.hi)) \
            or any(isinstance(x, (Loop, Assign)) for x in walk_stmts(after)) \
            or {t for a in s.body[:k] for t in a.targets} != {t for a in updates for t in a.targets}:
        return None
    reads = [r for a in updates for v in a.values for r in walk(v) if r.op is Op.READ]
    if _updates(inner, unit) is not None and \
            access_cost(reads, s.var, strides) >= access_cost(reads, inner.var, strides):
        return None
    return n, s.body[:k], s.body[k], after


class _Lanes:
    """The lane arrays of some accumulators, in the entry block of the function being emitted."""

    def __init__(self, emitter, em, targets, n: int) -> None:
        self.emitter, self.em, self.n = emitter, em, n
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
        slots, bound = dict(em.accs), em.env.get(var)
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
        if bound is not None:
            em.env[var] = bound
        elif var is not None:
            del em.env[var]
        nxt = b.add(lane, I64(1), flags=("nsw",))
        lane.add_incoming(nxt, b.block)
        done = b.append_basic_block("lane.done")
        br = b.cbranch(b.icmp_signed("<", nxt, I64(self.n)), body, done)
        if vectorizable(body, b.block, lane, slots.values()):  # (no trip count: never unrolled nor peeled)
            br.set_metadata("llvm.loop", loop_metadata(b.module, width=self.n, unroll=False))
        b.position_at_end(done)

    def init(self, inits: tuple[Assign, ...], var=None, base=None) -> None:
        with self.each(var, base):
            self.emitter.block(self.em, inits)

    def whole(self, s: Loop) -> tuple[ir.Value, ir.Value, ir.Value]:
        """``(lo, lo + whole, hi)`` of ``s``: its trips rounded down to the lanes."""
        b, em = self.em.b, self.em
        lo, hi = em.index(s.lo), em.index(s.hi)
        return lo, b.add(lo, b.mul(b.sdiv(b.sub(hi, lo), I64(self.n)), I64(self.n))), hi


def _inner_lanes(emitter, em, s: Loop, updates: tuple[Assign, ...], n: int) -> None:
    """``s`` in inner lanes; ``emitter`` the module emitter (its :meth:`block` emits statements), ``em``
    the expression emitter."""
    b = em.b
    lanes = _Lanes(emitter, em, [t for a in updates for t in a.targets], n)
    lanes.init(tuple(Assign(a.targets, a.combiner.identity, counted=False) for a in updates))
    lo, whole, hi = lanes.whole(s)
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
    _plain(emitter, em, s, whole, hi)


def _outer_lanes(emitter, em, s: Loop, n: int, inits: tuple, red: Loop, after: tuple) -> None:
    """The output loop ``s`` in outer lanes (:func:`_outer_form`)."""
    b = em.b
    lanes = _Lanes(emitter, em, [t for a in inits for t in a.targets], n)
    lo, whole, hi = lanes.whole(s)
    with for_range(b, lo, whole, n, name=f"{s.var.name}.o") as jo:
        lanes.init(inits, s.var, jo)
        _reduction(lanes, red, s.var, jo)
        with lanes.each(s.var, jo):
            emitter.block(em, after)
    _plain(emitter, em, s, whole, hi)


def _reduction(lanes: _Lanes, loop: Loop, var, base) -> None:
    """The reduction nest ``loop``, its innermost updates run over the lanes."""
    em = lanes.em
    with for_range(em.b, em.index(loop.lo), em.index(loop.hi), loop.step, name=loop.var.name) as k:
        em.env[loop.var] = k
        if isinstance(loop.body[0], Loop):
            _reduction(lanes, loop.body[0], var, base)
        else:
            with lanes.each(var, base):
                lanes.emitter.block(em, loop.body)
        del em.env[loop.var]


def _plain(emitter, em, s: Loop, lo: ir.Value, hi: ir.Value) -> None:
    """``s``'s body over ``[lo, hi)``: the trips the lanes leave."""
    with for_range(em.b, lo, hi, name=f"{s.var.name}.tail", vectorize=False) as k:
        em.env[s.var] = k
        em.push()
        emitter.block(em, s.body)
        em.pop()
    del em.env[s.var]


__all__ = ["emit_in_lanes"]
