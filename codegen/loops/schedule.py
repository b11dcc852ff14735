"""Schedule choices for one nest: loop order and which loop runs in parallel.

The natural schedule puts the output axes in order and, for a reduction, a scalar accumulator per output
element with the reduction axes innermost.  When the last *output* axis walks memory better
(``A[i, k] * B[k, j]``, pooling windows), the reduction accumulates in the output buffer with that axis
innermost, in strips that stay in L1 (``for i, jt: C[i, strip] = identity; for k: C[i, strip] +=
A[i, k] * B[k, strip]``, the fill bookkeeping).  Each element combines its terms in the order of the
reduction axes.  The outermost output axis (or strip) is the parallel loop."""

from __future__ import annotations

import math
from contextvars import ContextVar
from dataclasses import replace

from tensorad.ir.dtype import bits
from tensorad.ir.expr import TRUE, UNARY_MATH, Expr, Op, compare, const, logical
from tensorad.ir.rewrite import substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.poly.affine import IndexSpace
from tensorad.poly.linear import var_coefficients

from ..options import Options
from ..program import Buffer, If, Loop, NestAttrs, Store
from ..strategies.registry import ReductionNest, ScanNest, Step
from ..strategies.scan import find_scan, pinned_row_lanes, rows_in_registers, scan_buffers, scan_form
from ..target import parse_target
from .domain import OpDomain, PolyStmt, ReductionInfo

# ---- stride analysis -------------------------------------------------------------------------

def access_cost(reads: list[Expr], v: Expr, strides_of) -> int:
    """How badly an innermost loop over ``v`` accesses memory, per read: 0 invariant, 1 unit
    stride, 2 a small stride (interleaved loads and shuffles), 3 anything else (gathers)."""
    cost = 0
    for r in reads:
        stride, known = 0, True
        for idx, s in zip(r.src, strides_of(r.arg)):
            co = var_coefficients(idx)
            if co is None:
                known = known and v not in {n for n in walk(idx) if n.op is Op.VAR}
                continue
            stride += co.get(v, 0) * s
        if not known:
            cost += 3
        else:
            cost += 0 if stride == 0 else 1 if abs(stride) == 1 else 2 if abs(stride) <= 4 else 3
    return cost


def prefer_buffer_form(info: ReductionInfo, strides_of, outputs: list) -> bool:
    """Accumulate into the output with the last output axis innermost when that accesses memory better
    (one value: a tuple takes the form where its strategy chose it, :func:`.strategies.cost.strip_costs`)."""
    can = info.combiner.arity == 1 and _buffer_can_accumulate(info, outputs)
    o, r = (info.outer[-1], info.raxes[-1]) if can else (None, None)
    if o is None or o.extent < 8:
        return False
    reads = [n for s in info.sources + (info.rest,) for n in walk(s) if n.op is Op.READ]
    cost_acc, cost_buf = strip_access_costs(reads, o, r, strides_of)
    return cost_buf < cost_acc


STRIP_ACCESS = 0.5


def strip_access_costs(reads: list[Expr], o: Expr, r: Expr, strides_of) -> tuple[float, float]:
    """``(accumulators, strips)``: the access costs of a reduction's two loop orders, the last reduction
    axis innermost (:func:`accumulator_access`) or the last output axis (:data:`STRIP_ACCESS`; wins ties)."""
    return accumulator_access(reads, r, strides_of), access_cost(reads, o, strides_of) + STRIP_ACCESS


def accumulator_access(reads: list[Expr], r: Expr, strides_of) -> int:
    """The access cost of an accumulating loop over the reduction axis ``r``: :func:`access_cost`, 4 more
    when it runs 2 to 7 times (too short to vectorize; an axis of one point is no loop)."""
    return access_cost(reads, r, strides_of) + (4 if 1 < r.extent < 8 else 0)


def store_order(comb) -> list[int] | None:
    """An order in which the results of ``comb`` can be stored in place of its accumulated values: each
    component after every other one whose result reads its old value (a max's value after its tie
    code, which compares with it); ``None`` when two read each other's."""
    readers = {c: {d for d, r in enumerate(comb.result) if d != c and any(n is comb.lhs[c] for n in walk(r))}
               for c in range(comb.arity)}
    order: list[int] = []
    while len(order) < comb.arity:
        ready = [c for c in readers if c not in order and readers[c] <= set(order)]
        if not ready:
            return None
        order += ready
    return order


def _buffer_can_accumulate(info: ReductionInfo | None, outputs: list) -> bool:
    """Whether the output buffers can hold the accumulators of ``info`` (one value, a fused epilogue's output
    of its dtype, the sum no output; or several without an epilogue, each stored, in :func:`store_order`)."""
    if info is None or not info.outer or not info.raxes or outputs[0] is None:
        return False
    if info.combiner.arity == 1:
        return info.epilogue is None or (outputs[0].dtype == info.acc.dtype and not info.epilogue.keep)
    return info.epilogue is None and not info.pieces and len(outputs) == info.combiner.arity \
        and all(b is not None for b in outputs) and store_order(info.combiner) is not None


def buffer_form(info: ReductionInfo, outs: list[Buffer], tile_elems: int) -> list[PolyStmt]:
    """``out[o] = identity`` (unless filled), then ``out[o] = combine(out[o], src)`` with the
    schedule ``[o0, .., floor(o_last / T), phase, r..., o_last]``; a tuple's components each in its
    output, stored in a :func:`store_order`."""
    outer, raxes = info.outer, info.raxes
    o_last = outer[-1]
    comb = info.combiner
    out = outs[0]
    here = tuple(Expr(Op.READ, b.dtype, outer, b.tensor) for b in outs[:comb.arity])
    tiled = o_last.extent > tile_elems
    head = tuple(outer[:-1]) + ((o_last // tile_elems,) if tiled else ())
    zeros = (0,) * len(raxes)
    stmts = []
    pieces = [(f"Ug{k}", piece, (there,)) for k, (piece, there) in enumerate(info.pieces)]
    for name, domain, sources in pieces or [("U", info.update_domain, info.sources)]:
        mapping = {**dict(zip(comb.lhs, here)), **dict(zip(comb.rhs, sources))}
        update: tuple = tuple(Store(outs[c], outer, substitute(comb.result[c], mapping))
                              for c in store_order(comb))
        if info.rest is not TRUE:
            update = (If(info.rest, update, (), affine=False),)
        stmts.append(PolyStmt(name, outer + raxes, domain, update, head + (1,) + raxes + (o_last,)))
    if not info.filled:
        init = tuple(Store(b, outer, e, counted=False) for b, e in zip(outs, comb.identity))
        stmts.insert(0, PolyStmt("I", outer, info.outer_domain, init, head + (0,) + zeros + (o_last,)))
    if info.epilogue is not None:
        final = Store(out, outer, substitute(info.epilogue_value, {info.acc: here[0]}), counted=False)
        stmts.append(PolyStmt("E", outer, info.outer_domain, (final,), head + (2,) + zeros + (o_last,)))
    return stmts


STRIP_L1_SHARE = 2   # the accumulated strip of the buffer form stays in half of the target's L1
PARALLEL_STRIPS = 4   # a one-axis output is cut into this many strips, so threads can share it
MIN_STRIP = 64


def strip_length(extent: int, dtype: str, single_axis: bool, l1d: int, line: int = 64) -> int:
    """Elements of the output strip the buffer form accumulates at once: a one-axis output is cut into
    ``PARALLEL_STRIPS`` strips for the threads while a strip keeps ``MIN_STRIP`` elements, of whole lines."""
    size = max(1, bits(dtype) // 8)
    tile = l1d // STRIP_L1_SHARE // max(4, size)
    if single_axis:
        per_line = max(1, line // size)
        want = -(-max(MIN_STRIP, -(-extent // PARALLEL_STRIPS)) // per_line) * per_line
        tile = min(tile // per_line * per_line, want)
    return max(MIN_STRIP, tile)


def schedule_nest(op: ComputeOp, dom: OpDomain, outputs: list, opts: Options, allow_buffer: bool = True,
                  fuse_outer: bool = True, plan: Step | None = None, strips_share: int = 1
                  ) -> tuple[list, NestAttrs]:
    """The statements to scan and the nest's attributes.  ``allow_buffer=False`` keeps scalar accumulators (a
    fused nest reads them); ``fuse_outer=False`` leaves outer loops alone, as :data:`ROWS_APART` does;
    ``plan``: the strategy's loop order (else :func:`prefer_buffer_form`); ``strips_share``: strips sharing
    the L1."""
    stmts = dom.stmts
    info = dom.reduction
    if info is None or not allow_buffer or outputs[0] is None or isinstance(plan, ScanNest):
        wanted = False
    elif isinstance(plan, ReductionNest):
        wanted = plan.strips and _buffer_can_accumulate(info, outputs)
    else:
        wanted = prefer_buffer_form(info, strides, outputs)
    scan = isinstance(plan, ScanNest) and info is not None and allow_buffer
    outs = scan_buffers(info, outputs) if scan else None
    spec = find_scan(info, ordered=not opts.fastmath) if outs is not None else None
    if spec is not None:  # (a running reduction: parallel over an output axis before the scanned one)
        note = f"scanned along {info.outer[spec.axis].name}{' downwards' if spec.step < 0 else ''}"
        in_registers = rows_in_registers(spec, len(info.outer))
        row_lanes = None
        if in_registers:
            rows = math.prod(v.extent for v in info.outer[:-1])
            lanes = pinned_row_lanes(info.combiner, rows, opts.target or parse_target())
            if lanes is not None:
                row_lanes = (lanes, len(info.outer) - 1)
        attrs = NestAttrs(note, 0 if spec.axis > 0 else -1, row_lanes=row_lanes)
        return scan_form(info, outs, spec, dom.accumulators, in_registers), attrs
    if wanted:
        out = outputs[0]
        target = opts.target or parse_target()
        tile = strip_length(info.outer[-1].extent, out.dtype, single_axis=len(op.axes) == 1,
                            l1d=target.l1d // strips_share, line=target.line)
        stmts = buffer_form(info, outputs, tile)
        note = "accumulates in the output, innermost loop over its last axis"
        if len(op.axes) == 1 and op.axes[0].extent <= tile:
            return stmts, NestAttrs(note)  # the outermost loop runs over the reduction: not parallel
    else:
        note = ""
    if op.axes:
        if fuse_outer and not ROWS_APART.get():
            stmts = fuse_short_outer(stmts)
        return stmts, NestAttrs(note, 0)
    return stmts, NestAttrs(note)


FUSE_BELOW = 8
# set while lowering lowers a block of rows again whose fused loops the row count cannot bound
# (:mod:`..passes.row_bound`): each nest's outer loops stay apart
ROWS_APART: ContextVar[bool] = ContextVar("rows_apart", default=False)


def fuse_short_outer(stmts: list[PolyStmt]) -> list[PolyStmt]:
    """Scan the first two output axes as one loop (time ``a0 * E1 + a1``) when the first is too short to
    share among threads, and a third time dimension scanning an axis stays inside (innermost unit stride)."""
    def axis(t):
        return isinstance(t, Expr) and t.op is Op.VAR and t.lo == 0

    first = [s.schedule for s in stmts]
    if not first or not all(len(t) >= 3 and axis(t[0]) and axis(t[1]) for t in first):
        return stmts  # (no statement: an op computed at no point)
    a0, a1 = first[0][0], first[0][1]
    if any(t[0] is not a0 or t[1] is not a1 for t in first) or a0.extent >= FUSE_BELOW:
        return stmts
    if not any(axis(x) for t in first for x in t[2:]):
        return stmts
    fused = a0 * a1.extent + a1
    return [PolyStmt(s.name, s.vars, s.domain, s.body, (fused,) + tuple(s.schedule[2:])) for s in stmts]


def strides(t: Tensor) -> tuple[int, ...]:
    return tuple(math.prod(t.shape[d + 1:]) for d in range(len(t.shape)))


HEAVY = UNARY_MATH | {Op.POW}
HEAVY_WEIGHT = 4  # a vectorized exp costs about as much as 4 vector loads, stores or adds


def work_weight(exprs) -> int:
    """How many plain innermost-body executions one of a body with ``exprs`` is worth for the parallel
    threshold: 1, plus ``HEAVY_WEIGHT`` per transcendental function."""
    heavy = sum(1 for e in exprs for n in walk(e) if n.op in HEAVY)
    return 1 + HEAVY_WEIGHT * min(heavy, 4)


def mark_parallel(body: tuple, attrs: NestAttrs, opts: Options, work: int, weight: int = 1
                  ) -> tuple[tuple, NestAttrs]:
    """Mark the outermost loop parallel when it is the only top statement, has constant bounds, scans the
    time dimension ``attrs.parallel_dim`` (an output axis), and the nest has at least
    ``opts.parallel_min_work`` (times ``weight``, :func:`work_weight`) to share: ``attrs`` then get its
    ``(lo, hi, step)`` as their ``range`` (it is shared among threads)."""
    loop = body[0] if len(body) == 1 and isinstance(body[0], Loop) else None
    if not opts.parallel or work * weight < opts.parallel_min_work or loop is None \
            or loop.lo.op is not Op.CONST or loop.hi.op is not Op.CONST or loop.hi.arg - loop.lo.arg < 2 \
            or loop.dim != attrs.parallel_dim:
        return body, attrs
    attrs = replace(attrs, range=(int(loop.lo.arg), int(loop.hi.arg), loop.step))
    return (Loop(loop.var, loop.lo, loop.hi, loop.body, loop.step, "parallel", loop.dim),), attrs


def restrict_batch(stmts: list[PolyStmt], axis: Expr, lo: int, hi: int) -> list[PolyStmt]:
    """The statements restricted to ``lo <= axis < hi`` (statements without ``axis`` as they stand)."""
    keep = logical(Op.AND, compare(Op.GE, axis, const(lo)), compare(Op.LT, axis, const(hi)))
    return [st if axis not in st.vars else PolyStmt(
        st.name, st.vars, st.domain.intersect(IndexSpace(st.vars).cond(keep)), st.body, st.schedule)
        for st in stmts]
