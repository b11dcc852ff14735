"""The registered code-generation strategies (:mod:`.strategies.registry`) and their cost model.

Costs are estimated cycles on one core of the target.  The model is deliberately coarse; what
it must get right is the order of the candidates an op is offered:

* **plain loops** -- ``iterations x (2 + access cost + 4 per transcendental) / lanes``: the
  access cost of the innermost loop's variable (:func:`.loops.schedule.access_cost`: 0 invariant,
  1 unit stride, 2 small stride, 3 gather) over every read;
* **strips** -- the same with the last *output* axis innermost, accumulating in the output
  (:func:`.loops.schedule.buffer_form`; a column sum ``B[j] = sum_i H[i, j]``): cheaper exactly
  when that axis walks memory better than the last reduction axis;
* **collapse** -- the plain loops scaled by how much faster an accumulating loop as long as
  the last two reduction axes together runs than one as long as the last
  (:func:`short_loop_factor`);
* **micro-kernel** -- ``MACs / (lanes x FMA) / efficiency``, plus packing (a side under a
  range guard costs ``GUARDED_PACK`` times a plain read per packed element, and each element
  of the share of what a side reads past the L2 waits ``SPILLED_PACK`` cycles for memory),
  times the load imbalance of its parallel blocks over ``PLAN_THREADS`` threads, plus a call
  overhead;
* **padded** -- the micro-kernel reading zero-padded copies of its guarded sides, plus the
  copies;
* **split-K** -- the two halves (twice the parallel blocks: balanced) plus the adding pass;
* **parity** -- the residue classes' products plus the gather;
* **split-terms** -- a sum of products summed term by term: the terms' products plus the
  adding pass;
* **epilogue** -- the consumer's loops less the temporary the fused reduction no longer
  writes and the consumer no longer reads; **product-epilogue** -- the same for a consumer
  applied by a matrix product to each block of C it finishes;
* **scatter** -- one add per point of the scatter's loops; **scatter-sum** -- the scatters it
  absorbs plus one fill of its buffer;
* **gathered** -- a product whose side reads rows through a checked gather index: the copy of
  those rows (plain loops) plus the product of the copy;
* **scan** -- a running reduction: one update per new term and one copy per output point,
  vectorized across the output axes after the scanned one;
* **taps** -- a small output of shifted products (:mod:`.strategies.stencil`): one vectorized stream of
  the interior doing ``K`` multiply-adds and ``K + 1`` loads per point, its border as plain
  loops, and the gather; **stencil** -- its dual, a sum over a few taps as one elementwise op
  of a term per tap: the plain loops of that op.

Without ``tune=True`` the matches keep their thresholds (a product worth the micro-kernel,
:func:`.gemm.contraction.worth_it`; split-K only for few, odd blocks and long sums, ...) and the
cheapest candidate wins.  With it, the micro-kernel also offers other register tiles and
cache blocks, which :mod:`.tune` measures.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace

from tensorad.ir.dtype import bits
from tensorad.ir.expr import TRUE, Expr, Op, ReduceArg, const, var
from tensorad.ir.rewrite import free_vars, replace_reads, substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.poly.linear import to_linear

from ..gemm.contraction import Contraction, match_contraction, operand_registers, pad_contraction, worth_it
from ..gemm.splitk import split_k, wants_split
from ..loops.domain import covers_box, reduction_domain, where_density
from ..loops.schedule import HEAVY, HEAVY_WEIGHT, access_cost, strides, strip_access_costs
from ..loops.stripmine import plan_split
from .epilogue import Epilogue
from .gathered_rows import gather_rows
from .hoist import hoist_invariants
from .parity import decompose, residue_moduli
from .registry import Candidate, Form, Item, Open, Plan, PlanContext
from .scan import find_scan
from .scatter import match_scatter, shifted
from .stencil import split_taps, unroll_taps
from .term_split import split_terms
from .zero_masks import all_of, peel_masks

PLAN_THREADS = 2  # a parallel loop is planned to be shared (a kernel's threads are set at run time)
EFFICIENCY = 0.8  # of the micro-kernel's peak multiply-adds per cycle
GUARDED_PACK = 4  # a range-guarded element costs this many plain ones to pack
CALL_CYCLES = 5000  # a micro-kernel call: descriptors, buffers, the parallel region
# cycles more to pack an element of a side that reads more than the L2 holds.  Measured on a 2-core
# AMD EPYC (AVX2, 512 KiB L2), 1 thread, where packing is all a product does: a [4 x 1024] @
# [1024 x 16384] product packs its 64 MB side at 0.76 elements a cycle (22 ms), an RGB stem's
# input gradient (7x7 stride 2, batch 8, [3 x 576..1024] @ [.. x 12544] per residue class)
# its windowed, padded head at 0.55 (172 ms, the multiply-adds ~9 of them) -- not the vector a
# cycle (lanes elements) that an in-cache copy reaches; the strips (89 ms) are faster there
SPILLED_PACK = 1.0
INTERLEAVE = 4  # vectors per iteration of a vectorized innermost loop (LLVM's interleaving)


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _lanes(ctx: PlanContext, dtype: str) -> int:
    try:
        return ctx.target.lanes(dtype)
    except ValueError:  # bool and other narrow types: as wide as int32
        return ctx.target.lanes("int32")


def _reads(exprs) -> list:
    return [n for e in exprs for n in walk(e) if n.op is Op.READ]


def _heavy(exprs) -> int:
    return HEAVY_WEIGHT * min(4, sum(1 for e in exprs for n in walk(e) if n.op in HEAVY))


# ---- plain loops ----------------------------------------------------------------------------

def _strip_costs(op: ComputeOp, bodies: tuple) -> tuple[float, float] | None:
    """``(accumulators, strips)``: access costs of the two loop orders of a reduction that the
    strip form can take (one combined value, output and reduction axes), else ``None``."""
    red = bodies[0]
    if not op.is_reduction or red.arg.combiner.arity != 1 or not op.axes or not red.arg.axes:
        return None
    o, r = op.axes[-1], red.arg.axes[-1]
    if o.extent < 8:
        return None
    return strip_access_costs(_reads(red.src), o, r, strides)


def short_loop_factor(trips: int, lanes: int) -> float:
    """How much slower per element an accumulating innermost loop of ``trips`` (a known
    count) runs than a long one.  Each iteration of the vectorized loop adds ``IC`` vectors
    into ``IC`` accumulators and waits for the add's latency; a long loop keeps
    ``INTERLEAVE`` of them in flight, and what is left over runs as a scalar chain at one
    latency per element.  With the best ``IC`` for the count (8 lanes): 3136 -> 1, 196 ->
    1.6, 48 -> 2 (two accumulators, three iterations), 56 -> 4 (seven vectors: one
    accumulator), 14 -> 16 (one vector, six scalar steps).  Measured on an AMD EPYC (AVX2),
    1 thread: a sum over ``X[n, c, y, x]`` for each ``c`` (8 x 64 x 56 x 56) takes 1.1 ms as
    56-long rows and 0.28 ms as 3136-long runs."""
    if trips < 8:
        return 1.0  # (not vectorized: the access cost's short-loop term counts it)
    vf = lanes
    while vf > trips:  # (shorter vectors for a loop shorter than one register)
        vf //= 2
    steps = min(trips // (ic * vf) + trips % (ic * vf) for ic in (1, 2, INTERLEAVE) if ic * vf <= trips)
    return max(1.0, steps * INTERLEAVE * lanes / trips)


def loop_cycles(op: ComputeOp, bodies: tuple, ctx: PlanContext, form: Form = Form.ACCUMULATORS) -> float:
    """Plain loops over ``op``'s box (and its reduction's), innermost as ``form`` says."""
    iters = _prod(a.extent for a in op.axes)
    if op.is_reduction:
        red = bodies[0]
        iters *= _prod(a.extent for a in red.arg.axes)
        costs = _strip_costs(op, bodies)
        if costs is not None:
            access = costs[1] if form is Form.STRIPS else costs[0]
        else:
            inner = red.arg.axes[-1] if red.arg.axes else (op.axes[-1] if op.axes else None)
            access = access_cost(_reads(red.src), inner, strides) if inner is not None else 0
    else:
        access = access_cost(_reads(bodies), op.axes[-1], strides) if op.axes else 0
    return iters * (2 + access + _heavy(bodies)) / _lanes(ctx, op.body[0].dtype)


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
            return Plan([Item(op, cand.bodies, form=Form.ACCUMULATORS)])
        return Plan([Item(op, cand.bodies, split=plan_split(tuple(op.axes), cand.bodies))])


class Strips:
    """A reduction accumulated in strips of its output, the last output axis innermost
    (:func:`.loops.schedule.buffer_form`): a column sum reads whole rows."""

    name = "strips"

    def match(self, op, bodies, ctx):
        if _strip_costs(op, bodies) is None:
            return []
        return [Candidate(self, op, bodies, single_nest=True)]

    def cost(self, cand, ctx):
        return loop_cycles(cand.op, cand.bodies, ctx, Form.STRIPS)

    def lower(self, cand, ctx):
        return Plan([Item(cand.op, cand.bodies, form=Form.STRIPS)])


def _collapsible(red) -> tuple | None:
    """``(a, b, stride of b per read)`` when the last two reduction axes ``a, b`` are read
    only as adjacent dimensions ``[.., a, b, ..]`` with ``stride(a) == extent(b) * stride(b)``
    in every read (a pooling window over whole rows ``X[n, c, y, x]``): one loop over
    ``k = a * extent(b) + b`` then walks the same memory in one run.  ``None`` otherwise (also
    when ``a`` or ``b`` appears anywhere else: in the condition, a value, another index)."""
    if len(red.arg.axes) < 2:
        return None
    a, b = red.arg.axes[-2:]
    if a.lo != 0 or b.lo != 0 or b.extent < 2:
        return None
    pair = {a, b}
    unit = False
    for n in _reads(red.src[1:]):
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
    if not unit or any(pair & set(free_vars(e)) for e in rest):
        return None
    return a, b


class CollapsedLoops:
    """A reduction whose last two axes walk one contiguous run (``sum_{y, x} X[n, c, y, x]``)
    as one loop over both (:func:`_collapsible`): the vectorized innermost loop is ``H x W``
    long instead of ``W`` (a 14 x 14 global average pool: 196 instead of 14, no scalar tail).
    The reads become ``X[n, c, k // W, k % W]``, which the address computation recombines into
    ``k`` (:func:`.llvm.expr.recombine_digits`)."""

    name = "collapse"

    def match(self, op, bodies, ctx):
        if not op.is_reduction or any(b.src is not bodies[0].src or b.arg.axes != bodies[0].arg.axes
                                      for b in bodies):
            return []
        if default_spec(op, bodies, ctx) is not None:
            # a matrix product's plain loops re-read both sides for every output point, which
            # the short-loop gain does not price: on AVX-512 a 1x1 convolution's weight
            # gradient (K = 25,088) came out 3x under the micro-kernel and ran 2.7x slower
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
        """The plain loops' cost, scaled by how much faster the long loop accumulates
        (:func:`short_loop_factor` of both lengths)."""
        a, b, original = cand.data
        lanes = _lanes(ctx, cand.op.body[0].dtype)
        gain = short_loop_factor(a.extent * b.extent, lanes) / short_loop_factor(b.extent, lanes)
        return loop_cycles(cand.op, original, ctx) * gain

    def lower(self, cand, ctx):
        return Plan([Item(cand.op, cand.bodies, form=Form.ACCUMULATORS)])


# ---- matrix products ------------------------------------------------------------------------

def _guarded(side) -> bool:
    return side.op in (Op.IF_THEN_ELSE, Op.SELECT)


def padded_cycles(pieces: list, ctx: PlanContext) -> float:
    """The pieces of :func:`.gemm.contraction.pad_contraction`: each one's copies and product."""
    total = 0.0
    for copies, spec, _ in pieces:
        total += contraction_cycles(spec, ctx) + sum(loop_cycles(c, c.body, ctx) for c in copies)
    return total


def _pack_cycles(side: Expr, lanes: int, ctx: PlanContext) -> float:
    """Cycles to pack one element of ``side`` into its panel: a vector's worth a cycle
    (``GUARDED_PACK`` times more under a range guard, element by element), and
    :data:`SPILLED_PACK` more for each element that the target's L2 does not hold -- the share
    of what the side reads past the L2's size: such an element comes from the L3 or memory,
    and the packer waits for it (a share, not a cliff at the L2's size: a padded copy a tenth
    larger than the L2 is mostly still there)."""
    cycles = (GUARDED_PACK if _guarded(side) else 1) / lanes
    read = {n.arg for n in walk(side) if n.op is Op.READ}
    footprint = sum(_prod(t.shape) * bits(t.dtype) // 8 for t in read)
    return cycles + SPILLED_PACK * max(0.0, 1.0 - ctx.target.l2 / max(1, footprint))


def contraction_cycles(spec: Contraction, ctx: PlanContext) -> float:
    """The micro-kernel computing ``spec``."""
    lanes = _lanes(ctx, spec.dtype)
    # the register tile computes whole MR x NR tiles: a product of 3 rows runs a 4-row tile
    # (over the k steps of its rows' band, if any)
    cols = -(-spec.N // spec.nr) * spec.nr
    macs = spec.batches * spec.k_steps * spec.mr * cols
    compute = macs / (lanes * (2 if ctx.target.fma else 1)) / EFFICIENCY
    a_packs = spec.batches * spec.M * spec.K * -(-spec.N // spec.nc)  # A again per column block
    b_packs = spec.batches * spec.K * spec.N
    pack = a_packs * _pack_cycles(spec.a, lanes, ctx) + b_packs * _pack_cycles(spec.b, lanes, ctx)
    blocks = max(1, spec.blocks)
    threads = PLAN_THREADS if ctx.opts.parallel else 1
    imbalance = -(-blocks // threads) * threads / blocks
    return (compute + pack) * imbalance + CALL_CYCLES


# variants offered to tune=True: (MR, NR in vectors, KC) around the register tile's default
TILE_VARIANTS = ((None, None, 512), ("mr+2", 2, None), (None, 1, None))


def _tiles(spec: Contraction, ctx: PlanContext) -> list[tuple[str, tuple]]:
    """Other ``(MR, NR, KC, MC)`` tiles for ``spec`` that fit the target's registers."""
    lanes = _lanes(ctx, spec.dtype)
    regs = ctx.target.vector_registers
    out = []
    for mr, nv, kc in TILE_VARIANTS:
        nv = nv if nv is not None else spec.nr // lanes
        mr = spec.mr if mr is None else min(8, (regs - operand_registers(ctx.target) - nv) // nv)
        tile = (mr, nv * lanes, kc or spec.kc, max(mr, spec.mc // mr * mr) if mr >= 1 else None)
        if mr >= 1 and tile[:3] != (spec.mr, spec.nr, spec.kc) and \
                tile not in [t for _, t in out]:
            out.append((f"{mr}x{nv * lanes}k{tile[2]}", tile))
    return out


def contraction_specs(op: ComputeOp, bodies: tuple, ctx: PlanContext) -> list[tuple[str, Contraction]]:
    """``(variant, spec)`` of every micro-kernel tiling of ``op`` (the default first), or none
    when ``op`` is not a product worth it."""
    opts = ctx.opts
    if opts.microkernel is False or not op.is_reduction:
        return []
    key = ("contraction_specs", op, bodies)
    found = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = _contraction_specs(op, bodies, ctx)
    return list(found)


def _contraction_specs(op: ComputeOp, bodies: tuple, ctx: PlanContext) -> tuple[tuple[str, Contraction], ...]:
    opts = ctx.opts
    spec = match_contraction(op, bodies, opts.tile, ctx.target)
    if spec is None or not worth_it(spec, opts.microkernel) or _sparse(spec, op, bodies):
        return ()
    out = [("", spec)]
    if ctx.tuning and opts.tile is None:
        for label, tile in _tiles(spec, ctx):
            try:
                other = match_contraction(op, bodies, tile, ctx.target)
            except ValueError:  # a tile the product's shape refuses
                continue
            if other is not None:
                out.append((label, other))
    return tuple(out)


SPARSE_PRODUCT = 0.25  # a product whose terms are under this fraction of what it computes: loops


def _sparse(spec: Contraction, op: ComputeOp, bodies: tuple) -> bool:
    """Whether the terms of ``op``'s sum (its where-condition's points,
    :func:`.loops.domain.where_density`) are under ``SPARSE_PRODUCT`` of the multiply-adds the
    micro-kernel runs: every point of the box, or of its rows' band (a causal triangle's,
    :attr:`.Contraction.band`), the excluded ones as packed zeros.  Plain loops scan the
    domain alone: the border of a tap stencil's weight gradient (:mod:`.strategies.stencil`), a tenth of
    its box, made the weight gradient 4.4 ms as a product, 2.0 as loops (a grouped
    convolution, 4 channels a group, 8 x 128 x 28 x 28, 2 threads)."""
    computed = spec.k_steps / (-(-spec.M // spec.mr) * spec.K)
    return where_density(op, bodies) < SPARSE_PRODUCT * computed


def default_spec(op: ComputeOp, bodies: tuple, ctx: PlanContext) -> Contraction | None:
    specs = contraction_specs(op, bodies, ctx)
    return specs[0][1] if specs else None


class MicroKernel:
    """A sum of products as a packed matrix product (:mod:`.gemm.contraction`, :mod:`.gemm.microkernel`);
    its guarded sides are packed element by element under their guards."""

    name = "microkernel"

    def match(self, op, bodies, ctx):
        return [Candidate(self, op, bodies, spec, variant)
                for variant, spec in contraction_specs(op, bodies, ctx)]

    def cost(self, cand, ctx):
        return contraction_cycles(cand.data, ctx)

    def forced(self, cand, ctx):
        return 1 if ctx.opts.microkernel is True else 0

    def lower(self, cand, ctx):
        return Plan([Item(cand.op, cand.bodies, gemm=cand.data)])


class PaddedMicroKernel:
    """The micro-kernel reading zero-padded copies of its range-guarded sides
    (:mod:`.gemm.padding`), made per chunk of the batch when a whole copy would outgrow the
    kernel's arguments."""

    name = "padded"

    def match(self, op, bodies, ctx):
        out = []
        for variant, spec in contraction_specs(op, bodies, ctx):
            pieces = pad_contraction(spec, ctx.largest)
            if pieces[0][0] or pieces[0][2] is not None or len(pieces) > 1:
                out.append(Candidate(self, op, bodies, pieces, variant))
        return out

    def cost(self, cand, ctx):
        return padded_cycles(cand.data, ctx)

    def forced(self, cand, ctx):  # (before the plain micro-kernel: its guards become copies)
        return 2 if ctx.opts.microkernel is True else 0

    def lower(self, cand, ctx):
        steps: list = []
        alias = {}
        first_copy = None
        for copies, spec, batch_range in cand.data:  # zero-padded copies, then the product
            for copy in copies:
                steps.append(Item(copy, copy.body, split=plan_split(tuple(copy.axes), copy.body)))
                if batch_range is not None:  # the chunks' copies share one buffer
                    first_copy = first_copy or copy
                    if copy is not first_copy:
                        alias[copy] = first_copy
            steps.append(Item(cand.op, cand.bodies, gemm=spec, batch_range=batch_range))
        return Plan(steps, alias)


class SplitK:
    """A long product whose few, odd parallel blocks threads would share unevenly, summed in
    two halves along its first reduction axis (:mod:`.gemm.splitk`), then added."""

    name = "split-k"

    def match(self, op, bodies, ctx):
        if not ctx.opts.parallel:
            return []
        spec = default_spec(op, bodies, ctx)
        if spec is None or not wants_split(spec):
            return []
        part, total = split_k(op, bodies[0])
        part_spec = default_spec(part, part.body, ctx)
        if part_spec is None:
            return []
        return [Candidate(self, op, bodies, (part, part_spec, total))]

    def cost(self, cand, ctx):
        part, part_spec, total = cand.data
        return contraction_cycles(part_spec, ctx) + loop_cycles(total, total.body, ctx)

    def forced(self, cand, ctx):  # (offered only where threads would share the blocks unevenly)
        return 3 if ctx.opts.microkernel is True else 0

    def lower(self, cand, ctx):
        part, _, total = cand.data
        return Plan([Open(part, part.body), Open(total, total.body)], alias={total: cand.op})


class Parity:
    """A strided convolution's input gradient, which is no product, as one product per
    residue class of its output (:mod:`.strategies.parity`) and a gather; only when every class is one.
    Also offered beside a product whose guards zero most of its terms (a transposed
    convolution's forward: each output point meets 1 of the 4 taps of a 2x2 stride 2 kernel),
    where the classes' products are shorter."""

    name = "parity"

    def match(self, op, bodies, ctx):
        if not op.is_reduction or len(bodies) != 1:
            return []
        found = decompose(op, bodies[0], lambda piece: default_spec(piece, piece.body, ctx), ctx.memo)
        return [] if found is None else [Candidate(self, op, bodies, found)]

    def cost(self, cand, ctx):
        pieces, specs, gather = cand.data
        return sum(contraction_cycles(s, ctx) for s in specs) + loop_cycles(gather, gather.body, ctx)

    def forced(self, cand, ctx):  # (products in place of a non-product: the micro-kernel applies)
        return 2 if ctx.opts.microkernel is True else 0

    def lower(self, cand, ctx):
        pieces, _, gather = cand.data
        return Plan([Open(p, p.body) for p in pieces] + [Open(gather, gather.body)],
                    alias={gather: cand.op})


class TermSplit:
    """A sum reduction of several terms, each a product, that is no product itself (a Gram
    matrix's gradient ``sum_j H[i, j] F[j, k] + H[j, i] F[j, k]``): one product per term, then
    the pass adding them (:mod:`.strategies.term_split`); under fast math only (the sum reassociates)."""

    name = "split-terms"

    def match(self, op, bodies, ctx):
        if not ctx.opts.fastmath or not op.is_reduction or len(bodies) != 1 \
                or default_spec(op, bodies, ctx) is not None:
            return []
        found = split_terms(op, bodies[0])
        if found is None:
            return []
        parts, total = found
        specs = [default_spec(p, p.body, ctx) for p in parts]
        if any(s is None for s in specs):
            return []
        return [Candidate(self, op, bodies, (parts, specs, total))]

    def cost(self, cand, ctx):
        parts, specs, total = cand.data
        return sum(contraction_cycles(s, ctx) for s in specs) + loop_cycles(total, total.body, ctx)

    def lower(self, cand, ctx):
        parts, _, total = cand.data
        return Plan([Open(p, p.body) for p in parts] + [Open(total, total.body)], alias={total: cand.op})


def _box(op: ComputeOp) -> int:
    """Points of ``op``'s loop box, its reduction's axes included."""
    red = op.body[0]
    inner = _prod(a.extent for a in red.arg.axes) if red.op is Op.REDUCE else 1
    return _prod(a.extent for a in op.axes) * inner


def _reads_divided(body: Expr) -> bool:
    """Whether ``body`` reads at an index that divides or takes a remainder (not only tests one)."""
    return any(n.op is Op.READ and any(m.op in (Op.FLOORDIV, Op.MOD) for i in n.src for m in walk(i))
               for n in walk(body))


class ParityLoops:
    """A reduction that reads its output axes divided and remaindered (``(x + 1) // 2``,
    ``(x + 1) % 2``: a strided depthwise or grouped convolution's input gradient, whose loops
    test a residue in their innermost body and read at non-affine indices) as one reduction per
    residue class of its output (:mod:`.strategies.parity`), each with affine indices and only the taps
    that apply, and a gather; each class is planned in turn (loops, strips, a product)."""

    name = "parity-loops"

    def match(self, op, bodies, ctx):
        if not op.is_reduction or len(bodies) != 1 or not _reads_divided(bodies[0]):
            return []
        lanes = _lanes(ctx, bodies[0].dtype)
        if any(ax.extent // m < lanes for ax, m in residue_moduli(op, bodies[0]).items()):
            return []  # (a class shorter than a vector: nothing to gain, a gather to pay)
        found = decompose(op, bodies[0], lambda piece: piece, ctx.memo)
        if found is None or sum(_box(p) for p in found[0]) + _box(found[2]) >= _box(op):
            return []  # (no taps saved: a grouped convolution's classes are as long as its sum)
        return [Candidate(self, op, bodies, found)]

    def cost(self, cand, ctx):
        pieces, _, gather = cand.data
        best = sum(min(loop_cycles(p, p.body, ctx), loop_cycles(p, p.body, ctx, Form.STRIPS)) for p in pieces)
        return best + loop_cycles(gather, gather.body, ctx)

    def lower(self, cand, ctx):
        pieces, _, gather = cand.data
        return Plan([Open(p, p.body) for p in pieces] + [Open(gather, gather.body)],
                    alias={gather: cand.op})


@dataclass(frozen=True, eq=False)
class _Fusion:
    reduction: ComputeOp
    epilogue: Epilogue


def _epilogue_of(strategy, op, bodies, ctx, fits) -> Candidate | None:
    """``strategy``'s candidate fusing elementwise ``op`` into the first reduction it reads (in
    program order) that ``op`` alone reads, only at its own index, of its shape, one output
    and not an output of the program, and that ``fits(r, chosen)`` (the strategy's own test of
    how ``r`` was planned); ``None`` when there is none."""
    if not ctx.opts.fuse or op.is_reduction or op.num_outputs != 1:
        return None
    body = bodies[0]
    read = {n.arg.op for n in walk(body) if n.op is Op.READ and n.arg.op in ctx.position}
    for r in sorted(read, key=ctx.position.__getitem__):
        chosen = ctx.chosen.get(r)
        t = Tensor(r, 0)
        if chosen is None or ctx.readers.get(r) != [op] or not r.is_reduction or r.num_outputs != 1 \
                or t in ctx.outputs or op.shape != r.shape:
            continue
        if any(n.op is Op.READ and n.arg == t and n.src != op.axes for n in walk(body)):
            continue
        if fits(r, chosen):
            return Candidate(strategy, op, bodies, _Fusion(r, Epilogue(op, t, body)), absorbs=(r,))
    return None


class EpilogueFusion:
    """An elementwise consumer stored by the reduction it reads (:mod:`.strategies.epilogue`): no temporary,
    no second pass.  The reduction must be the consumer's only at-point read of it, read by
    nothing else, not an output, one plain nest writing its whole box."""

    name = "epilogue"

    def match(self, op, bodies, ctx):
        fusion = _epilogue_of(self, op, bodies, ctx, lambda r, chosen: chosen.single_nest
                              and covers_box(r, ctx.bodies[r]))
        return [] if fusion is None else [fusion]

    def cost(self, cand, ctx):
        r = cand.data.reduction
        saved = 2 * _prod(r.shape) / _lanes(ctx, r.body[0].dtype)  # its temporary: stored, read
        own = ctx.costs[r] if self._form(cand, ctx) is Form.STRIPS else loop_cycles(r, ctx.bodies[r], ctx)
        return own + loop_cycles(cand.op, cand.bodies, ctx) - saved

    @staticmethod
    def _form(cand, ctx) -> str:
        """The fused reduction's loop order: its own choice, except that strips accumulate in
        the output buffer, which a consumer of another dtype (a float32 sum rounded to
        bfloat16) cannot hold: fused, it keeps scalar accumulators, and the cost says whether
        that beats strips in its own float32 temporary plus the consumer's pass."""
        r = cand.data.reduction
        strips = ctx.chosen[r].strategy.name == Strips.name
        return Form.STRIPS if strips and cand.op.body[0].dtype == r.body[0].dtype else Form.ACCUMULATORS

    def lower(self, cand, ctx):
        r = cand.data.reduction
        return Plan([Item(cand.op, cand.bodies, reduction=r, epilogue=cand.data.epilogue,
                          form=self._form(cand, ctx))], absorbs=(r,))


class ProductEpilogue:
    """An elementwise consumer of a matrix product (``gelu(X @ W + b)``, a gradient's
    ``dY * f'(u)`` after its product) applied by the product itself: the micro-kernel's driver
    calls a finisher on each block of C it completes (all of ``k`` summed, the block still in
    cache), which replaces C by the consumer's value in place (:mod:`.gemm.microkernel`).  C lives in
    the consumer's buffer, so the product's temporary and the consumer's pass over memory are
    gone.  The product must be planned as the micro-kernel (plain or over padded copies), read
    by nothing else, read by the consumer only at its own index, of the consumer's shape and
    dtype, and not an output; the consumer holds no reduction and no checked gather."""

    name = "product-epilogue"
    PRODUCTS = (MicroKernel.name, PaddedMicroKernel.name)

    def match(self, op, bodies, ctx):
        # the finisher evaluates no reduction, and no gather index under mode="raise", whose
        # run-time test only a nest emits (as the packers)
        if any(n.op is Op.REDUCE or (n.op is Op.DATA_INDEX and n.arg.mode == "raise")
               for n in walk(bodies[0])):
            return []
        fusion = _epilogue_of(self, op, bodies, ctx, lambda r, chosen: chosen.strategy.name in self.PRODUCTS
                              and bodies[0].dtype == r.body[0].dtype)
        return [] if fusion is None else [fusion]

    def cost(self, cand, ctx):
        r = cand.data.reduction
        saved = 2 * _prod(r.shape) / _lanes(ctx, r.body[0].dtype)  # C stored and read once less
        return ctx.costs[r] + loop_cycles(cand.op, cand.bodies, ctx) - saved

    def lower(self, cand, ctx):
        """The product's own plan, its product steps now computing the consumer."""
        r, epilogue = cand.data.reduction, cand.data.epilogue
        inner = ctx.chosen[r].strategy.lower(ctx.chosen[r], ctx)
        steps = [Item(cand.op, cand.bodies, gemm=replace(st.gemm, epilogue=epilogue), reduction=r,
                      epilogue=epilogue, batch_range=st.batch_range)
                 if isinstance(st, Item) and st.op is r and st.gemm is not None else st
                 for st in inner.steps]
        return Plan(steps, inner.alias, absorbs=(r,))


class Scatter:
    """A sum whose output axis a gather index fixes, as a scatter-add (:mod:`.strategies.scatter`): one
    serial add per point of the other axes, instead of a pass over the gathered axis."""

    name = "scatter"

    def match(self, op, bodies, ctx):
        spec = match_scatter(op, bodies)
        return [] if spec is None else [Candidate(self, op, bodies, spec)]

    def cost(self, cand, ctx):
        return float(_prod(v.extent for v in cand.data.loop_vars))  # one add each, no vectors

    def lower(self, cand, ctx):
        return Plan([Item(cand.op, cand.bodies, form=Form.SCATTER)])


def _shifted_read(e: Expr, op: ComputeOp) -> tuple[Tensor, tuple[int, ...]] | None:
    """``(T, c)`` when ``e`` reads ``T[axes + c]`` (each of ``op``'s axes in order, plus a
    constant), else ``None``."""
    if e.op is Op.CAST and e.src[0].dtype == e.dtype:
        e = e.src[0]
    if e.op is not Op.READ or len(e.src) != len(op.axes):
        return None
    offsets = []
    for i, a in zip(e.src, op.axes):
        f = to_linear(i)
        if f.terms != ((a, 1),):
            return None
        offsets.append(f.const)
    return e.arg, tuple(offsets)


def _terms(e: Expr) -> list[Expr]:
    """The terms of a tree of additions, left to right (iterative: a sum of thousands of
    terms takes no Python recursion)."""
    out: list[Expr] = []
    stack = [e]
    while stack:
        x = stack.pop()
        if x.op is Op.ADD:
            stack += [x.src[1], x.src[0]]
        else:
            out.append(x)
    return out


def _zero(e: Expr) -> bool:
    return e.op is Op.CONST and e.arg == 0


class ScatterSum:
    """A sum of scatter-adds read at shifted points (an adjoint's terms, ``X.grad[j] =
    R1[j + 1] + R2[j + 1]``: a max pool's winners and its ties, through the padding) as
    scatter-adds straight into the sum's buffer: one fill, no temporaries, no adding pass."""

    name = "scatter-sum"

    def match(self, op, bodies, ctx):
        if op.is_reduction or len(bodies) != 1 or not op.axes:
            return []
        body = bodies[0]
        if body.op is Op.CAST and body.src[0].dtype == body.dtype:
            body = body.src[0]
        guards, body = peel_masks(body, negated=True)
        guard = all_of(guards)
        specs, absorbed = [], []
        for term in _terms(body):
            found = _shifted_read(term, op)
            if found is None:
                return []
            t, offsets = found
            r = t.op
            chosen = ctx.chosen.get(r)
            if chosen is None or chosen.strategy.name != Scatter.name or r in absorbed \
                    or ctx.readers.get(r) != [op] or t in ctx.outputs or r.num_outputs != 1 \
                    or t.dtype != op.body[0].dtype:
                return []
            spec = shifted(chosen.data, offsets, op.shape)
            if guard is not TRUE:  # (the mask at the point each add lands on)
                spec = replace(spec, guard=substitute(guard, dict(zip(op.axes, spec.target))))
            specs.append(spec)
            absorbed.append(r)
        if not absorbed:
            return []
        return [Candidate(self, op, bodies, tuple(specs), absorbs=tuple(absorbed))]

    def cost(self, cand, ctx):
        fill = _prod(cand.op.shape) / _lanes(ctx, cand.op.body[0].dtype)
        return fill + sum(ctx.costs[r] for r in cand.absorbs)

    def lower(self, cand, ctx):
        reads = tuple(b for r in cand.absorbs for b in ctx.bodies[r])  # (what the nests read)
        return Plan([Item(cand.op, reads, form=Form.SCATTER, scatter=cand.data)], absorbs=cand.absorbs)


class GatheredRows:
    """A product reading rows through a checked gather index (``E[I[i], k] * W[k, j]``, which
    the packers cannot check): the rows copied once (:mod:`.strategies.gathered_rows`), then a plain
    product."""

    name = "gathered"

    def match(self, op, bodies, ctx):
        if not op.is_reduction or len(bodies) != 1:
            return []
        found = gather_rows(op, bodies[0])
        if found is None:
            return []
        copies, product = found
        if any(_prod(a.extent for a in c.axes) > ctx.largest for c in copies):
            return []  # (a temporary never outgrows the kernel's arguments)
        spec = default_spec(product, product.body, ctx)
        return [] if spec is None else [Candidate(self, op, bodies, (copies, product, spec))]

    def cost(self, cand, ctx):
        copies, _, spec = cand.data
        return contraction_cycles(spec, ctx) + sum(loop_cycles(c, c.body, ctx) for c in copies)

    def forced(self, cand, ctx):  # (rows copied so that the micro-kernel applies)
        return 2 if ctx.opts.microkernel is True else 0

    def lower(self, cand, ctx):
        copies, product, _ = cand.data
        return Plan([Open(c, c.body) for c in copies] + [Open(product, product.body)],
                    alias={product: cand.op})


class Hoist:
    """An elementwise op whose transcendental subexpression depends on fewer axes than the op
    (a log-softmax over NCHW's channels: ``log(s[n, y, x])`` for every channel): that part
    computed once per point of its own axes into a temporary (:mod:`.strategies.hoist`), then the op
    reading it; both planned in turn."""

    name = "hoist"

    def match(self, op, bodies, ctx):
        if len(bodies) != 1 or (found := hoist_invariants(op, bodies[0])) is None:
            return []
        temps, rest = found
        return [Candidate(self, op, bodies, (temps, rest))]

    def cost(self, cand, ctx):
        temps, rest = cand.data
        return sum(loop_cycles(t, t.body, ctx) for t in temps) + loop_cycles(rest, rest.body, ctx)

    def lower(self, cand, ctx):
        temps, rest = cand.data
        return Plan([Open(t, t.body) for t in temps] + [Open(rest, rest.body)], alias={rest: cand.op})


def _carries_every_value(op, bodies) -> bool:
    """Whether ``op`` computes each value of its combiner as an output of its own, in order
    (one value: one body), so that a scan can carry them all (:func:`.strategies.scan.scan_buffers`)."""
    comb = bodies[0].arg.combiner
    return len(bodies) == comb.arity == op.num_outputs \
        and all(b.arg.value_index == v and b.dtype == d for v, (b, d) in enumerate(zip(bodies, comb.dtypes)))


class Scan:
    """A reduction whose terms nest along an output axis (a prefix or suffix sum, ``k <= j``)
    as a running value carried along that axis (:mod:`.strategies.scan`): one update per new term."""

    name = "scan"

    def match(self, op, bodies, ctx):
        if not op.is_reduction or not _carries_every_value(op, bodies):
            return []
        key = ("scan", op, bodies)
        if key not in ctx.memo:
            info = reduction_domain(op, bodies, [None] * len(bodies)).reduction
            spec = find_scan(info, ordered=not ctx.opts.fastmath)
            ctx.memo[key] = spec if spec is not None and info.acc.dtype == bodies[0].dtype else None
        spec = ctx.memo[key]
        return [] if spec is None else [Candidate(self, op, bodies, spec)]

    def cost(self, cand, ctx):
        """Each update and each point's carried copy, vectorized across the output axes after
        the scanned one (a scan along the last axis is a scalar chain)."""
        spec, op = cand.data, cand.op
        vector = spec.axis < len(op.axes) - 1
        lanes = _lanes(ctx, op.body[0].dtype) if vector else 1
        access = access_cost(_reads(cand.bodies), op.axes[-1], strides) if vector else 1
        points = _prod(a.extent for a in op.axes)
        return (spec.updates * (2 + access + _heavy(cand.bodies)) + 2 * points) / lanes

    def lower(self, cand, ctx):
        return Plan([Item(cand.op, cand.bodies, form=Form.SCAN)])


RESERVED_REGISTERS = 4  # vector registers a tap stream keeps for its loads and products


class _Taps(ABC):
    """What both tap strategies share: under fast math only (their sums add in another order
    than the plain loops: a skipped term adds no zero, ``-0.0`` stays ``-0.0``), one sum
    matched once per planning call; the target's vector registers less
    :data:`RESERVED_REGISTERS` hold the taps (one accumulator each, or one weight each)."""

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
    """A sum whose output axes include a few *taps* that shift its reads (a depthwise
    convolution's weight gradient) as one stream over the taps' common interior with one vector
    accumulator per tap, its border, and a gather (:func:`.strategies.stencil.split_taps`)."""

    name = "taps"

    def _make(self, op, body, ctx):
        return split_taps(op, body, self._budget(ctx), _lanes(ctx, body.dtype))

    def cost(self, cand, ctx):
        """Per interior point ``K`` multiply-adds and ``K + 1`` reads (a vector each), the
        border's share of the plain loops, and the gather."""
        split = cand.data
        lanes = _lanes(ctx, cand.op.body[0].dtype)
        stream = split.interior_points * (1 + 2 * split.taps) / lanes
        border = loop_cycles(split.border, split.border.body, ctx) * split.border_fraction
        return stream + border + loop_cycles(split.gather, split.gather.body, ctx)

    def lower(self, cand, ctx):
        split = cand.data
        return Plan([Open(split.interior, split.interior.body), Open(split.border, split.border.body),
                     Open(split.gather, split.gather.body)], alias={split.gather: cand.op})


class TapStencil(_Taps):
    """The dual: a sum over a few taps that shift its reads (a depthwise or grouped
    convolution's input gradient, its forward) as one elementwise op adding a term per tap,
    its guards decided per piece of the box (:func:`.strategies.stencil.unroll_taps`): the interior is one
    vectorized loop with the taps' invariant factors in registers (or loaded, past them)."""

    name = "stencil"

    def _make(self, op, body, ctx):
        return unroll_taps(op, body, reread_limit=ctx.target.l2 // 2)

    def cost(self, cand, ctx):
        """The plain loops of the unrolled op (for a sum over channels around the taps, in
        the better of its two loop orders), plus a load per point for each loop-invariant
        factor past the registers (:data:`RESERVED_REGISTERS` kept for the stream)."""
        unrolled = cand.data
        own = loop_cycles(unrolled, unrolled.body, ctx)
        if unrolled.is_reduction:  # (channels summed around the taps: the better loop order)
            own = min(own, loop_cycles(unrolled, unrolled.body, ctx, Form.STRIPS))
        if not unrolled.axes:
            return own
        inner = unrolled.axes[-1]
        invariant = {r for r in _reads(unrolled.body) if inner not in free_vars(r)}
        spilled = max(0, len(invariant) - self._budget(ctx))
        return own + _prod(a.extent for a in unrolled.axes) * spilled / _lanes(ctx, unrolled.body[0].dtype)

    def lower(self, cand, ctx):
        return Plan([Open(cand.data, cand.data.body)], alias={cand.data: cand.op})


REGISTRY = (Loops(), Strips(), CollapsedLoops(), MicroKernel(), PaddedMicroKernel(), SplitK(), Parity(),
            ParityLoops(), EpilogueFusion(), ProductEpilogue(), Scatter(), ScatterSum(), GatheredRows(),
            Hoist(), Scan(), TapAccumulators(), TapStencil(), TermSplit())


__all__ = ["REGISTRY", "loop_cycles", "contraction_cycles", "PLAN_THREADS"]
