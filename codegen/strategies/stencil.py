"""Taps: a small output of shifted products as one stream with an accumulator per tap, and the dual.

A depthwise convolution's weight gradient sums, per ``3 x 3`` tap, a product of two reads whose indices
differ by the tap's offset::

    dW[c, 0, kh, kw] = sum_{n, y, x} H[n, c, y, x] * X[n, c, y + kh - 1, x + kw - 1]
                       where 0 <= y + kh - 1 < 56 and 0 <= x + kw - 1 < 56

Where every tap's condition holds (the *interior*) the taps share one stream, their accumulators in
vector registers; the border is a plain sum ``B`` per tap: ``dW = A_{(kh, kw)} + B``.  The tap axes are
output axes of few values that shift a read index together with a reduction axis.  The interior adds in
another order, so the split is offered only under fast math (:class:`TapAccumulators`).

The dual (:func:`unroll_taps`): a sum *over* a few taps at each point of a big output (an input gradient
``dX[n, c, y, x] = sum_{kh, kw} H[n, c, y - kh + 1, x - kw + 1] * W[c, 0, kh, kw]``) is one elementwise op
adding a term per tap under its tap's condition, decided per piece of the box (:mod:`.loops.box_pieces`)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from itertools import product

from tensorad.simplify.algebra.logic import all_of, conjuncts

from tensorad.ir.dtype import bits
from tensorad.ir.expr import Expr, Op, ReduceArg, choice, compare, const, copies, logical, logical_not, var
from tensorad.ir.reducer import CommReducer
from tensorad.ir.rewrite import free_vars, substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.poly.affine import IndexSpace, NotAffine
from tensorad.poly.domain import pw_aff_range
from tensorad.poly.linear import to_linear

from ..gemm.padding import plan_padding
from ..llvm.masked_tails import SHORT_VECTORS
from ..loops.box_pieces import GUARD_ATTR, guard_pieces
from ..target import Target
from .cost import loop_cycles, pack_cycles, reads_in, vector_lanes
from .registry import Candidate, Open, Plan, pieces_then
from .zero_masks import all_of as and_of  # (every conjunct kept; the optimizer's all_of drops repeats)

MAX_TAP_EXTENT = 8  # a tap axis has at most this many values (a kernel's width)
MIN_INTERIOR = 0.5  # of each tap's points: the shared stream must carry most of the work
MAX_UNROLLED_TAPS = 64  # terms of an unrolled sum (past the registers, its weights are broadcast loads)


@dataclass(frozen=True, eq=False)
class TapSplit:
    """The pieces of a split (see the module docstring) and what the cost model reads."""

    interior: ComputeOp  # one value per tap over the output's other axes
    border: ComputeOp | None  # each tap's points outside the interior (``op``'s axes); None: none are
    gather: ComputeOp  # ``op``'s values from both
    taps: int  # K
    interior_points: int  # points of the interior stream (outer axes x reduction axes)
    border_fraction: float  # of the original box's points, those the border sums


def _sum_of(n: int, dtype: str) -> CommReducer:
    """``n`` independent sums as one combiner (a tuple of accumulators)."""
    lhs = tuple(var(f"x{i}", dtype=dtype) for i in range(n))
    rhs = tuple(var(f"y{i}", dtype=dtype) for i in range(n))
    return CommReducer("sum", "custom", lhs, rhs, tuple(a + b for a, b in zip(lhs, rhs)),
                       tuple(const(0, dtype) for _ in range(n)))


def _shifts(body: Expr, moving: set, by: set, unit: bool = False) -> set:
    """The variables of ``by`` that some read index of ``body``'s source adds (any coefficient) to a
    variable of ``moving`` (of coefficient +-1 with ``unit``)."""
    found = set()
    for n in walk(body.src[1]):
        if n.op is not Op.READ:
            continue
        for i in n.src:
            terms = to_linear(i).as_dict()
            if any(a in moving and (abs(c) == 1 or not unit) for a, c in terms.items()):
                found |= set(terms) & by
    return found


def _moving(axes) -> set:
    return {a for a in axes if a.extent >= 2}


def tap_axes(op: ComputeOp, body: Expr) -> tuple[Expr, ...]:
    """The output axes (of 2 to :data:`MAX_TAP_EXTENT` values) that shift a read index of
    ``body``'s source along a reduction axis (``y + kh``), in the op's order."""
    found = _shifts(body, _moving(body.arg.axes), set(op.axes))
    return tuple(a for a in op.axes if a in found and 2 <= a.extent <= MAX_TAP_EXTENT)


def _float_sum(op: ComputeOp, body: Expr) -> bool:
    """Whether ``op`` is one float sum ``body`` of one value."""
    if not op.is_reduction or body.op is not Op.REDUCE or len(op.body) != 1:
        return False
    comb = body.arg.combiner
    return comb.kind == "sum" and comb.arity == 1 and body.dtype in ("float32", "float64")


def _range_points(space: IndexSpace, dom, axes) -> int:
    """Points of the bounding box of ``dom`` over ``axes`` (0 when ``dom`` is empty)."""
    ranges = (pw_aff_range(space.aff(a).intersect_domain(dom)) for a in axes)
    return 0 if dom.is_empty() else math.prod(hi - lo + 1 for lo, hi in ranges)


def split_taps(op: ComputeOp, body: Expr, budget: int, lanes: int) -> TapSplit | None:
    """The split of a one-source sum ``op`` into interior, border and gather, with tap axes of at most
    ``budget`` taps, a stream of at least ``lanes`` points and an interior of :data:`MIN_INTERIOR` of each
    tap's points; else ``None``."""
    if not _float_sum(op, body) or not body.arg.axes or body.arg.axes[-1].extent < lanes:
        return None
    taps = tap_axes(op, body)
    k = math.prod(a.extent for a in taps)
    if not taps or k > budget:
        return None
    cond, src = body.src
    raxes = tuple(body.arg.axes)
    outer = tuple(a for a in op.axes if a not in taps)
    values = list(product(*(range(a.lo, a.hi) for a in taps)))
    per_tap = [dict(zip(taps, (const(v, "int64") for v in vals))) for vals in values]
    inside = and_of([substitute(cond, m) for m in per_tap])
    space = IndexSpace(outer + raxes)
    try:
        interior_set = space.box().intersect(space.cond(inside))
        tap_sets = [space.box().intersect(space.cond(substitute(cond, m))) for m in per_tap]
    except NotAffine:
        return None
    interior_points = _range_points(space, interior_set, outer + raxes)
    tap_points = [_range_points(space, s, outer + raxes) for s in tap_sets]
    if interior_points == 0 or any(interior_points < MIN_INTERIOR * t for t in tap_points):
        return None
    box = math.prod(a.extent for a in outer + raxes)
    border_fraction = sum(t - interior_points for t in tap_points) / (box * k)

    dtype = body.dtype
    inner_outer = copies(outer)
    fresh = dict(zip(outer, inner_outer))
    sources = tuple(substitute(src, {**m, **fresh}) for m in per_tap)
    whole = _sum_of(k, dtype)
    icond = substitute(inside, fresh)
    interior = ComputeOp(f"{op.name}.taps", "", inner_outer, tuple(
        Expr(Op.REDUCE, dtype, (icond,) + sources, ReduceArg(whole, raxes, t)) for t in range(k)))

    b_axes = copies(op.axes)
    b_map = dict(zip(op.axes, b_axes))
    b_src = (substitute(logical(Op.AND, cond, logical_not(inside)), b_map), substitute(src, b_map))
    border = None if all(s.is_subset(interior_set) for s in tap_sets) else ComputeOp(
        f"{op.name}.border", "", b_axes, (Expr(Op.REDUCE, dtype, b_src, body.arg),))

    g_axes = copies(op.axes)
    g_map = dict(zip(op.axes, g_axes))
    g_outer = tuple(g_map[a] for a in outer)

    def pick(i: int, index: int) -> Expr:
        """The interior value of the taps fixed so far (``index``: their flat position)."""
        if i == len(taps):
            value = Expr(Op.READ, dtype, g_outer, Tensor(interior, index))
            return value if border is None else value + Expr(Op.READ, dtype, g_axes, Tensor(border, 0))
        a = g_map[taps[i]]
        value = pick(i + 1, index * taps[i].extent + taps[i].extent - 1)
        for v in range(taps[i].extent - 2, -1, -1):
            test = compare(Op.EQ, a, const(taps[i].lo + v, a.dtype))
            value = choice(Op.SELECT, test, pick(i + 1, index * taps[i].extent + v), value)
        return value

    gather = ComputeOp(op.name, op.tag, g_axes, (pick(0, 0),))
    return TapSplit(interior, border, gather, k, interior_points, border_fraction)


def _reread_bytes(op: ComputeOp, src: Expr, channels: tuple) -> int:
    """The most bytes a read of ``src`` over ``channels`` covers before it is read again: a read no output
    axis ``c`` indexes is read again per value of ``c``, covering its tensor over the extents of the
    output axes before ``c`` that it reads."""
    worst = 0
    for n in walk(src):
        if n.op is not Op.READ or not set(free_vars(n)) & set(channels):
            continue
        used = set(free_vars(n))
        late = next((k for k, a in enumerate(op.axes) if a not in used), None)
        if late is None:
            continue
        t = n.arg
        size = math.prod(t.shape) * max(1, bits(t.dtype) // 8)
        worst = max(worst, size // max(1, math.prod(a.extent for a in op.axes[:late] if a in used)))
    return worst


def unroll_taps(op: ComputeOp, body: Expr, reread_limit: int | None = None) -> ComputeOp | None:
    """The dual: a sum over a few taps (reduction axes of at most :data:`MAX_TAP_EXTENT` values, 2 to
    :data:`MAX_UNROLLED_TAPS` taps, some axis shifting a read index along an output axis, and a weight per tap
    that no such output axis indexes: a depthwise or grouped convolution's input gradient and forward) as an
    elementwise op adding one ``if_then_else(tap's condition, source, 0)`` per tap, in the loops' order, its
    guards decided per piece of its box (:mod:`.loops.box_pieces`).  Reduction axes of more values that shift
    no read stay a sum around the unrolled taps (one pass over the output row per channel), when what each
    pass re-reads (:func:`_reread_bytes`) is within ``reread_limit`` bytes; else ``None``."""
    if not _float_sum(op, body):
        return None
    raxes = tuple(body.arg.axes)
    sliding_axes = _shifts(body, _moving(op.axes), set(raxes), unit=True)
    kept = tuple(a for a in raxes if a.extent > MAX_TAP_EXTENT and a not in sliding_axes)
    if kept and (reread_limit is None or _reread_bytes(op, body.src[1], kept) > reread_limit):
        return None
    raxes = tuple(a for a in raxes if a not in kept)
    k = math.prod(a.extent for a in raxes)
    if k < 2 or k > MAX_UNROLLED_TAPS or any(a.extent > MAX_TAP_EXTENT for a in raxes):
        return None
    cond, src = body.src
    taps = _moving(raxes)
    if not taps & sliding_axes:
        return None  # (no window: a short channel sum, the plain loops' scalar accumulator)
    sliding = _shifts(body, taps, set(op.axes), unit=True)
    if not any(n.op is Op.READ and set(free_vars(n)) & taps and not set(free_vars(n)) & sliding
               for n in walk(src)):
        return None  # (no weight per tap to hold in a register: a box blur's strips do better)
    kept_cond, tap_cond = [], []
    for c in conjuncts(cond):
        uses = set(free_vars(c))
        if uses & set(raxes) and uses & set(kept):
            return None  # (a condition tying a channel to a tap: not a sum per channel of taps)
        (tap_cond if uses & set(raxes) or not uses & set(kept) else kept_cond).append(c)
    axes = copies(op.axes)
    fresh = dict(zip(op.axes, axes))
    channels = copies(kept)
    fresh.update(zip(kept, channels))
    space = IndexSpace(axes)
    box = space.box()
    outside = [c for c in tap_cond if not set(free_vars(c)) & set(raxes)]
    try:
        if outside and not box.is_subset(box.intersect(space.cond(substitute(all_of(outside), fresh)))):
            return None  # (zero off a part of the box: the loops fill it, the unrolled op would store it)
    except NotAffine:
        return None
    total = None
    for vals in product(*(range(a.lo, a.hi) for a in raxes)):
        m = {**fresh, **{a: const(v, "int64") for a, v in zip(raxes, vals)}}
        c = substitute(all_of(tap_cond), m)
        try:
            where = box.intersect(space.cond(c))
        except NotAffine:
            return None
        if where.is_empty():
            continue
        term = substitute(src, m)
        if not box.is_subset(where):
            term = choice(Op.IF_THEN_ELSE, c, term, const(0, body.dtype))
        total = term if total is None else total + term
    if total is None:
        return None
    if any(n.op is Op.IF_THEN_ELSE for n in walk(total)) and guard_pieces(space, box, total, False) is None:
        return None  # (guards that stay in the loop body: the plain loops do better)
    if channels:
        total = Expr(Op.REDUCE, body.dtype, (substitute(all_of(kept_cond), fresh), total),
                     ReduceArg(body.arg.combiner, channels, 0))
    return ComputeOp(op.name, op.tag, axes, (total,), ((GUARD_ATTR, True),))


RESERVED_REGISTERS = 4  # vector registers a tap stream keeps for its loads and products


class _Taps(ABC):
    """What both tap strategies share: fast math only (their sums add in another order), one sum matched
    once per planning call, the vector registers less :data:`RESERVED_REGISTERS` holding the taps."""

    name = ""

    @abstractmethod
    def _make(self, op, body, ctx):
        """The split or unrolled op of ``op``'s sum ``body`` (``None``: no match)."""

    def match(self, op, bodies, ctx):
        if not ctx.opts.fastmath or not op.is_reduction or len(bodies) != 1:
            return []
        key = (self.name, op, bodies)
        if key not in ctx.memo:
            ctx.memo[key] = self._make(op, bodies[0], ctx)
        found = ctx.memo[key]
        return [] if found is None else [Candidate(self, op, bodies, found)]

    @staticmethod
    def _budget(ctx) -> int:
        return ctx.target.vector_registers - RESERVED_REGISTERS


class TapAccumulators(_Taps):
    """A sum whose output axes include a few *taps* shifting its reads, as a stream over the taps' interior
    with a vector accumulator per tap, its border, and a gather (:func:`.strategies.stencil.split_taps`)."""

    name = "taps"

    def _make(self, op, body, ctx):
        return split_taps(op, body, self._budget(ctx), vector_lanes(ctx, body.dtype))

    def cost(self, cand, ctx):
        """Per interior point ``K`` multiply-adds and ``K + 1`` reads, the border's plain loops, a gather."""
        split = cand.data
        lanes = vector_lanes(ctx, cand.op.body[0].dtype)
        stream = split.interior_points * (1 + 2 * split.taps) / lanes
        border = 0.0 if split.border is None else (
            loop_cycles(split.border, split.border.body, ctx) * split.border_fraction)
        return stream + border + loop_cycles(split.gather, split.gather.body, ctx)

    def lower(self, cand, ctx):
        split = cand.data
        pieces = [p for p in (split.interior, split.border) if p is not None]
        return pieces_then(pieces, split.gather, cand.op)


def padded_chunks(op: ComputeOp, body: Expr, limit: int) -> list[tuple[ComputeOp | None, ComputeOp, Expr]]:
    """``[(copy, chunk, body)]``: the sum ``body`` reading a zero-padded copy (:mod:`.gemm.padding`) of its
    factor guarded by exactly its read's bounds, as ``op`` restricted to chunks of its first axis (``chunk``
    the op of those axes, ``body`` its sum) when the copy would pass ``limit`` elements (the copy's first
    index must then be that axis); empty when no factor is so guarded, or the chunks cannot keep the copy
    under ``limit``."""
    axes = tuple(op.axes) + tuple(body.arg.axes)
    guarded = [n for n in walk(body.src[1]) if n.op is Op.IF_THEN_ELSE]
    plans = [(n, plan) for n in guarded if (plan := plan_padding(n, axes)) is not None
             and plan.value is None and any(plan.lows + plan.highs)]
    if len(plans) != 1:
        return []
    (node, plan), a0 = plans[0], op.axes[0]
    step = a0.extent
    if plan.size > limit:
        if plan.read.src[0] is not a0 or plan.lows[0] or plan.highs[0]:
            return []
        step = -(-a0.extent // -(-plan.size // limit))
        if step * plan.size // a0.extent > limit:
            return []
    out: list[tuple[ComputeOp | None, ComputeOp, Expr]] = []
    for first in range(a0.lo, a0.hi, step):
        count = min(step, a0.hi - first)
        copy, read = plan.copy(first - a0.lo, count) if step < a0.extent else plan.copy()
        part = var(a0.name, first, first + count, a0.dtype) if step < a0.extent else a0
        src = substitute(substitute(body.src[1], {node: read}), {a0: part})
        moved = Expr(Op.REDUCE, body.dtype, (substitute(body.src[0], {a0: part}), src), body.arg)
        chunk = ComputeOp(op.name, op.tag, (part,) + tuple(op.axes[1:]), (moved,), op.attrs, op.provenance)
        out.append((copy, chunk, moved))
    return out


def scalar_points(unrolled: ComputeOp, target: Target, lanes: int) -> tuple[int, int]:
    """The points of an unrolled op's box that run as scalar code: in each of its guard pieces
    (:mod:`.loops.box_pieces`; the box where none is cut), the rows along its last axis of at most
    ``lanes`` values, and of longer rows the remainder past whole vectors, but for the rows that the
    target folds into one masked vector (:mod:`.llvm.masked_tails`); and of those points, the ones that
    cheap masked memory would fold (none on a target that has it)."""
    if unrolled.is_reduction or not unrolled.axes:
        return 0, 0
    space = IndexSpace(unrolled.axes)
    last, out = len(unrolled.axes) - 1, [0, 0]
    for p, _ in guard_pieces(space, space.box(), unrolled.body[0], False) or [(space.box(), None)]:
        row = p.dim_max_val(last).to_python() - p.dim_min_val(last).to_python() + 1
        rows = p.count_val().to_python() // row
        for k, masked in enumerate((target.masked_memory, True)):
            folded = masked and lanes < row < SHORT_VECTORS * lanes
            out[k] += rows * (row if row <= lanes else 0 if folded else row % lanes)
    return out[0], out[0] - out[1]


@dataclass(frozen=True, eq=False)
class Unrolled:
    """One form of a :class:`TapStencil`: the unrolled op (one per chunk of its first axis), the padded copy
    each chunk reads (made just before it, sharing one buffer), the points it runs as scalar code
    (:func:`scalar_points`), and of those the remainders of rows that cheap masked memory would fold
    into one masked vector (none on a target that has it)."""

    ops: tuple[ComputeOp, ...]
    copies: tuple[ComputeOp, ...] = ()
    scalar_points: int = 0
    unmasked_points: int = 0


class TapStencil(_Taps):
    """The dual: a sum over a few taps that shift its reads as one elementwise op adding a term per tap
    (:func:`.strategies.stencil.unroll_taps`), its interior vectorized, the taps' factors in registers.  Its
    guards cut the box into pieces, whose short rows run as scalar code (one column of a border); where one
    unguarded box would run fewer points so, the op offers a second form reading a zero-padded copy of its
    guarded factor (:func:`padded_chunks`), after the copies.  It runs the cheaper form (:meth:`_best`)."""

    name = "stencil"

    def _make(self, op, body, ctx):
        guarded = unroll_taps(op, body, reread_limit=ctx.target.l2 // 2)
        if guarded is None:
            return None
        lanes = vector_lanes(ctx, body.dtype)
        forms = [Unrolled((guarded,), (), *scalar_points(guarded, ctx.target, lanes))]
        chunks = padded_chunks(op, body, ctx.largest) if forms[0].scalar_points else []
        unrolled = [unroll_taps(chunk, b, reread_limit=ctx.target.l2 // 2) for _, chunk, b in chunks]
        if chunks and all(u is not None for u in unrolled):
            fewer = sum(scalar_points(u, ctx.target, lanes)[0] for u in unrolled)
            if fewer < forms[0].scalar_points:
                forms.append(Unrolled(tuple(unrolled), tuple(c for c, _, _ in chunks), fewer))
        return forms

    def _form_cost(self, form: Unrolled, ctx, scalar: bool = True) -> float:
        """The unrolled op's plain loops (the better of two loop orders for a sum around the taps), plus a
        load per point per invariant factor past the registers, plus its unmasked points at one lane;
        with ``scalar``, all its scalar points at one lane and the copies, each element priced as packing
        prices it (a copy of what passes the L2 runs at memory's speed)."""
        unrolled = form.ops[0]
        own = loop_cycles(unrolled, unrolled.body, ctx)
        if unrolled.is_reduction:  # (channels summed around the taps: the better loop order)
            own = min(own, loop_cycles(unrolled, unrolled.body, ctx, strips=True))
        if not unrolled.axes:
            return own
        inner = unrolled.axes[-1]
        invariant = {r for r in reads_in(unrolled.body) if inner not in free_vars(r)}
        spilled = max(0, len(invariant) - self._budget(ctx))
        points = math.prod(a.extent for a in unrolled.axes)
        lanes = vector_lanes(ctx, unrolled.body[0].dtype)
        cycles = own + points * spilled / lanes
        per_point = cycles / points
        if not scalar:
            return cycles + per_point * form.unmasked_points * (lanes - 1)
        cycles *= sum(u.axes[0].extent for u in form.ops) / unrolled.axes[0].extent
        cycles += per_point * form.scalar_points * (lanes - 1)
        return cycles + sum(math.prod(a.extent for a in c.axes) * pack_cycles(c.body[0], lanes, ctx)
                            for c in form.copies)

    def _best(self, cand, ctx) -> Unrolled:
        return min(cand.data, key=lambda f: self._form_cost(f, ctx))

    def cost(self, cand, ctx):
        """The guarded form's loops as if every row ran in vectors but the remainders of long rows that a
        target without cheap masked memory runs as scalar code (a product computes its edge tiles whole):
        the other scalar points and the copies only choose the form (:meth:`_best`)."""
        return self._form_cost(cand.data[0], ctx, scalar=False)

    def lower(self, cand, ctx):
        form = self._best(cand, ctx)
        if not form.copies:
            return pieces_then([], form.ops[0], cand.op)
        steps = [Open(o, o.body) for pair in zip(form.copies, form.ops) for o in pair]
        alias = {u: cand.op for u in form.ops} | {c: form.copies[0] for c in form.copies[1:]}
        return Plan(steps, alias)
