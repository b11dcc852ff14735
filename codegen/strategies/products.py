"""Strategies of matrix products: the packed micro-kernel, plain, padded, split in halves, per residue
class (and the same as loops), term by term, and over copied gathered rows; the candidates they share."""

from __future__ import annotations

import math

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import walk
from tensorad.ir.tensor import ComputeOp

from ..gemm.contraction import Contraction, match_contraction, operand_registers, pad_contraction, worth_it
from ..gemm.splitk import split_k, wants_split
from ..loops.domain import where_density
from ..loops.stripmine import plan_split
from .cost import contraction_cycles, loop_cycles, padded_cycles, vector_lanes
from .gathered_rows import gather_rows
from .parity import decompose, residue_moduli, shared_padding
from .registry import Candidate, Open, Plan, PlanContext, PointwiseNest, ProductCall, pieces_then
from .term_split import shared_factor, split_terms

# variants offered to tune=True: (MR, NR in vectors, KC) around the register tile's default
TILE_VARIANTS = ((None, None, 512), ("mr+2", 2, None), (None, 1, None))


def _tiles(spec: Contraction, ctx: PlanContext) -> list[tuple[str, tuple]]:
    """Other ``(MR, NR, KC, MC)`` tiles for ``spec`` that fit the target's registers."""
    lanes = vector_lanes(ctx, spec.dtype)
    regs = ctx.target.vector_registers
    out = []
    for mr, nv, kc in TILE_VARIANTS:
        nv = nv if nv is not None else max(1, spec.nr // lanes)
        mr = spec.mr if mr is None else min(8, (regs - operand_registers(ctx.target) - nv) // nv)
        tile = (mr, nv * lanes, kc or spec.kc, max(mr, spec.mc // mr * mr) if mr >= 1 else None)
        if mr >= 1 and tile[:3] != (spec.mr, spec.nr, spec.kc) and \
                tile not in [t for _, t in out]:
            out.append((f"{mr}x{nv * lanes}k{tile[2]}", tile))
    return out


def contraction_specs(op: ComputeOp, bodies: tuple, ctx: PlanContext) -> list[tuple[str, Contraction]]:
    """``(variant, spec)`` of every micro-kernel tiling of ``op`` (the default first), if one is worth it."""
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
    """Whether the terms of ``op``'s sum (:func:`.loops.domain.where_density`) are under
    ``SPARSE_PRODUCT`` of the multiply-adds the micro-kernel runs over the box or its rows' band
    (:attr:`.Contraction.band`), the excluded ones as packed zeros; plain loops scan the domain alone."""
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

    def lower(self, cand, ctx):
        return Plan([ProductCall(cand.op, cand.bodies, cand.data)])


class PaddedMicroKernel:
    """The micro-kernel reading zero-padded copies of its range-guarded sides (:mod:`.gemm.padding`), per
    chunk of the batch where a whole copy would outgrow the arguments."""

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

    def lower(self, cand, ctx):
        return padded_plan(cand.op, cand.bodies, cand.data)


def padded_plan(op: ComputeOp, bodies: tuple, pieces: list) -> Plan:
    """The steps of :func:`.gemm.contraction.pad_contraction`'s pieces: each one's copies, then its
    product."""
    steps: list = []
    alias = {}
    first_chunk = None
    for copies, spec, batch_range in pieces:
        for copy in copies:
            steps.append(PointwiseNest(copy, copy.body, plan_split(tuple(copy.axes), copy.body)))
        if batch_range is not None:  # the chunks' copies (each piece's last) share the first one's buffer
            first_chunk = first_chunk or copies[-1]
            if copies[-1] is not first_chunk:
                alias[copies[-1]] = first_chunk
        steps.append(ProductCall(op, bodies, spec, batch_range))
    return Plan(steps, alias)


class SplitK:
    """A long product whose few, odd parallel blocks threads would share unevenly, summed in
    two halves along its first reduction axis (:mod:`.gemm.splitk`), then added."""

    name = "split-k"

    def match(self, op, bodies, ctx):
        if not ctx.opts.parallel or ctx.opts.rows:  # (a generic kernel's block: halves run no count of rows)
            return []
        spec = default_spec(op, bodies, ctx)
        if spec is None or not wants_split(spec):
            return []
        part, total = split_k(op, bodies[0])
        part_spec = default_spec(part, part.body, ctx)
        return [] if part_spec is None else [Candidate(self, op, bodies, (part, part_spec, total))]

    def cost(self, cand, ctx):
        part, part_spec, total = cand.data
        return contraction_cycles(part_spec, ctx) + loop_cycles(total, total.body, ctx)

    def lower(self, cand, ctx):
        return pieces_then([cand.data[0]], cand.data[2], cand.op)


class _Pieces:
    """Candidates whose data is ``(pieces, their product specs, the op that gathers or adds them)``: the
    pieces planned in turn, then that op, in ``op``'s buffer."""

    def cost(self, cand, ctx):
        pieces, specs, last = cand.data
        return sum(contraction_cycles(s, ctx) for s in specs) + loop_cycles(last, last.body, ctx)

    def lower(self, cand, ctx):
        return pieces_then(cand.data[0], cand.data[2], cand.op)


class Parity(_Pieces):
    """A strided convolution's input gradient as one product per residue class of its output
    (:mod:`.strategies.parity`) and a gather, when every class is one; also beside a product whose guards
    zero most of its terms, where the classes' products are shorter."""

    name = "parity"

    def match(self, op, bodies, ctx):
        if not op.is_reduction or len(bodies) != 1:
            return []
        found = decompose(op, bodies[0], lambda piece: default_spec(piece, piece.body, ctx), ctx.memo)
        return [] if found is None else [Candidate(self, op, bodies, found)]

    def lower(self, cand, ctx):
        pieces, specs, gather = cand.data
        shared = shared_padding(specs, ctx.largest)
        if shared is None:
            return pieces_then(pieces, gather, cand.op)
        copy, padded = shared  # (the classes reading one copy are products of it)
        steps = [ProductCall(p, p.body, padded[k]) if k in padded else Open(p, p.body)
                 for k, p in enumerate(pieces)]
        return Plan([PointwiseNest(copy, copy.body, plan_split(tuple(copy.axes), copy.body)), *steps,
                     Open(gather, gather.body)], alias={gather: cand.op})


class TermSplit(_Pieces):
    """A sum of terms that are products, and no product itself: one product per term, then the adding pass
    (:mod:`.strategies.term_split`); fast math only."""

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
        return [] if any(s is None for s in specs) else [Candidate(self, op, bodies, (parts, specs, total))]


class SharedFactor:
    """A sum of terms that are products sharing a factor, and no product itself: one product of the
    added cofactors and that factor (:func:`.strategies.term_split.shared_factor`), or of copies of its sides
    as the padded strategy makes them (``:copied``); fast math only."""

    name = "shared-factor"

    def match(self, op, bodies, ctx):
        if not ctx.opts.fastmath or not op.is_reduction or len(bodies) != 1 \
                or default_spec(op, bodies, ctx) is not None:
            return []
        body = shared_factor(bodies[0])
        if body is None:
            return []
        spec = default_spec(op, (body,), ctx)
        if spec is None:
            return []
        pieces = pad_contraction(spec, ctx.largest)
        copied = [Candidate(self, op, (body,), pieces, "copied")] if pieces[0][0] or len(pieces) > 1 else []
        return [Candidate(self, op, (body,), [([], spec, None)])] + copied

    cost, lower = PaddedMicroKernel.cost, PaddedMicroKernel.lower  # (its candidates' data are pieces too)


def _box(op: ComputeOp) -> int:
    """Points of ``op``'s loop box, its reduction's axes included."""
    red = op.body[0]
    inner = math.prod(a.extent for a in red.arg.axes) if red.op is Op.REDUCE else 1
    return math.prod(a.extent for a in op.axes) * inner


def _reads_divided(body: Expr) -> bool:
    """Whether ``body`` reads at an index that divides or takes a remainder (not only tests one)."""
    return any(n.op is Op.READ and any(m.op in (Op.FLOORDIV, Op.MOD) for i in n.src for m in walk(i))
               for n in walk(body))


class ParityLoops(_Pieces):
    """A reduction that reads its output axes divided and remaindered (a strided depthwise convolution's
    input gradient) as one affine reduction per residue class (:mod:`.strategies.parity`) and a gather."""

    name = "parity-loops"

    def match(self, op, bodies, ctx):
        if not op.is_reduction or len(bodies) != 1 or not _reads_divided(bodies[0]):
            return []
        lanes = vector_lanes(ctx, bodies[0].dtype)
        if any(ax.extent // m < lanes for ax, m in residue_moduli(op, bodies[0]).items()):
            return []  # (a class shorter than a vector: nothing to gain, a gather to pay)
        found = decompose(op, bodies[0], lambda piece: piece, ctx.memo)
        if found is None or sum(_box(p) for p in found[0]) + _box(found[2]) >= _box(op):
            return []  # (no taps saved: a grouped convolution's classes are as long as its sum)
        return [Candidate(self, op, bodies, found)]

    def cost(self, cand, ctx):
        pieces, _, gather = cand.data
        best = sum(min(loop_cycles(p, p.body, ctx), loop_cycles(p, p.body, ctx, strips=True)) for p in pieces)
        return best + loop_cycles(gather, gather.body, ctx)


class GatheredRows:
    """A product reading rows through a checked gather index: the rows copied once, then a plain product."""

    name = "gathered"

    def match(self, op, bodies, ctx):
        if not op.is_reduction or len(bodies) != 1:
            return []
        if (found := gather_rows(op, bodies[0])) is None:
            return []
        copies, product = found
        held = max([ctx.largest, *(math.prod(a.extent for a in o.axes) for o in ctx.position)])
        if any(math.prod(a.extent for a in c.axes) > held for c in copies):
            return []  # (a copy never outgrows the program's arguments and the buffers it holds anyway)
        spec = default_spec(product, product.body, ctx)
        return [] if spec is None else [Candidate(self, op, bodies, (copies, product, spec))]

    def cost(self, cand, ctx):
        copies, _, spec = cand.data
        return contraction_cycles(spec, ctx) + sum(loop_cycles(c, c.body, ctx) for c in copies)

    def lower(self, cand, ctx):
        return pieces_then(cand.data[0], cand.data[1], cand.op)
