"""The cost model of the code-generation strategies (and of a value stored or computed again).

Costs are estimated cycles on one core of the target: coarse, but they must order an op's candidates:

* **plain loops** -- ``iterations x (2 + access cost + 4 per transcendental) / lanes``, with the innermost
  variable's :func:`.loops.schedule.access_cost` over every read (an accumulating loop of 2 to 7 points,
  :func:`.loops.schedule.accumulator_access`, 4 more); an order-bound accumulator at one lane;
* **strips** -- the same with the last *output* axis innermost; **collapse** -- the plain loops scaled by
  :func:`short_loop_factor`;
* **micro-kernel** -- ``MACs / (lanes x FMA) / efficiency``, plus packing (:func:`pack_cycles`: each element
  as many times as the library packs it, a computed side's expression each time), times the
  load imbalance over ``PLAN_THREADS`` threads, plus a call; **padded** -- plus the padded copies;
* **split-K**, **parity**, **split-terms** -- the parts' products plus the adding pass or gather;
* **epilogue** / **product-epilogue** -- the consumer's loops less the temporary no longer written and read;
* **scatter** -- one add (another reduction's: one combine) per point of its affine domain; **scatter-sum**
  -- the scatters it absorbs plus one fill;
* **gathered** -- the rows' copy plus the product of the copy;
* **scan** -- one update per new term and one copy per output point, vectorized across later output axes;
  along the last axis its updates alone, as scalar chains or vectorized across the rows with their
  transposes, whichever prices less (:func:`.strategies.scan.update_cycles`);
* **taps** -- ``K`` multiply-adds and ``K + 1`` loads per interior point, the border as plain loops, and the
  gather; **stencil** -- its dual's elementwise op, and without cheap masked memory its rows' tails that
  run as scalar code.

**Saving or recomputing** (:func:`worth_saving`), per vector of ``target.lanes(dtype)`` elements: a
unit-stride load, store or arithmetic operation costs 1, a transcendental ``HEAVY_WEIGHT``.  Saving costs 2
(a store and a load): ``exp(z[i, j] - m[i])`` (7) is saved, ``abs(z[i])`` (2) recomputed.

With ``tune=True`` the micro-kernel also offers other tiles and cache blocks, which :mod:`.tune` measures."""

from __future__ import annotations

import math

from tensorad.ir.dtype import bits
from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import walk
from tensorad.ir.tensor import ComputeOp

from ..gemm.contraction import Contraction, computes, packed_elements
from ..loops import schedule
from ..loops.schedule import HEAVY, HEAVY_WEIGHT, access_cost, accumulator_access, strides, strip_access_costs
from ..target import Target
from .registry import PlanContext
from .scan import any_order

PLAN_THREADS = 2  # a parallel loop is planned to be shared (a kernel's threads are set at run time)


EFFICIENCY = 0.8  # of the micro-kernel's peak multiply-adds per cycle


GUARDED_PACK = 4  # a range-guarded element costs this many plain ones to pack


CALL_CYCLES = 5000  # a micro-kernel call: descriptors, buffers, the parallel region


# cycles more to pack an element of a side that reads more than the L2 holds
SPILLED_PACK = 1.0


INTERLEAVE = 4  # vectors per iteration of a vectorized innermost loop (LLVM's interleaving)


def vector_lanes(ctx: PlanContext, dtype: str) -> int:
    try:
        return ctx.target.lanes(dtype)
    except ValueError:  # bool and other narrow types: as wide as int32
        return ctx.target.lanes("int32")


def reads_in(exprs) -> list:
    return [n for e in exprs for n in walk(e) if n.op is Op.READ]


def heavy_count(exprs) -> int:
    return HEAVY_WEIGHT * min(4, sum(1 for e in exprs for n in walk(e) if n.op in HEAVY))


def strip_costs(op: ComputeOp, bodies: tuple) -> tuple[float, float] | None:
    """``(accumulators, strips)``: access costs of the two loop orders of a reduction that the
    strip form can take (output and reduction axes; a tuple's results stored in place in some
    :func:`.loops.schedule.store_order`, its reads contiguous or fixed along the strip: a strided read
    interleaves for every component's chain of selects, slower than scalar accumulators), else ``None``."""
    red = bodies[0]
    if not (op.is_reduction and op.axes and red.arg.axes) or schedule.store_order(red.arg.combiner) is None:
        return None
    o, r = op.axes[-1], red.arg.axes[-1]
    reads = reads_in(red.src)
    if red.arg.combiner.arity > 1 and any(access_cost([n], o, strides) > 1 for n in reads):
        return None
    return None if o.extent < 8 else strip_access_costs(reads, o, r, strides)


def short_loop_factor(trips: int, lanes: int) -> float:
    """How much slower per element an accumulating innermost loop of ``trips`` runs than a long one: a
    vectorized iteration adds ``IC`` vectors into ``IC`` accumulators (``INTERLEAVE`` when long), the rest
    a scalar chain.  With 8 lanes: 3136 -> 1, 196 -> 1.6, 48 -> 2, 56 -> 4, 14 -> 16."""
    if trips < 8:
        return 1.0  # (not vectorized: the access cost's short-loop term counts it)
    vf = lanes
    while vf > trips:  # (shorter vectors for a loop shorter than one register)
        vf //= 2
    steps = min(trips // (ic * vf) + trips % (ic * vf) for ic in (1, 2, INTERLEAVE) if ic * vf <= trips)
    return max(1.0, steps * INTERLEAVE * lanes / trips)


def loop_cycles(op: ComputeOp, bodies: tuple, ctx: PlanContext, strips: bool = False) -> float:
    """Plain loops over ``op``'s box (and its reduction's), an output axis innermost if ``strips``;
    order-bound accumulators (:func:`.strategies.scan.any_order`) are scalar chains, strips too."""
    iters = math.prod(a.extent for a in op.axes)
    lanes = vector_lanes(ctx, op.body[0].dtype)
    if op.is_reduction:
        red = bodies[0]
        lanes = lanes if any_order(red.arg.combiner) else 1
        iters *= math.prod(a.extent for a in red.arg.axes)
        costs = strip_costs(op, bodies)
        if costs is not None:
            access = costs[1] if strips else costs[0]
        elif red.arg.axes:
            access = accumulator_access(reads_in(red.src), red.arg.axes[-1], strides)
        else:
            access = access_cost(reads_in(red.src), op.axes[-1], strides) if op.axes else 0
    else:
        access = access_cost(reads_in(bodies), op.axes[-1], strides) if op.axes else 0
    return iters * (2 + access + heavy_count(bodies)) / lanes


def padded_cycles(pieces: list, ctx: PlanContext) -> float:
    """The pieces of :func:`.gemm.contraction.pad_contraction`: each one's copies and product."""
    return sum((contraction_cycles(spec, ctx) + sum(loop_cycles(c, c.body, ctx) for c in copies)
                for copies, spec, _ in pieces), 0.0)


def pack_cycles(side: Expr, lanes: int, ctx: PlanContext) -> float:
    """Cycles to pack one element of ``side`` into its panel: a vector's worth a cycle (``GUARDED_PACK``
    times more under a guard), plus its transcendental functions where it is an expression, priced as plain
    loops price them (:func:`heavy_count`), :data:`SPILLED_PACK` more for what the side reads past the L2."""
    cycles = (GUARDED_PACK if side.op in (Op.IF_THEN_ELSE, Op.SELECT) else 1) / lanes
    if computes(side):
        cycles += heavy_count([side]) / lanes
    read = {n.arg for n in walk(side) if n.op is Op.READ}
    footprint = sum(math.prod(t.shape) * bits(t.dtype) // 8 for t in read)
    return cycles + SPILLED_PACK * max(0.0, 1.0 - ctx.target.l2 / max(1, footprint))


def contraction_cycles(spec: Contraction, ctx: PlanContext) -> float:
    """The micro-kernel computing ``spec``."""
    lanes = min(vector_lanes(ctx, spec.dtype), spec.nr)
    # the register tile computes whole MR x NR tiles (over its rows' band's k steps, if any)
    cols = -(-spec.N // spec.nr) * spec.nr
    macs = spec.batches * spec.k_steps * spec.mr * cols
    compute = macs / (lanes * (2 if ctx.target.fma else 1)) / EFFICIENCY
    a_packs, b_packs = packed_elements(spec)
    pack = a_packs * pack_cycles(spec.a, lanes, ctx) + b_packs * pack_cycles(spec.b, lanes, ctx)
    blocks = max(1, spec.blocks)
    threads = PLAN_THREADS if ctx.opts.parallel else 1
    imbalance = -(-blocks // threads) * threads / blocks
    return (compute + pack) * imbalance + CALL_CYCLES


# ---- a value stored or computed again -------------------------------------------------------

_FREE = frozenset({Op.VAR, Op.CONST, Op.DATA_INDEX, Op.CAST})
_CHEAP_MATH = frozenset({Op.ABS})  # one instruction (a mask)


def recompute_cost(value: Expr, target: Target) -> float:
    """Estimated cycles to compute ``value`` once per element, vectorized for ``target``."""
    ops = 0
    for n in walk(value):
        if n.op in _FREE:
            continue
        ops += HEAVY_WEIGHT if n.op in HEAVY and n.op not in _CHEAP_MATH else 1
    return ops / _lanes(value.dtype, target)


def worth_saving(value: Expr, target: Target) -> bool:
    """Whether loading ``value`` (stored by the forward) beats computing it again."""
    return recompute_cost(value, target) > 2 / _lanes(value.dtype, target)  # a store and a load


def _lanes(dtype: str, target: Target) -> int:
    try:
        return target.lanes(dtype)
    except ValueError:
        return 1
