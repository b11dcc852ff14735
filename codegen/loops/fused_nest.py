"""Lowering one fused group (:mod:`.loops.nest_groups`) to a single nest.

Each member's statements come from its own domain and schedule, prefixed with the member's tau and its
position in the group (softmax: ``max: I[i] -> [i, 0, i, 0, 0]``, ``U[i, k] -> [i, 0, i, 1, k]``;
``exp: S[i, j] -> [i, 1, i, j, 0]``; ...), and isl scans the union once.  Reads of a reduction whose value
at a prefix point is one element read its accumulators.  A short first prefix axis is scanned as one
with the second.  Work is counted per member.

Column sums (:func:`.loops.nest_groups.column_sum`) run last in each row, in the innermost loop of the
last elementwise member over the same columns when there is one.  A parallel pass is cut into at most
:data:`PARTIAL_CHUNKS` chunks of consecutive rows (a fixed count: the thread count is set when a kernel
runs), each adding into its own row ``P[c, :]`` of partial columns (a temporary filled with the
combiner's identity); a nest after it adds the rows into the output in chunk order.  A serial pass
accumulates in the output.  The combining is bookkeeping: ``work`` stays the terms'."""

from __future__ import annotations

import math
from dataclasses import replace

from tensorad.ir.expr import TRUE, Expr, Op, const, var
from tensorad.ir.rewrite import replace_reads, substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.lang import placeholder

from ..options import Options
from ..program import Buffer, Fill, If, Loop, Nest, NestAttrs, Store, map_stmt, owned
from ..strategies.registry import EpilogueStep, PointwiseNest, ReductionNest, kept_outs
from ..target import parse_target
from .coalesce import only_merged, unit_split
from .domain import PolyStmt, op_domain
from .isl_ast import build_loops
from .nest_groups import Group
from .schedule import FUSE_BELOW, mark_parallel, schedule_nest, work_weight
from .shared_nests import marked
from .work import count_work


def _box_work(group: Group) -> int:
    """An upper bound of the group's work: each member's box of outer and reduction axes."""
    return sum(math.prod(a.extent for a in u.outer + tuple(u.plan.core.op.reduce_axes))
               for u in group.units)


def _scalarized(body: Expr, acc_of: dict[Tensor, Expr]) -> Expr:
    """``body`` reading the accumulators ``acc_of`` gives for the reductions it reads (none: unchanged)."""
    return body if not acc_of else replace_reads(body, lambda n: acc_of.get(n.arg))


def _scanned(u, split) -> tuple | None:
    """The variables ``u``'s statements scan when it is elementwise and scanned as its own axes
    in order, no digits (its last two perhaps as one loop, :mod:`.loops.coalesce`), else ``None``."""
    if not isinstance(u.plan, PointwiseNest):
        return None
    if split is None:
        return tuple(u.op.axes)
    return tuple(split.vars) if only_merged(split) else None


def _pointwise(u, tau, member, split=None) -> bool:
    """Whether ``u`` is elementwise, scanned as its own axes in order (its prefix among them)."""
    axes = _scanned(u, split)
    return axes is not None and all(v in axes for v in tau) and all(
        tuple(st.vars) == axes and tuple(st.schedule[:-1]) == axes and isinstance(st.schedule[-1], int)
        for st in member)


def shared_positions(members: list, alias: dict | None = None) -> list[int | None]:
    """Per member ``(unit, tau, statements, bodies, split)``: the position of the earlier member whose
    inner loops it shares, or ``None`` (``alias``: a unit's op -> the op it writes for).  Consecutive
    elementwise members of one shape share when each reads the run's earlier members at its point only."""
    alias = alias or {}
    runs: list[list[int]] = []
    run: list[int] = []
    for g, (u, tau, member, bodies, split) in enumerate(members):
        if run:
            p, ptau, _, _, psplit = members[run[0]]
            ok = _pointwise(u, tau, member, split)
            if ok:  # (the same loops: the same extents scanned, the prefix at the same places)
                axes, paxes = list(_scanned(u, split)), list(_scanned(p, psplit))
                ok = u.op.shape == p.op.shape and [v.extent for v in axes] == [v.extent for v in paxes] \
                    and [axes.index(v) for v in tau] == [paxes.index(v) for v in ptau]
            if ok:
                inside = {alias.get(members[k][0].op, members[k][0].op) for k in run}
                own = tuple(u.op.axes)
                ok = all(n.src == own for b in bodies for n in walk(b)
                         if n.op is Op.READ and alias.get(n.arg.op, n.arg.op) in inside)
            if ok:
                run.append(g)
                continue
        run = [g] if _pointwise(u, tau, member, split) else []
        runs.append(run)
    out: list[int | None] = [None] * len(members)
    for run in runs:
        if len(run) > 1:
            for k in run:
                out[k] = run[0]
    return out


def _loop_shape(tau, member) -> tuple | None:
    """The loops a reduction member's statements run inside the prefix (per statement with a loop, its
    schedule past the prefix, variables by range), or ``None``."""
    fixed = set(tau)
    looped = []
    for st in member:
        own = tuple(0 if isinstance(t, Expr) and t in fixed else t for t in st.schedule)
        if any(isinstance(t, Expr) and t.op is not Op.VAR for t in own):
            return None  # (a schedule dimension that is not a loop variable: not compared)
        if any(isinstance(t, Expr) for t in own):
            looped.append(tuple(t.dom if isinstance(t, Expr) else t for t in own))
    return tuple(looped) or None


def shared_reductions(members: list, accumulators: list, epilogues: list,
                      alias: dict | None = None) -> dict[int, int]:
    """Sibling reductions in one pass: member -> the earlier member whose loops it shares.  Consecutive
    reductions whose statements run in the same loops, none reading what an earlier one computes, share
    them (a layer norm's backward sums ``H * xhat * gamma`` and ``H * gamma`` in one loop).  Each member's
    statements keep their order (the member index is the schedule's last dimension).  A fused epilogue
    (``epilogues``) may read an earlier member's result only where the update is alone in a loop."""
    alias = alias or {}
    out: dict[int, int] = {}
    run: list[int] = []
    shape = None
    for g, (u, tau, member, bodies, split) in enumerate(members):
        mine = None
        if isinstance(u.plan.core, ReductionNest) and split is None:
            mine = _loop_shape(tau, member)
        if mine is not None and run and mine == shape:
            written = {alias.get(members[k][0].op, members[k][0].op) for k in run}
            accs = {a for k in run for a in accumulators[k]}
            own = alias.get(u.op, u.op)
            reads = tuple(bodies) + (tuple(epilogues[g]) if len(mine) > 1 else ())
            if own not in written and not any(
                    n in accs or (n.op is Op.READ and alias.get(n.arg.op, n.arg.op) in written)
                    for b in reads for n in walk(b)):
                run.append(g)
                out[g] = run[0]
                continue
        run, shape = ([g], mine) if mine is not None else ([], None)
    return out


def lower_group(group: Group, bodies: dict, outs_of, scalar: set[ComputeOp], opts: Options,
                scans: dict | None = None, alias: dict | None = None) -> list | None:
    """The steps (fills, then one nest) computing every member of ``group``, or ``None``
    (``alias``: a unit's op -> the op whose tensors it writes, which later members read)."""
    alias = alias or {}
    acc_of: dict[Tensor, Expr] = {}
    fills, stmts, accs, notes, members, member_accs, member_epilogues = [], [], [], [], [], [], []
    depth = group.depth
    taus = [list(t) for t in group.taus]
    weight = work_weight([b for u in group.units for b in u.plan.bodies])
    # the short-outer fusion only helps a nest that runs in parallel (and costs isl time)
    fuse = depth >= 2 and all(t[0].extent < FUSE_BELOW for t in taus) \
        and opts.parallel and _box_work(group) * weight >= opts.parallel_min_work
    width = max(t[1].extent for t in taus) if fuse else 0
    target = opts.target or parse_target()
    first_column = len(group.units) - group.columns
    columns: list[tuple[Buffer, ComputeOp]] = []  # (output, combiner) of each column sum
    for g, (u, tau) in enumerate(zip(group.units, taus)):
        outs, sched_op = outs_of(u.op), u.plan.core.op  # (an epilogue's: its reduction)
        if g >= first_column:
            made = _column_statements(u, tuple(_scalarized(b, acc_of) for b in bodies[u.op]), outs[0])
            if made is None:
                continue  # (nothing reads it)
            member, combiner, rows = made
            tau = taus[g] = rows
            members.append((u, tau, member, (), None))
            member_accs.append(())
            member_epilogues.append(())
            columns.append((outs[0], combiner))
            notes.append(f"{marked(u.op.name)}: column sum over the rows")
            continue
        own = tuple(_scalarized(b, acc_of) for b in bodies[sched_op])
        e = u.plan.epilogue if isinstance(u.plan, EpilogueStep) else None
        epi = None if e is None else replace(e, body=_scalarized(e.body, acc_of))
        split = unit_split(u, own, tuple(tau), target)  # (short rows off the prefix: one loop)
        dom = op_domain(sched_op, own, outs + kept_outs(u.plan, outs_of), epi, split, scans)
        member, _ = schedule_nest(sched_op, dom, outs, opts, allow_buffer=u.op not in scalar,
                                  fuse_outer=False)
        members.append((u, tau, member, own, split))
        member_accs.append(tuple(dom.accumulators))
        member_epilogues.append(() if epi is None else (epi.body,))
        fills.extend(dom.fills)
        accs.extend(dom.accumulators)
        if u.op in scalar:
            for v, b in enumerate(bodies[u.op]):
                for op in {u.op, alias.get(u.op, u.op)}:
                    acc_of[Tensor(op, v)] = dom.accumulators[b.arg.value_index]
        notes.append(f"{marked(u.op.name)}{': ' + dom.note if dom.note else ''}")
    rows_end = len(members) - len(columns)
    position = shared_positions(members[:rows_end], alias) + [None] * len(columns)
    siblings = shared_reductions(members[:rows_end], member_accs, member_epilogues, alias)
    for g, first in siblings.items():
        position[g] = first
        notes[g] += f" (one pass with {marked(members[first][0].op.name)})"
    if columns:
        loop = _column_loop(members[:rows_end], members[rows_end][0])
        if position[loop] is None:
            position[loop] = loop
        shape = members[rows_end][0].op.shape
        for g in range(rows_end, len(members)):  # (columns of another shape: a loop of their own)
            position[g] = position[loop] if members[g][0].op.shape == shape else g
        if loop < rows_end:
            notes[rows_end] += f" (in the loop of {marked(members[loop][0].op.name)})"
    for g, (u, tau, member, _, _) in enumerate(members):
        head = (tau[0] * width + tau[1],) + tuple(tau[2:]) if fuse else tuple(tau)
        fixed = set(tau)  # (scanned by the prefix: constant in the member's own dimensions)
        for st in member:
            own = tuple(0 if isinstance(t, Expr) and t in fixed else t for t in st.schedule)
            if g in siblings or g in siblings.values():  # (own: the member's phases and loops)
                own = own + (g,)
            elif position[g] is not None:  # (own is the axes, then the output index v)
                own = own[:-1] + (g,) + own[-1:]
            body = tuple(owned(x, u.op) for x in st.body)
            pos = g if position[g] is None else position[g]
            stmts.append(PolyStmt(f"{st.name}_{g}", st.vars, st.domain, body, head + (pos,) + own))
    body = build_loops(stmts, scans)

    work = count_work(body)
    body, attrs = mark_parallel(body, NestAttrs(parallel_dim=0), opts, work, weight)
    parallel = attrs.range is not None
    temps: tuple[Buffer, ...] = ()
    if columns:
        if parallel and body[0].step == 1:
            body, attrs, temps, combined = _partial_columns(body[0], attrs, columns, target.line)
        else:
            body = tuple(replace(st, kind="serial") if isinstance(st, Loop) else st for st in body)
            attrs, combined = replace(attrs, range=None), []  # (column sums accumulate in their outputs)
            fills.extend(Fill(out, comb.identity[0]) for out, comb in columns)
        parallel = attrs.range is not None
    prefix = ", ".join(v.name for v in taus[0])
    note = f"fused over ({prefix}): " + "; ".join(notes)
    outputs = tuple(b for u in group.units for b in outs_of(u.op) + kept_outs(u.plan, outs_of) if b)
    name = "+".join(marked(u.op.name) for u in group.units)
    nest = Nest(name, body, outputs, work, note, parallel, tuple(accs), attrs, temps)
    if columns and temps:
        fills.extend(Fill(p, comb.identity[0]) for p, (_, comb) in zip(temps, columns))
        return [*fills, nest, *combined]
    return [*fills, nest]


PARTIAL_CHUNKS = 8  # chunks of rows a parallel pass with column sums is cut into, each with its columns


def _column_statements(u, bodies: tuple, out: Buffer | None) -> tuple | None:
    """A column sum's update statements (``out[o] = combine(out[o], src)``, scheduled rows first, then
    the columns innermost), its combiner and its rows; ``None`` when nothing reads it."""
    if out is None:
        return None
    dom = op_domain(u.op, bodies, [out], None, None)
    info = dom.reduction
    comb = info.combiner
    rows = [r for r in info.raxes if r.extent > 1]
    order = tuple(rows) + tuple(r for r in info.raxes if r.extent == 1) + tuple(info.outer) + (0,)
    here = Expr(Op.READ, out.dtype, info.outer, out.tensor)
    stmts = []
    for k, (domain, source) in enumerate(info.pieces or [(info.update_domain, info.sources[0])]):
        update: tuple = (Store(out, info.outer, substitute(comb.result[0], {comb.lhs[0]: here,
                                                                           comb.rhs[0]: source})),)
        if info.rest is not TRUE:
            update = (If(info.rest, update, (), affine=False),)
        stmts.append(PolyStmt(f"C{k}", info.outer + info.raxes, domain, update, order))
    return stmts, comb, rows


def _column_loop(members: list, column) -> int:
    """The member in whose innermost loop the column sums run: the last elementwise member that scans
    its rows, then columns of the column sums' extents, else the first column sum (``len(members)``)."""
    extents = [a.extent for a in column.op.axes]
    for g in range(len(members) - 1, -1, -1):
        u, tau, _, _, split = members[g]
        axes = _scanned(u, split)
        if split is None and axes is not None and tuple(axes[:len(tau)]) == tuple(tau) \
                and [a.extent for a in axes[len(tau):]] == extents:
            return g
    return len(members)


def _partial_columns(loop: Loop, attrs: NestAttrs, columns: list, line: int) -> tuple:
    """The parallel ``loop`` cut into at most :data:`PARTIAL_CHUNKS` chunks of consecutive rows, each
    accumulating its column sums in a row of partial columns of its own (its last axis padded to whole
    cache ``line``s, so that no two chunks store to one line), and the nests that combine the partial
    columns into the outputs (bookkeeping: the terms are the work)."""
    trips = int(loop.hi.arg) - int(loop.lo.arg)
    size = -(-trips // PARTIAL_CHUNKS)
    chunks = -(-trips // size)
    c = var("chunk", 0, chunks)
    partial = {}
    for out, _ in columns:
        per_line = max(1, line // out.itemsize)
        t = placeholder((chunks, *out.shape[:-1], -(-out.shape[-1] // per_line) * per_line), out.dtype,
                        name=f"{out.name}.partial")
        partial[out.tensor] = Buffer(t.name, t.shape, out.dtype, "temp", t)

    def reads(e: Expr) -> Expr:
        return replace_reads(e, lambda n: Expr(Op.READ, n.dtype, (c, *n.src), partial[n.arg].tensor)
                             if n.arg in partial else None)

    def leaf(st):
        if isinstance(st, Store) and st.buffer.tensor in partial:
            return replace(st, buffer=partial[st.buffer.tensor], index=(c, *st.index))
        return st

    lo = loop.lo + c * size
    hi = Expr(Op.MINIMUM, lo.dtype, (lo + size, loop.hi))
    rows = Loop(loop.var, lo, hi, tuple(map_stmt(st, reads, leaf) for st in loop.body), 1, "serial", loop.dim)
    chunked = (Loop(c, const(0), const(chunks), (rows,), 1, "parallel", loop.dim),)
    combined = []
    for out, comb in columns:
        p = partial[out.tensor]
        axes = tuple(var(f"o{d}", 0, n) for d, n in enumerate(out.shape))
        total = Expr(Op.READ, out.dtype, (const(0), *axes), p.tensor)
        for k in range(1, chunks):
            there = Expr(Op.READ, out.dtype, (const(k), *axes), p.tensor)
            total = substitute(comb.result[0], {comb.lhs[0]: total, comb.rhs[0]: there})
        stmt: tuple = (Store(out, axes, total, counted=False),)
        for a in reversed(axes):
            stmt = (Loop(a, const(0), const(a.extent), stmt),)
        combined.append(Nest(f"{out.name}.combined", stmt, (out,), 0,
                             f"the {chunks} partial columns of {marked(out.name)} combined"))
    return chunked, replace(attrs, range=(0, chunks, 1)), tuple(partial[out.tensor] for out, _ in columns), \
        combined
