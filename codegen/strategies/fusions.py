"""Strategies of fusion: an elementwise consumer computed as the epilogue of the reduction it
reads, by plain loops or by the matrix product that finishes each block."""

from __future__ import annotations

import math
from dataclasses import replace

from tensorad.ir.expr import Op
from tensorad.ir.rewrite import walk
from tensorad.ir.tensor import Tensor

from ..loops.domain import covers_box
from .cost import loop_cycles, vector_lanes
from .epilogue import Epilogue
from .plain import Strips
from .products import MicroKernel, PaddedMicroKernel
from .registry import Candidate, EpilogueStep, Plan, ProductCall, ReductionNest


def _epilogue_of(strategy, op, bodies, ctx, fits, kept: bool = False) -> Candidate | None:
    """``strategy``'s candidate fusing elementwise ``op`` into the first reduction it reads that only
    ``op`` reads, at its own index, of its shape, one output and not a program output (but, where
    ``kept``, a block's sum over its rows that only it reads, ``PlanContext.hidden_sums``, then stored
    too), and that ``fits(r, chosen)``; else ``None``."""
    if not ctx.opts.fuse or op.is_reduction or op.num_outputs != 1:
        return None
    body = bodies[0]
    read = {n.arg.op for n in walk(body) if n.op is Op.READ and n.arg.op in ctx.position}
    for r in sorted(read, key=ctx.position.__getitem__):
        chosen = ctx.chosen.get(r)
        t = Tensor(r, 0)
        if chosen is None or ctx.readers.get(r) != [op] or not r.is_reduction or r.num_outputs != 1 \
                or (t in ctx.outputs and not (kept and t in ctx.hidden_sums)) or op.shape != r.shape:
            continue
        if any(n.op is Op.READ and n.arg == t and n.src != op.axes for n in walk(body)):
            continue
        if fits(r, chosen):
            return Candidate(strategy, op, bodies, Epilogue(op, t, body, t in ctx.outputs), absorbs=(r,))
    return None


class EpilogueFusion:
    """An elementwise consumer stored by the reduction it reads (:mod:`.strategies.epilogue`): the
    reduction is read only by it, at its point, is not an output, and is one plain nest over its box
    (the nest of its own choice: plain, in strips or collapsed); a block's sum over its rows that only it
    reads, stored too by plain loops, decided and priced as in the static program, where it is no output."""

    name = "epilogue"

    def match(self, op, bodies, ctx):
        fusion = _epilogue_of(self, op, bodies, ctx, lambda r, chosen: chosen.single_nest
                              and covers_box(r, ctx.bodies[r]), kept=True)
        return [] if fusion is None else [fusion]

    def cost(self, cand, ctx):
        r = cand.data.reduction.op
        saved = 2 * math.prod(r.shape) / vector_lanes(ctx, r.body[0].dtype)  # (stored, then read)
        plain = isinstance(ctx.chosen[r].strategy, Strips) and not self._strips(cand, ctx)
        own = loop_cycles(r, ctx.bodies[r], ctx) if plain else ctx.costs[r]
        return own + loop_cycles(cand.op, cand.bodies, ctx) - saved

    @staticmethod
    def _strips(cand, ctx) -> bool:
        """Whether the fused reduction accumulates in strips: its own choice, unless the consumer's dtype
        cannot hold the sums (fused, it keeps scalar accumulators) or the sums are an output too."""
        r = cand.data.reduction.op
        return isinstance(ctx.chosen[r].strategy, Strips) and cand.op.body[0].dtype == r.body[0].dtype \
            and not cand.data.keep

    def lower(self, cand, ctx):
        r = cand.data.reduction.op
        nest = ReductionNest(r, ctx.chosen[r].bodies, self._strips(cand, ctx))  # (collapsed or not)
        return Plan([EpilogueStep(cand.op, cand.bodies, cand.data, nest)], absorbs=(r,))


class ProductEpilogue:
    """An elementwise consumer of a matrix product (``gelu(X @ W + b)``) applied by the product itself: the
    micro-kernel's driver calls a finisher on each completed block of C, which replaces C by the consumer's
    value in place (:mod:`.gemm.microkernel`); C lives in the consumer's buffer.  The product must be planned
    as the micro-kernel (plain or padded), read by nothing else, read by the consumer only at its own index,
    of its shape and dtype, and not an output; the consumer holds no reduction and no checked gather."""

    name = "product-epilogue"
    PRODUCTS = (MicroKernel, PaddedMicroKernel)

    def match(self, op, bodies, ctx):
        # the finisher evaluates no reduction and no checked gather index (only a nest tests those)
        if any(n.op is Op.REDUCE or (n.op is Op.DATA_INDEX and n.arg.mode == "raise")
               for n in walk(bodies[0])):
            return []
        fusion = _epilogue_of(self, op, bodies, ctx, lambda r, chosen: bodies[0].dtype == r.body[0].dtype
                              and isinstance(chosen.strategy, self.PRODUCTS))
        return [] if fusion is None else [fusion]

    def cost(self, cand, ctx):
        r = cand.data.reduction.op
        saved = 2 * math.prod(r.shape) / vector_lanes(ctx, r.body[0].dtype)  # (C: once fewer)
        return ctx.costs[r] + loop_cycles(cand.op, cand.bodies, ctx) - saved

    def lower(self, cand, ctx):
        """The product's own plan, its product steps now computing the consumer."""
        r, epilogue = cand.data.reduction.op, cand.data
        inner = ctx.chosen[r].strategy.lower(ctx.chosen[r], ctx)
        steps = [EpilogueStep(cand.op, cand.bodies, epilogue,
                              replace(st, gemm=replace(st.gemm, epilogue=epilogue)))
                 if isinstance(st, ProductCall) and st.op is r else st for st in inner.steps]
        return Plan(steps, inner.alias, absorbs=(r,))
