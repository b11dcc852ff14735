"""Sibling strip-form reductions in one pass (a :class:`.loops.nest_groups.Group` with ``strips``).

Two column sums over the same rows (a layer norm's ``dgamma`` and ``dbeta``), each accumulating in strips
of its output, get their position in the group as one more, innermost time dimension
(``U_0[j, i] -> [j / T, 1, i, j, 0]``, ``U_1[j, i] -> [j / T, 1, i, j, 1]``), so isl scans one loop over
the strip's columns that updates both: one pass over the rows.  Members have the same extents; the strips
are shortened so that all share the L1 as one did."""

from __future__ import annotations

from dataclasses import replace

from ..options import Options
from ..program import Nest, NestAttrs, owned
from .domain import PolyStmt, op_domain
from .isl_ast import build_loops
from .nest_groups import Group
from .schedule import mark_parallel, schedule_nest, work_weight
from .work import count_work

NOTE = "accumulates in the output, innermost loop over its last axis"


def lower_strips(group: Group, bodies: dict, outs_of, opts: Options,
                 scans: dict | None = None) -> list | None:
    """The steps (fills, then one nest) of a strips group, or ``None`` if a member takes no strip form."""
    n = len(group.units)
    fills, stmts, accs, names, notes, outputs = [], [], [], [], [], []
    attrs0: NestAttrs | None = None
    for g, u in enumerate(group.units):
        outs = outs_of(u.op)
        if outs[0] is None:
            return None
        dom = op_domain(u.op, bodies[u.op], outs, None)
        member, attrs = schedule_nest(u.op, dom, outs, opts, plan=u.plan, strips_share=n)
        if attrs.note != NOTE or (attrs0 is not None and attrs != attrs0):
            return None
        if stmts and len(member[0].schedule) != len(stmts[0].schedule) - 1:
            return None
        attrs0 = attrs
        for st in member:
            body = tuple(owned(x, u.op) for x in st.body)
            stmts.append(PolyStmt(f"{st.name}_{g}", st.vars, st.domain, body, tuple(st.schedule) + (g,)))
        fills.extend(dom.fills)
        accs.extend(dom.accumulators)
        names.append(u.op.name)
        notes.append(f"{u.op.name}: {dom.note}" if dom.note else u.op.name)
        outputs.extend(b for b in outs if b is not None)
    body = build_loops(stmts, scans)
    work = count_work(body)
    weight = work_weight([b for u in group.units for b in bodies[u.op]])
    body, attrs = mark_parallel(body, attrs0 or NestAttrs(), opts, work, weight)
    parallel = attrs.range is not None
    note = f"{NOTE}; one pass for " + "; ".join(notes)
    attrs = replace(attrs, note=note)
    nest = Nest("+".join(names), body, tuple(outputs), work, note, parallel, tuple(accs), attrs)
    return [*fills, nest]
