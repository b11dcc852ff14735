"""Lowering one fused group (:mod:`.group`) to a single nest.

Each member's statements come from its own domain and schedule (as if lowered alone, minus
the outer-loop fusion and, for reductions read from their accumulators, minus the buffer
form); each schedule is then prefixed with the member's tau and its position in the group::

    max:     I[i] -> [i, 0, i, 0, 0]    U[i, k] -> [i, 0, i, 1, k]
    exp:     S[i, j] -> [i, 1, i, j, 0]
    sum:     I[i] -> [i, 2, i, 0, 0]    U[i, k] -> [i, 2, i, 1, k]
    divide:  S[i, j] -> [i, 3, i, j, 0]

and isl scans the union once.  Reads of a reduction whose value at a prefix point is one
element are replaced by its accumulators (written earlier in the same prefix iteration).
When a short first prefix axis leaves a single thread idle (a batch of 1), the first two
prefix axes are scanned as one, as :func:`.schedule.fuse_short_outer` does for one op.

Work is counted per member (:func:`.work.count_work` with each statement's owner): members
whose statements all run directly in the prefix loop (an elementwise chain ``s0[i]``,
``t1[i] = tanh(s0[i])``, ... fused into one loop whose body stores each of them) count one body
execution each, as they would in nests of their own.
"""

from __future__ import annotations

from tensorad.ir.expr import Expr
from tensorad.ir.rewrite import replace_reads
from tensorad.ir.tensor import ComputeOp, Tensor

from .domain import PolyStmt, op_domain
from .fuse import Epilogue
from .group import Group
from .islast import build_loops
from .program import Nest, owned
from .schedule import FUSE_BELOW, Options, mark_parallel, schedule_nest, work_weight
from .work import count_work


def _box_work(group: Group) -> int:
    """An upper bound of the group's work: each member's box of outer and reduction axes."""
    total = 0
    for u in group.units:
        n = 1
        for a in u.outer + tuple((u.reduction or u.op).reduce_axes):
            n *= a.extent
        total += n
    return total


def _scalarized(body: Expr, acc_of: dict[Tensor, Expr]) -> Expr:
    """``body`` reading the accumulators ``acc_of`` gives for the reductions it reads (no
    rewrite when there are none: an elementwise chain's members, thousands of bodies)."""
    if not acc_of:
        return body
    return replace_reads(body, lambda n: acc_of.get(n.arg))


def lower_group(group: Group, bodies: dict, outs_of, scalar: set[ComputeOp], opts: Options) -> list | None:
    """The steps (fills, then one nest) computing every member of ``group``, or ``None``."""
    acc_of: dict[Tensor, Expr] = {}
    fills, stmts, accs, notes = [], [], [], []
    depth = group.depth
    taus = [list(t) for t in group.taus]
    weight = work_weight([b for u in group.units for b in u.bodies])
    # the short-outer fusion only helps a nest that runs in parallel (and costs isl time)
    fuse = depth >= 2 and all(t[0].extent < FUSE_BELOW for t in taus) \
        and opts.parallel and _box_work(group) * weight >= opts.parallel_min_work
    width = max(t[1].extent for t in taus) if fuse else 0
    for g, (u, tau) in enumerate(zip(group.units, taus)):
        outs = outs_of(u.op)
        if u.reduction is not None:
            red_bodies = tuple(_scalarized(b, acc_of) for b in bodies[u.reduction])
            e = u.epilogue
            epi = Epilogue(e.consumer, e.reduction, _scalarized(e.body, acc_of))
            dom = op_domain(u.reduction, red_bodies, outs, epi)
            sched_op = u.reduction
        else:
            own = tuple(_scalarized(b, acc_of) for b in u.bodies)
            dom = op_domain(u.op, own, outs, None, u.split)
            sched_op = u.op
        member, _ = schedule_nest(sched_op, dom, outs, opts, allow_buffer=u.op not in scalar,
                                  fuse_outer=False)
        head = (tau[0] * width + tau[1],) + tuple(tau[2:]) if fuse else tuple(tau)
        fixed = set(tau)  # (scanned by the prefix: constant in the member's own dimensions)
        for st in member:
            own = tuple(0 if isinstance(t, Expr) and t in fixed else t for t in st.schedule)
            body = tuple(owned(x, u.op) for x in st.body)
            stmts.append(PolyStmt(f"{st.name}_{g}", st.vars, st.domain, body, head + (g,) + own))
        fills.extend(dom.fills)
        accs.extend(dom.accumulators)
        if u.op in scalar:
            for v, b in enumerate(bodies[u.op]):
                acc_of[Tensor(u.op, v)] = dom.accumulators[b.arg.value_index]
        if dom.note or dom.reduction is None:
            notes.append(f"{u.op.name}{': ' + dom.note if dom.note else ''}")
        else:
            notes.append(u.op.name)
    body = build_loops(stmts)

    work = count_work(body)
    attrs = {"parallel_dim": 0}
    body, parallel = mark_parallel(body, attrs, opts, work, weight)
    if parallel:
        attrs["range"] = (int(body[0].lo.arg), int(body[0].hi.arg), body[0].step)
    prefix = ", ".join(v.name for v in taus[0])
    note = f"fused over ({prefix}): " + "; ".join(notes)
    outputs = tuple(b for u in group.units for b in outs_of(u.op) if b is not None)
    name = "+".join(u.op.name for u in group.units)
    nest = Nest(name, body, outputs, work, note, parallel, tuple(accs), attrs)
    return [*fills, nest]


__all__ = ["lower_group"]
