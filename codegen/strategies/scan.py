r"""Running reductions (scans): a reduction whose terms along one output axis nest, computed by carrying
the running value along that axis.

``Y[.., j, ..] = reduce_{r in D(j)} src(r)`` where ``src`` and the non-affine rest of the condition do not
mention ``j`` and isl proves ``D(j - s) ⊆ D(j)`` (a prefix: scanned upwards) or ``D(j + s) ⊆ D(j)`` (a
suffix: downwards), ``s`` the stride of the points that reduce along ``j`` (1, or 2 where only even ones
do), is

    Y[.., j, ..] = Y[.., j -/+ s, ..]  combined with  reduce_{r in D(j) \ D(j -/+ s)} src(r)

and the whole reduction at each row's first point: ``n`` updates instead of ``n (n + 1) / 2``.  Later
output axes run innermost (vectorized), earlier ones parallel.  Sums, products, max and min qualify.
Along the last axis the running values stay in registers and each point is stored once
(:func:`rows_in_registers`): a chain per row, which LLVM vectorizes across rows (a short row's unrolled
chain, transposed) where :func:`row_lanes` prices that below the scalar chains, and otherwise leaves to
run one row after another, the chains of neighbouring rows overlapping.  The code is held to that choice
(:func:`pinned_row_lanes`): scalar rows stay scalar, and a float max's or min's vectorized rows stay
vectorized at longer rows too (16, 32), where LLVM would leave a scalar max's branch in each step.

Order: a prefix sum adds in the plain loop's order; a suffix sum in reversed order, only under fast math.
Other combiners (several values, a custom kind) are scanned, in either direction, only in the plain loop's
order, a left fold cut where each point ends, so every value is the plain loop's, bit for bit (a suffix
``k >= j`` over the reversed axis ``k' = n - 1 - k``, as reverse mode writes a suffix's winner).  Each
value is carried in its own output, one that nothing reads in a buffer of its own (a running argmax whose
index alone is read), unless no carried value's combine reads it (:func:`carried`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import islpy as isl

from tensorad.ir.expr import TRUE, Expr, Op, const
from tensorad.ir.reducer import CommReducer
from tensorad.ir.rewrite import free_vars, substitute, walk
from tensorad.poly import nesting as nest
from tensorad.poly.domain import budgeted, count_bound

from ..loops.domain import PolyStmt, ReductionInfo
from ..program import Assign, Buffer, If, Store
from ..target import Target

COMBINERS = ("sum", "max", "min", "prod")


@dataclass(frozen=True, eq=False)
class ScanSpec:
    """How :func:`scan_form` scans: output axis ``axis`` (a position) in direction ``step``."""

    axis: int
    step: int  # > 0: upwards (each point extends its predecessor j - step), < 0: downwards
    carry: isl.Set  # over the output axes: the points whose predecessor is computed too
    fresh: isl.Set  # over output + reduction axes: the terms a point adds to what it carries
    updates: int  # points of ``fresh``, the nest's work (an upper bound where isl might count long)


def any_order(combiner) -> bool:
    """Whether a scan of ``combiner`` may combine its terms out of the plain loop's order (under fast
    math): one value of a built-in kind (:data:`COMBINERS`)."""
    return combiner.arity == 1 and combiner.kind in COMBINERS


def find_scan(info: ReductionInfo, ordered: bool = False) -> ScanSpec | None:
    """The cheapest scan of ``info`` (fewest updates) that carries terms, else ``None``; ``ordered``: only
    one in the plain loop's order."""
    comb = info.combiner
    if not info.outer or not info.raxes or info.epilogue is not None:
        return None
    ordered = ordered or not any_order(comb)
    used = {v for e in (*info.sources, info.rest) for v in free_vars(e)}
    dom, proj = info.update_domain, info.outer_domain
    best = None
    for pos, j in enumerate(info.outer):
        if j in used or j.extent < 2:
            continue
        stride = proj.get_stride(pos)  # (2 where only even points reduce: carried from one stride back)
        stride = int(stride.to_python()) if stride.is_int() and stride.is_pos() else 1
        for step in (stride, -stride):
            if stride == 1:
                nested = nest.nesting(dom, proj, pos, step)
            else:  # (a stride from modulos: isl's subset test of their lattices can run for minutes)
                nested = budgeted(dom.get_ctx(), partial(nest.nesting, dom, proj, pos, step))
            if nested is None:
                continue  # (nothing carried, a term that leaves, or too costly to know)
            carry, prev = nested
            fresh = dom.subtract(prev)
            updates = count_bound(fresh)  # (a cost estimate: exact unless isl might take long)
            if best is None or updates < best.updates:
                if not ordered or nest.ordered(fresh, prev, len(info.outer)):
                    best = ScanSpec(pos, step, carry, fresh, updates)
    return best


def carried(combiner, kept: set[int]) -> set[int]:
    """The values of ``combiner`` a scan carries to compute the values ``kept``: those and every value
    whose running value a carried value's combine reads.  A value outside it is dead (the multiplier of
    :func:`tensorad.autodiff.combiners.recurrence_reducer`, whose fold reads only the sum)."""
    need, todo = set(kept), list(kept)
    while todo:
        used = {n for n in walk(combiner.result[todo.pop()]) if n.op is Op.VAR}
        for v, lhs in enumerate(combiner.lhs):
            if lhs in used and v not in need:
                need.add(v)
                todo.append(v)
    return need


def scan_buffers(info: ReductionInfo, outputs: Sequence[Buffer | None]) -> tuple[Buffer | None, ...] | None:
    """``outputs`` by value index when each value a scan of ``info`` carries (:func:`carried`) has one of its
    accumulator's dtype, else ``None``; ``None`` in it: a dead value."""
    comb = info.combiner
    need = carried(comb, {v for v, b in enumerate(outputs) if b is not None})
    fits = len(outputs) == comb.arity and all(outputs[v] is not None and outputs[v].dtype == comb.dtypes[v]
                                             for v in need)
    return tuple(outputs) if fits else None


def _update(info: ReductionInfo, outs: tuple[Buffer | None, ...], accs: Sequence[Expr],
            in_registers: bool = False) -> tuple:
    """``out[x] = combine(out[x], src)`` for each carried value (a buffer in ``outs``): one
    store for one value; for several, their new values assigned at once to their accumulators
    ``accs`` (each reads the old ones), then stored.  ``in_registers``: the running values are the
    accumulators ``accs`` themselves (:func:`scan_form`), assigned, not stored."""
    comb, outer = info.combiner, info.outer
    live = [v for v, b in enumerate(outs) if b is not None]
    here = {comb.lhs[v]: accs[v] if in_registers else Expr(Op.READ, outs[v].dtype, outer, outs[v].tensor)
            for v in live}
    combined = tuple(substitute(comb.result[v], {**here, **dict(zip(comb.rhs, info.sources))}) for v in live)
    if in_registers:
        update: tuple = (Assign(tuple(accs[v] for v in live), combined),)
    elif len(live) == 1:
        update = (Store(outs[live[0]], outer, combined[0]),)
    else:
        update = (Assign(tuple(accs[v] for v in live), combined),
                  *(Store(outs[v], outer, accs[v], counted=False) for v in live))
    if info.rest is not TRUE:
        update = (If(info.rest, update, (), affine=False),)
    return update


def scan_form(info: ReductionInfo, outs: tuple[Buffer | None, ...], spec: ScanSpec,
              accs: Sequence[Expr] = (), in_registers: bool = False) -> list[PolyStmt]:
    """The scan's statements: ``out[x] = out[x - step e_j]`` where ``x`` carries (else the identity), then
    ``out[x] = combine(out[x], src)`` over the fresh terms, per buffer of ``outs`` (``accs``: the op's
    accumulators).  Time: output axes to ``j`` (negated downwards), phase, reduction axes, the rest.

    ``in_registers`` (:func:`rows_in_registers`), along the last output axis, where consecutive points of
    ``j`` run one after the other: the running values stay in the accumulators -- the identity where ``x``
    does not carry, the fresh terms combined into them, one store per point -- so that a short row is
    straight loads, combines and stores once LLVM unrolls it, which it vectorizes across rows."""
    outer, raxes, comb = info.outer, info.raxes, info.combiner
    p, j = spec.axis, info.outer[spec.axis]
    head = tuple(outer[:p]) + ((j if spec.step > 0 else const(0, j.dtype) - j),)
    tail = tuple(outer[p + 1:])
    first = head + (0,) + (0,) * len(raxes) + tail
    fresh = head + (1,) + tuple(raxes) + tail
    starts = info.outer_domain.subtract(spec.carry)
    if in_registers and not tail and accs:
        live = [v for v, b in enumerate(outs) if b is not None]
        start = Assign(tuple(accs[v] for v in live), tuple(comb.identity[v] for v in live), counted=False)
        stores = tuple(Store(outs[v], outer, accs[v], counted=False) for v in live)
        return [
            PolyStmt("I", outer, starts, (start,), first),
            PolyStmt("U", outer + raxes, spec.fresh, _update(info, outs, accs, in_registers=True), fresh),
            PolyStmt("W", outer, info.outer_domain, stores, head + (2,) + (0,) * len(raxes)),
        ]
    back = j - const(spec.step, j.dtype) if spec.step > 0 else j + const(-spec.step, j.dtype)
    shifted = tuple(back if v is j else v for v in outer)
    carry = tuple(Store(b, outer, Expr(Op.READ, b.dtype, shifted, b.tensor), counted=False)
                  for b in outs if b is not None)
    identity = tuple(Store(b, outer, e, counted=False) for b, e in zip(outs, comb.identity) if b is not None)
    return [
        PolyStmt("C", outer, spec.carry, carry, first),
        PolyStmt("I", outer, starts, identity, first),
        PolyStmt("U", outer + raxes, spec.fresh, _update(info, outs, accs), fresh),
    ]


def rows_in_registers(spec: ScanSpec, rank: int) -> bool:
    """Whether :func:`scan_form` carries the running values of ``spec`` (over an op of ``rank`` output axes)
    in registers, row by row: along the last axis, each point extending the one before it."""
    return spec.axis == rank - 1 and abs(spec.step) == 1


# The price of a scan's update along the last axis (:func:`update_cycles`), in the plain loops' cycles:
CARRY = 1  # the term's load and the point's store; a row's chain overlaps the next rows' (out of order)
SCALAR_EXTREME = 1  # more for a float max or min on a scalar: LLVM orders signed zeros by a branch


def combine_cycles(combiner: CommReducer, scalar: bool) -> int:
    """One combine of ``combiner``: an instruction, and :data:`SCALAR_EXTREME` more on a scalar where it
    takes a float max or min (a vector max or min is priced as the plain loops price it)."""
    extreme = any(n.op in (Op.MAXIMUM, Op.MINIMUM) and n.dtype.startswith("float")
                  for e in combiner.result for n in walk(e))
    return 1 + (SCALAR_EXTREME if scalar and extreme else 0)


def transpose_shuffles(rows: int, target: Target) -> int:
    """Shuffles per vector of ``rows`` rows, transposed in and out of registers: one where the target
    picks lanes out of two registers (:attr:`.target.Target.paired_permutes`), else ``2 rows - 1``
    (inserted and extracted lane by lane)."""
    return 1 if target.paired_permutes else 2 * rows - 1


def _cycles(combiner: CommReducer, heavy: int, rows: int, target: Target) -> float:
    if rows < 2:
        return CARRY + combine_cycles(combiner, True) + heavy
    return (CARRY + combine_cycles(combiner, False) + heavy + transpose_shuffles(rows, target)) / rows


def row_lanes(combiner: CommReducer, rows: int, target: Target) -> int:
    """The rows a scan of ``combiner`` along the last axis of ``rows`` rows updates at once: a vector's
    lanes of rows where that prices below a scalar chain per row (:func:`update_cycles`), else 1."""
    try:
        lanes = min(target.lanes(combiner.dtypes[0]), rows)
    except ValueError:  # (bool and other narrow types: kept scalar)
        return 1
    return lanes if _cycles(combiner, 0, lanes, target) < _cycles(combiner, 0, 1, target) else 1


def pinned_row_lanes(combiner: CommReducer, rows: int, target: Target) -> int | None:
    """The rows' width the code of a scan along the last axis is held to
    (:attr:`.program.NestAttrs.row_lanes`): 1 where :func:`row_lanes` keeps them scalar, the vector of
    rows (a power of two) where a scalar combine would cost more than a vector one (a float max or min),
    else ``None`` (LLVM decides)."""
    lanes = row_lanes(combiner, rows, target)
    if lanes == 1 or combine_cycles(combiner, True) > combine_cycles(combiner, False):
        return 1 << (lanes.bit_length() - 1)
    return None


def update_cycles(combiner: CommReducer, rows: int, target: Target, heavy: int = 0) -> float:
    """Cycles per update of a scan of ``combiner`` along the last axis of ``rows`` rows (``heavy``: the
    transcendental functions' weight of its terms): ``CARRY``, the combine (:func:`combine_cycles`) and
    ``heavy``, and each vector's transposes, shared by its rows where they run vectorized
    (:func:`row_lanes`)."""
    return _cycles(combiner, heavy, row_lanes(combiner, rows, target), target)
