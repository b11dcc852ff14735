"""Iteration domains of one materialized op, as polyhedral statements for isl's AST builder.

A :class:`PolyStmt` is a templated list of program statements over its variables, the isl set where it runs
and its schedule.  An **elementwise** ``T[x] = body`` whose body is ``select(c, e, 0)`` or ``if_then_else(c,
e, 0)`` zero-fills the output and runs on ``box ∩ affine(c)`` (the non-affine rest of ``c`` stays in the
value; ``select(c, 0, e)`` likewise with ``!c``).  A **reduction** ``T[x] = reduce_{r : c(x, r)} src`` has
``init``, ``update`` (a non-affine rest of ``c`` an ``if``) and ``store``: the update runs on ``D = box(x, r)
∩ affine(c)``, init and store on its projection onto ``x``, the rest of the output box filled with the
identity (``C[i] = sum_{k <= i} A[k]`` gives ``for i in range(0, n): for k in range(0, i + 1)``)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import islpy as isl
from tensorad.simplify.algebra.logic import conjuncts
from tensorad.simplify.algebra.rules import is_zero

from tensorad.ir.expr import TRUE, Expr, Op, choice, const, logical, logical_not, var
from tensorad.ir.rewrite import free_vars, substitute, walk
from tensorad.ir.tensor import ComputeOp
from tensorad.poly.affine import IndexSpace, NotAffine

from ..passes.footprint import count_points
from ..program import Assign, Buffer, Fill, If, Store
from .box_pieces import GUARD_ATTR, guard_pieces, guards_math
from .shared_nests import marked
from .stripmine import AxisSplit, plan_split


@dataclass(eq=False)
class PolyStmt:
    name: str
    vars: tuple[Expr, ...]
    domain: isl.Set
    body: tuple
    schedule: tuple  # one Expr or int per time dimension


@dataclass(eq=False)
class ReductionInfo:
    """The parts of a reduction a schedule may rearrange (see :mod:`.loops.schedule`)."""

    outer: tuple[Expr, ...]
    raxes: tuple[Expr, ...]
    update_domain: isl.Set  # D, over outer + raxes
    outer_domain: isl.Set  # the projection of D, over outer
    combiner: object
    sources: tuple[Expr, ...]
    rest: Expr  # the non-affine part of the condition
    filled: bool  # the outputs were filled with the identity first
    epilogue: object = None  # a fused consumer (:class:`.strategies.epilogue.Epilogue`) or None
    epilogue_value: Expr | None = None  # what is stored, in terms of ``acc``
    acc: Expr | None = None  # the accumulator of the op's (first) output
    #: ``((piece of update_domain, the source there), ...)``: an op whose zero-guards are decided
    #: per piece (:mod:`.loops.box_pieces`), each piece's update unguarded; empty: one update, ``sources``
    pieces: tuple = ()


@dataclass(eq=False)
class OpDomain:
    """Everything lowering needs to know about one op: fills first, then the statements."""

    fills: list[Fill]
    stmts: list[PolyStmt]
    space: IndexSpace
    accumulators: tuple[Expr, ...] = ()
    note: str = ""
    reduction: ReductionInfo | None = None


def split_condition(space: IndexSpace, c: Expr) -> tuple[isl.Set, Expr]:
    """``c`` as (isl set of its affine conjuncts, conjunction of the rest)."""
    aff, rest = space.universe(), TRUE
    for term in conjuncts(c):
        try:
            aff = aff.intersect(space.cond(term))
        except NotAffine:
            rest = term if rest is TRUE else logical(Op.AND, rest, term)
    return aff, rest


def peel_zero_select(space: IndexSpace, body: Expr) -> tuple[isl.Set, Expr]:
    """Split ``select(c, e, 0)`` nests into (affine domain, value on that domain); a sum of such terms is
    zero off the union of their domains."""
    dom = space.universe()
    while body.op in (Op.SELECT, Op.IF_THEN_ELSE, Op.ADD):
        if body.op is Op.ADD:  # a sum of guarded terms: zero off the union of their domains
            if not (union := _terms_union(space, body)).is_equal(space.universe()):
                dom = dom.intersect(union)
            break
        c, a, b = body.src
        if is_zero(b):
            e = a
        elif is_zero(a):
            c, e = logical_not(c), b
        else:
            break
        aff, rest = split_condition(space, c)
        if aff.plain_is_universe() or aff.is_equal(space.universe()):
            break
        dom = dom.intersect(aff)
        zero = const(0, body.dtype)
        body = e if rest is TRUE else choice(body.op, rest, e, zero)
    return dom, body


def _terms_union(space: IndexSpace, body: Expr) -> isl.Set:
    """The union of the domains :func:`peel_zero_select` gives the two terms of the sum ``body`` (a term
    that is a sum: the union of its own, as that function gives it), its sums walked with a stack: a
    sum of thousands of terms is no recursion of that depth."""
    stack, done = [(body, False)], []
    while stack:
        e, ready = stack.pop()
        if not ready and e.op is Op.ADD:
            stack += [(e, True), (e.src[1], False), (e.src[0], False)]
        elif not ready:
            done.append(peel_zero_select(space, e)[0])
        else:
            db, da = done.pop(), done.pop()
            union = da.union(db).coalesce()
            if stack:  # (a sum within the sum: its domain as peel_zero_select gives it)
                whole = space.universe()
                union = whole if union.is_equal(whole) else whole.intersect(union)
            done.append(union)
    return done[0]


def elementwise_domain(op: ComputeOp, bodies: tuple[Expr, ...], buffers: list[Buffer | None],
                       split: AxisSplit | None = None) -> OpDomain:
    """``buffers[v] is None``: output ``v`` is not needed (nothing reads it)."""
    axes = tuple(op.axes)
    index: tuple[Expr, ...] = axes
    notes = []
    split = split if split is not None else plan_split(axes, bodies)
    if split is not None:  # axes read through // and %: scanned as their digits (stripmine)
        index = tuple(split.value.get(a, a) for a in axes)
        bodies = tuple(split.apply(b) for b in bodies)
        axes = split.vars
        notes.append(split.note)
    space = IndexSpace(axes)
    pieces = split.pieces(space) if split is not None else [space.box()]
    box = functools.reduce(lambda a, b: a.union(b), pieces)
    fills, stmts = [], []
    for v, (body, buf) in enumerate(zip(bodies, buffers)):
        if buf is None:
            continue
        dom, value = peel_zero_select(space, body)
        if value.op is Op.CONST and not value.arg:  # zero everywhere (a gradient its output ignores)
            fills.append(Fill(buf, value))
            notes.append(f"{marked(buf.name)} zero")
            continue
        if not box.is_subset(dom):
            fills.append(Fill(buf, const(0, buf.dtype)))
            notes.append(f"{marked(buf.name)} nonzero only on a sub-domain")
        cut = None
        # (each piece with its guards decided: :mod:`.loops.box_pieces`)
        if (op.attr(GUARD_ATTR) or guards_math(value)) and len(pieces) == 1:
            cut = guard_pieces(space, box.intersect(dom), value)
        if cut is not None:
            for k, (piece, there) in enumerate(cut):
                store = Store(buf, index, there)
                stmts.append(PolyStmt(f"S{v}g{k}", axes, piece, (store,), tuple(axes) + (v,)))
            notes.append(f"{len(cut)} pieces of decided guards")
            continue
        store = Store(buf, index, value)
        for k, piece in enumerate(pieces):
            name = f"S{v}" if len(pieces) == 1 else f"S{v}p{k}"
            stmts.append(PolyStmt(name, axes, piece.intersect(dom), (store,), tuple(axes) + (v,)))
    return OpDomain(fills, stmts, space, note="; ".join(notes))


DENSITY_POINTS = 1 << 16  # a condition over a larger box is taken as dense (counting walks its points)


def where_density(op: ComputeOp, bodies: tuple[Expr, ...]) -> float:
    """The fraction of a reduction's box where its affine where-condition holds, counted over the axes the
    condition reads (1.0 past :data:`DENSITY_POINTS` of them, when not affine, or for a residue class)."""
    red = bodies[0]
    cond = red.src[0]
    axes = tuple(op.axes) + tuple(red.arg.axes)
    used = set(free_vars(cond))
    involved = tuple(a for a in axes if a in used)
    size = math.prod(max(0, a.extent) for a in involved)
    if not involved or not size or size > DENSITY_POINTS \
            or any(n.op in (Op.FLOORDIV, Op.MOD) for n in walk(cond)):
        return 1.0
    space = IndexSpace(involved)
    try:
        dom = space.box().intersect(split_condition(space, cond)[0])
    except (NotAffine, NotImplementedError, ValueError):
        return 1.0
    return count_points(dom) / size


def covers_box(op: ComputeOp, bodies: tuple[Expr, ...]) -> bool:
    """Whether a reduction's update domain projects onto its whole output box (no fill)."""
    red = bodies[0]
    outer, raxes = tuple(op.axes), tuple(red.arg.axes)
    space = IndexSpace(outer + raxes)
    dom = space.box().intersect(split_condition(space, red.src[0])[0])
    proj = dom.project_out(isl.dim_type.set, len(outer), len(raxes)) if raxes else dom
    return IndexSpace(outer).box().is_subset(proj)


def reduction_domain(op: ComputeOp, bodies: tuple[Expr, ...], buffers: list[Buffer],
                     epilogue=None, memo: dict | None = None) -> OpDomain:
    """``memo``: one ``lower`` call's: whether the region covers the output box (isl: seconds at worst)."""
    red = bodies[0]
    cond, *sources = red.src
    comb = red.arg.combiner
    outer, raxes = tuple(op.axes), tuple(red.arg.axes)
    space = IndexSpace(outer + raxes)
    aff, rest = split_condition(space, cond)
    dom = space.box().intersect(aff)
    n_out, n_red = len(outer), len(raxes)
    proj = dom.project_out(isl.dim_type.set, n_out, n_red) if n_red else dom
    outer_space = IndexSpace(outer)
    obox = outer_space.box()
    fills = []
    memo, key = {} if memo is None else memo, ("covers", outer, raxes, cond)
    if key not in memo:
        memo[key] = obox.is_subset(proj)
    if not memo[key]:
        fills = [Fill(buf, comb.identity[b.arg.value_index]) for b, buf in zip(bodies, buffers)
                 if buf is not None]
    else:
        proj = obox
    accs = tuple(var(f"acc{i}" if comb.arity > 1 else "acc", dtype=d) for i, d in enumerate(comb.dtypes))
    mapping = {**dict(zip(comb.lhs, accs)), **dict(zip(comb.rhs, sources))}
    combined = tuple(substitute(r, mapping) for r in comb.result)
    update: tuple = (Assign(accs, combined, combiner=comb if comb.order_free else None),)
    if rest is not TRUE:
        update = (If(rest, update, (), affine=False),)
    evalue = None
    if epilogue is not None:
        # the consumer's own select(c, ., 0) domain restricts the reduction (unless it is an output too,
        # ``keep``, stored in ``buffers[1]``); it reads ``value_index``
        value, acc = epilogue.apply(outer, accs[red.arg.value_index]), accs[red.arg.value_index]
        edom, evalue = (space.box(), value) if epilogue.keep else peel_zero_select(space, value)
        if not dom.is_subset(edom):
            dom = dom.intersect(edom)
            proj = dom.project_out(isl.dim_type.set, n_out, n_red) if n_red else dom
            fills = [Fill(buffers[0], const(0, buffers[0].dtype))]
        stores = (Store(buffers[0], outer, evalue, counted=False),
                  *(Store(b, outer, acc, counted=False) for b in buffers[1:]))
    else:
        stores = tuple(Store(buf, outer, accs[b.arg.value_index], counted=False)
                       for b, buf in zip(bodies, buffers) if buf is not None)
    zeros = (0,) * n_red
    stmts = [PolyStmt("I", outer, proj, (Assign(accs, tuple(comb.identity), counted=False),),
                      outer + (0,) + zeros)]
    cut = None
    if op.attr(GUARD_ATTR) and comb.arity == 1 and epilogue is None:  # (guards decided per piece)
        cut = guard_pieces(space, dom, sources[0])
    if cut is None:
        stmts.append(PolyStmt("U", outer + raxes, dom, update, outer + (1,) + raxes))
    else:
        for k, (piece, there) in enumerate(cut):
            decided: tuple = (Assign(accs, tuple(substitute(r, {**mapping, comb.rhs[0]: there})
                                                 for r in comb.result)),)
            if rest is not TRUE:
                decided = (If(rest, decided, (), affine=False),)
            stmts.append(PolyStmt(f"Ug{k}", outer + raxes, piece, decided, outer + (1,) + raxes))
    if stores:  # (none when the accumulators are read directly: see :mod:`.loops.nest_groups`)
        stmts.append(PolyStmt("W", outer, proj, stores, outer + (2,) + zeros))
    note = f"{comb.name} over {', '.join(a.name for a in raxes) or 'nothing'}"
    if fills and epilogue is None:
        note += "; identity outside the reduced region"
    filled = bool(fills) and epilogue is None  # (an epilogue's fill is zero, not the identity)
    info = ReductionInfo(outer, raxes, dom, proj, comb, tuple(sources), rest, filled, epilogue, evalue,
                         accs[red.arg.value_index], tuple(cut or ()))
    if epilogue is not None:
        note += f"; epilogue {marked(epilogue.consumer.name)} fused"
    return OpDomain(fills, stmts, space, accs, note, info)


def op_domain(op: ComputeOp, bodies: tuple[Expr, ...], buffers: list[Buffer | None], epilogue=None,
              split: AxisSplit | None = None, memo: dict | None = None) -> OpDomain:
    return reduction_domain(op, bodies, buffers, epilogue, memo) if op.is_reduction else \
        elementwise_domain(op, bodies, buffers, split)
