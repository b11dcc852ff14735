"""Strategies of plain loops: scalar accumulators, strips accumulated in the output, the last
reduction axes collapsed into one loop, and running reductions carried along an axis (scans)."""

from __future__ import annotations

import math

from tensorad.ir.expr import Expr, Op, ReduceArg, const, var
from tensorad.ir.rewrite import free_vars, replace_reads, substitute
from tensorad.ir.tensor import Tensor

from ..loops.domain import reduction_domain
from ..loops.schedule import access_cost, strides
from ..loops.stripmine import plan_split
from .cost import heavy_count, loop_cycles, reads_in, short_loop_factor, strip_costs, vector_lanes
from .products import default_spec
from .registry import Candidate, Plan, PointwiseNest, ReductionNest, ScanNest
from .scan import find_scan, rows_in_registers, update_cycles


class Loops:
    """Plain loops (the isl AST of :mod:`.loops.domain`): every op, always."""

    name = "loops"

    def match(self, op, bodies, ctx):
        return [Candidate(self, op, bodies, single_nest=True)]

    def cost(self, cand, ctx):
        return loop_cycles(cand.op, cand.bodies, ctx)

    def lower(self, cand, ctx):
        op = cand.op
        if op.is_reduction:
            return Plan([ReductionNest(op, cand.bodies)])
        return Plan([PointwiseNest(op, cand.bodies, plan_split(tuple(op.axes), cand.bodies))])


class Strips:
    """A reduction accumulated in strips of its output, the last output axis innermost (a column sum)."""

    name = "strips"

    def match(self, op, bodies, ctx):
        return [] if strip_costs(op, bodies) is None else [Candidate(self, op, bodies, single_nest=True)]

    def cost(self, cand, ctx):
        return loop_cycles(cand.op, cand.bodies, ctx, strips=True)

    def lower(self, cand, ctx):
        return Plan([ReductionNest(cand.op, cand.bodies, strips=True)])


def _collapsible(red) -> tuple | None:
    """``(a, b, stride of b per read)`` when the last two reduction axes ``a, b`` are read only as
    adjacent dimensions ``[.., a, b, ..]`` with ``stride(a) == extent(b) * stride(b)`` in every read, so
    that one loop over ``k = a * extent(b) + b`` walks the same memory; ``None`` otherwise."""
    if len(red.arg.axes) < 2:
        return None
    a, b = red.arg.axes[-2:]
    if a.lo != 0 or b.lo != 0 or b.extent < 2:
        return None
    pair = {a, b}
    unit = False
    for n in reads_in(red.src[1:]):
        st = strides(n.arg)
        pos = [d for d, i in enumerate(n.src) if i in pair]
        if not pos:
            if any(pair & set(free_vars(i)) for i in n.src):
                return None
            continue
        if len(pos) != 2 or n.src[pos[0]] is not a or pos[1] != pos[0] + 1 \
                or st[pos[0]] != b.extent * st[pos[1]]:
            return None
        if any(pair & set(free_vars(i)) for d, i in enumerate(n.src) if d not in pos):
            return None
        unit = unit or st[pos[1]] == 1
    rest = [replace_reads(e, lambda n: const(0, n.dtype)) for e in red.src]
    return None if not unit or any(pair & set(free_vars(e)) for e in rest) else (a, b)


class CollapsedLoops:
    """A reduction whose last two axes walk one contiguous run (``sum_{y, x} X[n, c, y, x]``) as one loop
    over both (:func:`_collapsible`): the reads become ``X[n, c, k // W, k % W]``, which the address
    computation recombines into ``k`` (:func:`.llvm.expr.recombine_digits`)."""

    name = "collapse"

    def match(self, op, bodies, ctx):
        if not op.is_reduction or any(b.src is not bodies[0].src or b.arg.axes != bodies[0].arg.axes
                                      for b in bodies):
            return []
        if default_spec(op, bodies, ctx) is not None:
            # a product's plain loops re-read both sides per output point (unpriced by the short-loop gain)
            return []
        found = _collapsible(bodies[0])
        if found is None:
            return []
        a, b = found
        red = bodies[0]
        k = var(f"{a.name}.{b.name}", 0, a.extent * b.extent)
        w = const(b.extent, k.dtype)
        src = tuple(substitute(e, {a: k // w, b: k % w}) for e in red.src)
        axes = tuple(red.arg.axes[:-2]) + (k,)
        new = tuple(Expr(Op.REDUCE, x.dtype, src, ReduceArg(x.arg.combiner, axes, x.arg.value_index))
                    for x in bodies)
        return [Candidate(self, op, new, (a, b, bodies), single_nest=True)]

    def cost(self, cand, ctx):
        """The plain loops' cost, scaled by :func:`short_loop_factor` of both lengths."""
        a, b, original = cand.data
        lanes = vector_lanes(ctx, cand.op.body[0].dtype)
        gain = short_loop_factor(a.extent * b.extent, lanes) / short_loop_factor(b.extent, lanes)
        return loop_cycles(cand.op, original, ctx) * gain

    def lower(self, cand, ctx):
        return Plan([ReductionNest(cand.op, cand.bodies)])


class Scan:
    """A reduction whose terms nest along an output axis (a prefix or suffix sum, ``k <= j``)
    as a running value carried along that axis (:mod:`.strategies.scan`): one update per new term."""

    name = "scan"

    def match(self, op, bodies, ctx):
        # each value of the combiner an output of its own, in order (a value a scan carries and nothing
        # reads gets a buffer, lower's ``carried``), one read (not by empty ops only) or an output
        comb = bodies[0].arg.combiner if op.is_reduction else None
        if comb is None or not len(bodies) == comb.arity == op.num_outputs or any(
                b.arg.value_index != v or b.dtype != d for v, (b, d) in enumerate(zip(bodies, comb.dtypes))) \
                or not any(math.prod(r.shape) for r in ctx.readers.get(op, ())) \
                and not any(Tensor(op, v) in ctx.outputs for v in range(op.num_outputs)):
            return []
        key = ("scan", op, bodies)
        if key not in ctx.memo:
            info = reduction_domain(op, bodies, [None] * len(bodies), memo=ctx.memo).reduction
            spec = find_scan(info, ordered=not ctx.opts.fastmath)
            ctx.memo[key] = spec if spec is not None and info.acc.dtype == bodies[0].dtype else None
        spec = ctx.memo[key]
        return [] if spec is None else [Candidate(self, op, bodies, spec)]

    def cost(self, cand, ctx):
        """Each update, vectorized across the output axes after the scanned one, and each point's carried
        copy; along the last axis a chain in a register per row: its updates alone, each priced by
        :func:`.strategies.scan.update_cycles` (scalar chains, or vectorized across the rows)."""
        spec, op = cand.data, cand.op
        if rows_in_registers(spec, len(op.axes)):
            rows = math.prod(a.extent for a in op.axes[:-1])
            comb = cand.bodies[0].arg.combiner
            return spec.updates * update_cycles(comb, rows, ctx.target, heavy_count(cand.bodies))
        access = access_cost(reads_in(cand.bodies), op.axes[-1], strides)
        copies = 2 * math.prod(a.extent for a in op.axes)
        lanes = vector_lanes(ctx, op.body[0].dtype)
        return (spec.updates * (2 + access + heavy_count(cand.bodies)) + copies) / lanes

    def lower(self, cand, ctx):
        return Plan([ScanNest(cand.op, cand.bodies)])
