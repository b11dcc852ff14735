"""float32 sums accumulated in blocks (cascade summation), so rounding error grows slowly with n.

Blocks of ``B0`` terms go to fresh partial accumulators, added to the total once, with upper levels of at most
``B`` partials: the error is about ``(B0 + B * (L - 1)) * eps`` for ``L = 1 + ceil(log_B(n / B0))`` levels,
against ``n * eps`` for one accumulator.  The blocking rewrites the loop program after isl, so every target
gives the same bits without fastmath.  A reduction over several axes is cut at a loop boundary where the terms
below reach ``B0``; a longer axis is split; a loop with non-constant bounds is cut only between iterations
that each fill a block.  Rewritten: a loop whose every mention of a float32 accumulator is an update ``acc =
acc + x``, ``x`` not reading it; the bookkeeping is ``counted=False``, so ``work`` is unchanged."""

from __future__ import annotations

import math
from dataclasses import replace

from tensorad.ir.expr import Expr, Op, const, var
from tensorad.ir.rewrite import walk

from ..program import Assign, If, Loop, Nest, Store, const_trips, map_stmt, stmt_exprs, walk_stmts
from .isl_ast import subst_stmt

# Terms per innermost block (strict sums of 16 err ``16 * eps``; fast math sums blocks in lanes)
BLOCK_STRICT = 16
BLOCK_FAST = 4096
# Partials per block of an upper level (run once per block below: they cost nothing).
UPPER_BLOCK = 16


def is_sum_update(st, acc: Expr) -> bool:
    """Whether ``st`` is ``acc = acc + x`` (or ``x + acc``) with ``x`` not reading ``acc``."""
    if not (isinstance(st, Assign) and len(st.targets) == 1 and st.targets[0] is acc):
        return False
    v = st.values[0]
    if v.op is not Op.ADD or v.dtype != acc.dtype:
        return False
    a, b = v.src
    term = b if a is acc else a if b is acc else None
    return term is not None and all(n is not acc for n in walk(term))


def _mentions(st, acc: Expr) -> list:
    """The statements under ``st`` (itself too) that mention ``acc`` (by identity: ``in`` would build an
    ``EQ`` node for every node it passes); ``False`` for bounds, tests that do."""
    return [s if isinstance(s, (Store, Assign)) else False for s in walk_stmts((st,))
            if any(n is acc for e in stmt_exprs(s) for n in walk(e))
            or isinstance(s, Assign) and any(t is acc for t in s.targets)]


def reduces(loop: Loop, acc: Expr) -> bool:
    """Whether ``loop`` is a reduction loop of ``acc``: ``acc`` is mentioned in it, and only
    by sum updates (never initialised, stored or read by anything else in it)."""
    found = _mentions(loop, acc)
    return bool(found) and all(x is not False and is_sum_update(x, acc) for x in found)


class _Cascade:
    """The rewrite of one nest's reduction loops for one accumulator ``acc``."""

    def __init__(self, acc: Expr, block: int, upper: int) -> None:
        self.acc, self.block, self.upper = acc, block, upper
        self.partials: dict[int, Expr] = {}  # level -> its partial accumulator
        self.owner = None

    def partial(self, level: int) -> Expr:
        """The partial accumulator of blocks at ``level`` (0: innermost).  Blocks of one level
        never overlap in time, so they share it; a block holds only lower levels' blocks."""
        p = self.partials.get(level)
        if p is None:
            p = self.partials[level] = var(f"{self.acc.name}.{level}", dtype=self.acc.dtype)
        return p

    def stmts(self, body: tuple) -> tuple[tuple, float, int]:
        """``body`` rewritten, the adds into ``acc`` one execution makes (``inf``: unknown), and the
        number of cut levels below (0: none)."""
        out, terms, levels = [], 0.0, 0
        for st in body:
            new, t, lv = self.stmt(st)
            out.extend(new)
            terms += t
            levels = max(levels, lv)
        return tuple(out), terms, levels

    def stmt(self, st) -> tuple[tuple, float, int]:
        if isinstance(st, Assign):
            if is_sum_update(st, self.acc):
                self.owner = st.owner
                return (st,), 1.0, 0
            return (st,), 0.0, 0
        if isinstance(st, If):
            then, t1, l1 = self.stmts(st.then)
            orelse, t2, l2 = self.stmts(st.orelse)
            return (If(st.cond, then, orelse, st.affine),), max(t1, t2), max(l1, l2)
        if not isinstance(st, Loop):
            return (st,), 0.0, 0
        if st.kind == "parallel" or not reduces(st, self.acc):
            body, _, _ = self.stmts(st.body)  # (reduction loops of ``acc`` may sit inside)
            return (Loop(st.var, st.lo, st.hi, body, st.step, st.kind, st.dim),), 0.0, 0
        body, t, levels = self.stmts(st.body)
        return self.loop(Loop(st.var, st.lo, st.hi, body, st.step, st.kind, st.dim), t, levels)

    def loop(self, loop: Loop, t: float, levels: int) -> tuple[tuple, float, int]:
        """A reduction loop adding ``t`` terms into ``acc`` per iteration, cut into blocks of ``g``
        iterations summed into partials (and blocked again while too long) unless its terms fit one block.
        Returns the statements, their adds into ``acc`` and the cut levels below."""
        limit = self.upper if levels else self.block
        m = const_trips(loop)
        if t == 0 or (m is not None and m * t <= limit):
            return (loop,), (m if m is not None else math.inf) * t, levels
        if t * 2 <= limit and m is None:  # (an unknown length: the loop around it may cut)
            return (loop,), math.inf, levels
        if t * 2 > limit:  # (a body that fills a block: a partial per iteration)
            whole = Loop(loop.var, loop.lo, loop.hi, self.cut(loop.body, levels), loop.step, loop.kind,
                         loop.dim)
            if m is None or m <= self.upper:
                return (whole,), (m if m is not None else math.inf), levels + 1
            return self.loop(whole, 1.0, levels + 1)
        return self.split(loop, m, max(1, int(limit // t)), levels)

    def cut(self, body: tuple, levels: int) -> tuple:
        """``p = 0; body with acc as p; acc = acc + p`` (``p`` the partial of this level)."""
        p = self.partial(levels)
        inner = tuple(_renamed(st, self.acc, p) for st in body)
        zero = const(0.0, self.acc.dtype)
        return (Assign((p,), (zero,), counted=False, owner=self.owner), *inner,
                Assign((self.acc,), (self.acc + p,), counted=False, owner=self.owner))

    def split(self, loop: Loop, m: int, g: int, levels: int) -> tuple[tuple, float, int]:
        """``loop`` (``m`` trips) as a loop over its ``m // g`` whole blocks of ``g`` iterations,
        each a block of the partial, and the rest in one more block (as :meth:`loop` returns)."""
        k = loop.var
        blocks, rest = divmod(m, g)
        lo, step = int(loop.lo.arg), loop.step
        kb = var(f"{k.name}b", 0, blocks)
        k0 = var(k.name, 0, g)
        at = kb * g + k0
        if step != 1:
            at = at * step
        if lo:
            at = at + lo
        inner = Loop(k0, const(0), const(g), tuple(subst_stmt(s, {k: at}) for s in loop.body), 1, "serial")
        outer = Loop(kb, const(0), const(blocks), self.cut((inner,), levels), 1, "serial", loop.dim)
        out, terms, depth = (outer,), float(blocks), levels + 1
        if blocks > self.upper:  # (a long loop of blocks: its partials are blocked in turn)
            out, terms, depth = self.loop(outer, 1.0, levels + 1)
        if rest:
            tail = Loop(k, const(lo + blocks * g * step), loop.hi, loop.body, step, loop.kind, loop.dim)
            out += self.cut((tail,), levels)
            terms += 1
        return out, terms, depth


def _renamed(st, acc: Expr, p: Expr):
    """``st`` with the accumulator ``acc`` replaced by ``p`` (in targets and values)."""
    def leaf(s):
        if not isinstance(s, Assign):
            return s
        return subst_stmt(replace(s, targets=tuple(p if t is acc else t for t in s.targets)), {acc: p})

    return map_stmt(st, lambda e: e, leaf)


def cascade_body(body: tuple, accumulators: tuple[Expr, ...], fastmath: bool) -> tuple[tuple, tuple]:
    """``body`` with the float32 sums of ``accumulators`` blocked, and the partial accumulators it added."""
    block = BLOCK_FAST if fastmath else BLOCK_STRICT
    added: list[Expr] = []
    for acc in accumulators:
        if acc.dtype != "float32":
            continue
        c = _Cascade(acc, block, UPPER_BLOCK)
        body, _, _ = c.stmts(body)
        added.extend(c.partials[lv] for lv in sorted(c.partials))
    return body, tuple(added)


def cascade_sums(steps: list, fastmath: bool) -> list:
    """``steps`` with every nest's float32 sums blocked (a micro-kernel's nest is blocked by its ``KC``)."""
    out = []
    for st in steps:
        if isinstance(st, Nest) and st.attrs.gemm is None and st.accumulators:
            body, added = cascade_body(st.body, st.accumulators, fastmath)
            if added:
                st = Nest(st.name, body, st.outputs, st.work, st.note, st.parallel,
                          st.accumulators + added, st.attrs, st.temps)
        out.append(st)
    return out
