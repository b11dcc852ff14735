"""Nest fusion: consecutive ops that walk the same outer loops become one loop nest.

When each op reads the ops before it only at the point its own outer loops are at, they share those loops
(softmax: ``for i: m = max_k X[i, k]; for j: E[i, j] = exp(X[i, j] - m); s = sum_k E[i, k]; for j: Y[i, j] =
E[i, j] / s``).  A *unit* is a planned :class:`.strategies.registry.Step`; a *group* is a run of consecutive
units with a *prefix*: ``depth`` outer loop variables of each (its *tau*, extent-1 variables left out) scanned
together.  A unit ``C`` joins when every read of a member ``P`` maps ``P``'s tau to the same plain outer
variables of ``C``; ``depth`` shrinks to what every member agrees on. Statements are scheduled ``tau +
(position in the group,) + own schedule``.  A reduction whose value at a prefix point is one element is read
from its accumulators and needs no buffer unless something outside the group reads it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import substitute, walk
from tensorad.ir.tensor import ComputeOp

from ..passes.buffers import EXPENSIVE, INLINE_BUDGET
from ..strategies.registry import EpilogueStep, PointwiseNest, ProductCall, ReductionNest, Step
from .box_pieces import GUARD_ATTR
from .stripmine import simplify_index

MAX_MEMBERS = 8


@dataclass(eq=False)
class Unit:
    """What one nest computes alone: a planned step, its statements' outer variables as alignment reads."""

    plan: Step
    outer: tuple[Expr, ...]  # the statements' outer variables (digits when split)
    check: tuple[Expr, ...]  # what the unit reads, over ``outer`` (for alignment)
    tau_of: dict  # outer var -> expression over op's axes

    @property
    def op(self) -> ComputeOp:
        """The op whose tensors the unit writes (the consumer of an epilogue)."""
        return self.plan.op


def make_unit(plan: Step) -> Unit:
    op, bodies = plan.op, plan.bodies
    if isinstance(plan, EpilogueStep):  # statements run over the reduction's axes
        outer = tuple(plan.reduction.op.axes)
        moved = substitute(plan.epilogue.body, dict(zip(op.axes, outer)))
        return Unit(plan, outer, tuple(plan.reduction.bodies) + (moved,), dict(zip(outer, op.axes)))
    if isinstance(plan, PointwiseNest) and plan.split is not None:
        return Unit(plan, plan.split.vars, tuple(plan.split.apply(b) for b in bodies), plan.split.digit_of)
    return Unit(plan, tuple(op.axes), tuple(bodies), {a: a for a in op.axes})


@dataclass(eq=False)
class Group:
    units: list[Unit]
    depth: int
    taus: list[tuple[Expr, ...]]  # per unit: its prefix variables (``depth`` of its outer vars)
    strips: bool = False  # sibling strip-form reductions sharing one pass (:mod:`.loops.strip_groups`)
    columns: int = 0  # the last members that are column sums over the prefix (:func:`column_sum`)

    def scalar_reductions(self) -> set[ComputeOp]:
        """Plain reductions (no epilogue) whose value at a prefix point is one element."""
        out = set()
        if self.strips:
            return out  # (each accumulates in its own output buffer)
        for u, tau in zip(self.units[:len(self.units) - self.columns], self.taus):
            if isinstance(u.plan, ReductionNest):
                rest = [a for a in u.outer if a not in tau[:self.depth]]
                if all(a.extent == 1 for a in rest):
                    out.add(u.op)
        return out


def _member_reads(unit: Unit, members: dict[ComputeOp, int]):
    internal = unit.plan.core.op
    for e in unit.check:
        for n in walk(e):
            if n.op is Op.READ and n.arg.op in members and n.arg.op is not unit.op \
                    and n.arg.op is not internal:
                yield n


def _members(group: Group, alias: dict) -> dict[ComputeOp, int]:
    """Each member's op, and the op whose tensors it writes (``alias``: a rewritten op --
    hoisted, split, gathered -- is read under the original's name), by member index."""
    members = {u.op: k for k, u in enumerate(group.units)}
    members.update({alias[u.op]: k for k, u in enumerate(group.units) if u.op in alias})
    return members


def _alignment(group: Group, unit: Unit, alias: dict) -> tuple[int, tuple[Expr, ...]] | None:
    """(depth, tau) with which ``unit`` can join ``group``, or ``None``."""
    members = _members(group, alias)
    outer = list(unit.outer)
    found: list[Expr] | None = None
    depth = group.depth
    for n in _member_reads(unit, members):
        p = group.units[members[n.arg.op]]
        at = dict(zip(p.op.axes, n.src))
        vals = []
        for t in group.taus[members[n.arg.op]][:depth]:
            v = simplify_index(substitute(p.tau_of[t], at))
            if v.op is not Op.VAR or v not in outer or v in vals:
                break
            vals.append(v)
        if found is not None:  # agree with the reads seen so far
            k = 0
            while k < min(len(vals), len(found)) and vals[k] is found[k]:
                k += 1
            vals = vals[:k]
        found = vals
        depth = min(depth, len(vals))
        if depth == 0:
            return None
    if not found:
        return None  # no read of a member: nothing to gain
    tau = tuple(found[:depth])
    pos = [outer.index(v) for v in tau]
    if pos != sorted(pos):
        return None
    split = unit.plan.split if isinstance(unit.plan, PointwiseNest) else None
    inner_digits = set(split.remainders) if split is not None else set()
    if any(outer[q] not in inner_digits and outer[q].extent > 1 for q in range(pos[-1]) if q not in pos):
        return None  # the unit's loops would be scanned out of order (strided stores)
    return depth, tau


def _plain_reduction(u: Unit) -> bool:
    """A reduction of its own with scalar accumulators, scanned or scattered (no strip form in a group)."""
    return u.op.is_reduction and not isinstance(u.plan, (PointwiseNest, ProductCall, EpilogueStep)) \
        and not _strips(u)


def _strips(u: Unit) -> bool:
    """Whether ``u`` (or its epilogue's reduction) accumulates in strips of its output."""
    return isinstance(u.plan.core, ReductionNest) and u.plan.core.strips


def _product(u: Unit) -> bool:
    return isinstance(u.plan.core, ProductCall)


def _reads(u: Unit) -> set:
    return {n.arg for e in u.check for n in walk(e) if n.op is Op.READ}


def _extents(u: Unit) -> tuple[int, ...]:
    return tuple(v.extent for v in u.outer if v.extent > 1)


def _sibling(group: Group, unit: Unit, alias: dict) -> tuple[int, tuple[Expr, ...]] | None:
    """(depth, tau) with which a reduction that reads no member joins ``group`` as a sibling: its outer
    loops are the group's prefix and it reads a tensor a member reads (batch norm's ``dgamma[c]`` and
    ``dbeta[c]`` both sum ``H[n, c, y, x]``).  A read of a member under its original name counts."""
    members = _members(group, alias)
    if not _plain_reduction(unit) or any(_product(u) for u in group.units):
        return None
    reads = _reads(unit)
    if any(t.op in members for t in reads) or not any(reads & _reads(u) for u in group.units):
        return None
    tau = tuple(v for v in unit.outer if v.extent > 1)[:group.depth]
    want = tuple(v.extent for v in group.taus[0][:group.depth])
    return (group.depth, tau) if len(tau) == group.depth and tuple(v.extent for v in tau) == want else None


def column_sum(group: Group, unit: Unit, alias: dict) -> tuple[Expr, ...] | None:
    """The reduction variables with which ``unit`` joins ``group`` as a column sum, or ``None``: a
    reduction by a built-in combiner (sum, product, max, min) into an output with an axis of more than
    one point, whose reduction axes of more than one point have the extents of the group's prefix, in
    order, and no more columns than a member has points in a row; it reads a member, only at the row
    the pass is at, or a tensor a member reads.  The group holds no product and no strips."""
    op = unit.op
    if not isinstance(unit.plan, ReductionNest) or not op.is_reduction or op.num_outputs != 1 \
            or group.strips or not group.depth or any(_product(u) for u in group.units) \
            or op.attr(GUARD_ATTR) or all(a.extent == 1 for a in op.axes):
        return None
    red = op.body[0].arg
    if red.combiner.arity != 1 or red.combiner.kind == "custom":
        return None  # (partial columns combine in another grouping: a built-in combiner's)
    rows = tuple(a for a in red.axes if a.extent > 1)
    if tuple(a.extent for a in rows) != tuple(v.extent for v in group.taus[0][:group.depth]):
        return None
    per_row = max(math.prod(a.extent for a in u.outer + tuple(u.plan.core.op.reduce_axes) if a not in tau)
                  for u, tau in zip(group.units[:len(group.units) - group.columns], group.taus))
    if math.prod(a.extent for a in op.axes) > per_row:
        return None  # (more columns than a member's points in a row: no pass over rows to share)
    members = _members(group, alias)
    reads = _reads(unit)
    if not any(t.op in members for t in reads) and not any(reads & _reads(u) for u in group.units):
        return None
    for n in _member_reads(unit, members):  # (a member's value at the row the pass is at)
        k = members[n.arg.op]
        if k >= len(group.units) - group.columns:
            return None
        p, at = group.units[k], dict(zip(group.units[k].op.axes, n.src))
        if [simplify_index(substitute(p.tau_of[t], at)) for t in group.taus[k][:group.depth]] != list(rows):
            return None
    return rows


def _strip_reduction(u: Unit) -> bool:
    """A reduction of its own accumulated in strips of its output (:func:`.loops.schedule.buffer_form`)."""
    return isinstance(u.plan, ReductionNest) and u.plan.strips and bool(u.outer)


def _strip_chain(g: Group, u: Unit, alias: dict) -> tuple[int, tuple[Expr, ...]] | None:
    """(depth, tau) with which a strip-form reduction ``u`` (or one with its epilogue) joins the one
    strip-form reduction of ``g`` it reads at its own rows: they share every outer loop but the strips'
    last axis, ``u``'s pass over a row after ``g``'s.  ``None`` unless the rows align."""
    (p,) = g.units
    if not (_strips(p) and p.outer and _strips(u) and u.outer):
        return None
    if tuple(v.extent for v in p.outer) != tuple(v.extent for v in u.outer):
        return None
    found = _alignment(g, u, alias)
    if found is None:
        return None
    depth = min(found[0], sum(v.extent > 1 for v in p.outer[:-1]))  # (unit loops are in no prefix)
    return (depth, found[1][:depth]) if depth else None


def _red_extents(u: Unit) -> tuple[int, ...]:
    return tuple(a.extent for a in u.op.body[0].arg.axes)


def strip_siblings(a: Unit, b: Unit, alias: dict | None = None) -> bool:
    """Whether strip-form reductions ``a`` and ``b`` can share one pass: the same output and reduction
    extents, a tensor both read, and neither reads the other.  Not an op whose guards are decided per
    piece of its box (:mod:`.loops.box_pieces`), whose pieces would cut the others' loops."""
    if not (_strip_reduction(a) and _strip_reduction(b)) or a.op.attr(GUARD_ATTR) or b.op.attr(GUARD_ATTR):
        return False
    if tuple(v.extent for v in a.outer) != tuple(v.extent for v in b.outer) \
            or _red_extents(a) != _red_extents(b) or a.op.body[0].dtype != b.op.body[0].dtype:
        return False
    alias = alias or {}
    ra, rb = _reads(a), _reads(b)
    writes_a, writes_b = {a.op, alias.get(a.op, a.op)}, {b.op, alias.get(b.op, b.op)}
    return bool(ra & rb) and not any(t.op in writes_b for t in ra) and not any(t.op in writes_a for t in rb)


def order_siblings(units: list[Unit], alias: dict | None = None) -> list[Unit]:
    """``units`` with each plain reduction moved up to just after an earlier one it can join as a sibling
    (likewise a strip-form reduction after an earlier :func:`strip_siblings` one), when no unit between
    computes anything it reads.  ``alias`` maps a unit's op to the op whose tensors it writes."""
    alias = alias or {}
    out = list(units)
    k = 1
    while k < len(out):
        u = out[k]
        if (_plain_reduction(u) or _strip_reduction(u)) and u.outer:
            reads, shape = _reads(u), _extents(u)
            between: set = set()
            needs = {t.op for t in reads}
            for j in range(k - 1, -1, -1):
                v = out[j]
                writes = {v.op, alias.get(v.op, v.op)}
                if needs & writes:
                    break  # (u depends on v: it stays after it)
                if (_plain_reduction(u) and _plain_reduction(v) and _extents(v) == shape
                        and reads & _reads(v)) or strip_siblings(v, u, alias):
                    if j + 1 < k and not (between & needs):
                        out.insert(j + 1, out.pop(k))
                    break
                between |= writes
        k += 1
    for k, u in enumerate(list(out)):  # a strip chain's units next to each other (_strip_chain)
        if not _strips(u):
            continue
        needs = {t.op for t in _reads(u)}
        j = next((j for j in range(k - 1, -1, -1) if out[j].op in needs and _strip_reduction(out[j])), None)
        if j is None or j == k - 1:
            continue
        moved = out[j + 1:k]
        writes = {out[j].op, alias.get(out[j].op, out[j].op)}
        theirs = {w for v in moved for w in (v.op, alias.get(v.op, v.op))}
        if not any({t.op for t in _reads(v)} & writes for v in moved) \
                and not {t.op for t in _reads(out[j])} & theirs:
            out[j:k] = moved + [out[j]]  # (independent of it: they go first)
    return out


def plan_groups(units: list[Unit], alias: dict | None = None) -> list[Group]:
    """Consecutive units grouped greedily (aligned, a sibling reduction, :func:`strip_siblings` of every
    member, a :func:`column_sum`), a group at most :data:`MAX_MEMBERS` and as many column sums, and
    :data:`.passes.buffers.INLINE_BUDGET` expensive ops."""
    alias = alias or {}
    groups: list[Group] = []
    heavy = 0
    for u in units:
        g = groups[-1] if groups else None
        h = len({n for e in u.check for n in walk(e) if n.op in EXPENSIVE})  # each shared node once
        if g is not None and (g.strips or len(g.units) == 1) and len(g.units) < MAX_MEMBERS \
                and heavy + h <= INLINE_BUDGET and all(strip_siblings(v, u, alias) for v in g.units):
            g.units.append(u)
            g.taus = [() for _ in g.units]
            g.depth, g.strips = 0, True
            heavy += h
            continue
        chained = _strip_chain(g, u, alias) if g is not None and len(g.units) == 1 and not g.strips else None
        if chained is not None:
            g.units.append(u)
            g.taus.append(chained[1])
            g.depth = chained[0]
            heavy += h
            continue
        rows = column_sum(g, u, alias) if g is not None and g.columns < MAX_MEMBERS \
            and heavy + h <= INLINE_BUDGET else None
        if rows is not None:
            g.units.append(u)
            g.taus.append(rows)
            g.columns += 1
            heavy += h
            continue
        if not _product(u) and g is not None and not g.columns and not _product(g.units[-1]) and g.depth \
                and len(g.units) < MAX_MEMBERS and heavy + h <= INLINE_BUDGET \
                and not any(_strips(v) for v in (*g.units, u)):
            joined = _alignment(g, u, alias) or _sibling(g, u, alias)
            if joined is not None:
                depth, tau = joined
                g.units.append(u)
                g.taus.append(tau)
                g.depth = depth
                heavy += h
                continue
        tau = tuple(v for v in u.outer if v.extent > 1)  # (a loop of one point aligns nothing)
        groups.append(Group([u], len(tau), [tau]))
        heavy = h
    for g in groups:
        g.taus = [t[:g.depth] for t in g.taus]  # (a column sum's: its rows, ``depth`` of them)
    return groups


__all__ = ["Unit", "Group", "make_unit", "plan_groups", "order_siblings", "strip_siblings", "column_sum"]
