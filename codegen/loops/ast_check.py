r"""Proof that isl's loops scan exactly the statements' domains, and a safe rebuild when not.

isl's AST builder can drop iterations when a domain has strides whose offset is a division of an outer
loop (``{ U[a, i] : 0 <= a < 10, 0 <= i < 4, i mod 2 = floor(a/5) }`` in order ``(a, i)`` comes out as one
``U(a, a / 5)`` per ``a``), and output axes scanned as one loop (:func:`.loops.schedule.fuse_short_outer`)
make such offsets.  So loops built from domains with divisions are checked symbolically: every statement
instance the converted AST runs is recorded with its enclosing loops and affine ``if`` conditions
(:class:`Instance`), the points those reach are built in isl and projected onto the statement's variables,
and their union must equal the statement's domain.  Otherwise the nest is rebuilt over each domain's
division-free hull (``isl_set_remove_divs``) with the exact domain tested by an affine ``if`` inside: the
same points.  Work stays exact (:mod:`.loops.work` masks affine ``if``\ s)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import islpy as isl
from tensorad.simplify import simplify_expr

from tensorad.ir.expr import Expr, Op, compare, const, logical
from tensorad.ir.rewrite import walk
from tensorad.poly.affine import IndexSpace, NotAffine
from tensorad.poly.domain import budgeted
from tensorad.poly.to_expr import set_to_cond

from ..program import If
from .domain import PolyStmt


@dataclass(frozen=True)
class Instance:
    """A user node of the AST: statement ``name`` at ``args``, under ``loops`` and ``conds``."""

    name: str
    args: tuple[Expr, ...]
    loops: tuple[tuple[Expr, Expr, Expr, int], ...]  # (var, lo, hi exclusive, step)
    conds: tuple[Expr, ...]


def has_divs(stmts: Sequence[PolyStmt]) -> bool:
    """Whether a domain or schedule has an integer division (the case isl can get wrong)."""
    for s in stmts:
        if any(bs.dim(isl.dim_type.div) for bs in s.domain.get_basic_sets()):
            return True
        for t in s.schedule:
            if isinstance(t, Expr) and any(n.op in (Op.FLOORDIV, Op.MOD) for n in walk(t)):
                return True
    return False


def _reached(inst: Instance, stmt: PolyStmt) -> isl.Set:
    """The points of ``stmt``'s variables that ``inst`` runs, as a set over ``stmt.vars``."""
    loop_vars = [lp[0] for lp in inst.loops]
    space = IndexSpace(loop_vars + list(stmt.vars))
    s = space.universe()
    for v, lo, hi, step in inst.loops:
        c = logical(Op.AND, compare(Op.LE, lo, v), compare(Op.LT, v, hi))
        if step != 1:
            c = logical(Op.AND, c, compare(Op.EQ, (v - lo) % const(step, v.dtype), const(0, v.dtype)))
        s = s.intersect(space.cond(c))
    for c in inst.conds:
        s = s.intersect(space.cond(c))
    for x, a in zip(stmt.vars, inst.args):
        s = s.intersect(space.cond(compare(Op.EQ, x, a)))
    return s.project_out(isl.dim_type.set, 0, len(loop_vars))


def scans_exactly(stmts: Sequence[PolyStmt], instances: Sequence[Instance]) -> bool:
    """Whether the recorded instances reach exactly each statement's domain."""
    by_name = {s.name: s for s in stmts}
    reached: dict[str, isl.Set] = {}
    try:
        for inst in instances:
            stmt = by_name[inst.name]
            got = _reached(inst, stmt)
            reached[inst.name] = got if inst.name not in reached else reached[inst.name].union(got)
    except NotAffine:
        return False
    for s in stmts:
        want = IndexSpace(s.vars).universe().intersect(s.domain.reset_tuple_id())
        got = reached.get(s.name)
        if not (want.is_empty() if got is None else got.is_equal(want)):
            return False
    return True


def _box(domain: isl.Set) -> isl.Set:
    """The smallest box around ``domain`` (``domain`` itself when it is empty or unbounded)."""
    box = isl.Set.universe(domain.get_space())
    for d in range(domain.dim(isl.dim_type.set)):
        lo, hi = domain.dim_min_val(d), domain.dim_max_val(d)
        if not (lo.is_int() and hi.is_int()):
            return domain
        lo, hi = lo.to_python(), hi.to_python()
        box = box.lower_bound_val(isl.dim_type.set, d, isl.Val.int_from_si(domain.get_ctx(), lo))
        box = box.upper_bound_val(isl.dim_type.set, d, isl.Val.int_from_si(domain.get_ctx(), hi))
    return box


def guarded_hulls(stmts: Sequence[PolyStmt], boxes: bool = False) -> list[PolyStmt]:
    """Each statement over its division-free hull, its exact domain tested inside; a domain without
    divisions in which isl still dropped points of a stride is scanned over its bounding box instead.
    ``boxes``: every statement over its bounding box (a hull can keep a stride of its own)."""
    out, made = [], {}  # (statements over one domain: its hull and test once)
    for s in stmts:
        key = (s.domain.to_str(), tuple(s.vars))
        if key not in made:
            made[key] = _guarded_hull(s.domain, s.vars, boxes)
        if made[key] is None:
            out.append(s)
            continue
        hull, cond = made[key]
        out.append(PolyStmt(s.name, s.vars, hull, (If(cond, tuple(s.body), (), affine=True),),
                            s.schedule))
    return out


def _guarded_hull(domain: isl.Set, variables: Sequence[Expr], boxes: bool) -> tuple[isl.Set, Expr] | None:
    """:func:`guarded_hulls`' loop domain for ``domain`` and the exact test inside (``None``: ``domain``)."""
    hull = _box(domain) if boxes else domain.remove_divs()
    if hull.is_equal(domain):
        hull = _box(domain)
        if hull.is_equal(domain):
            return None
    domain = domain.reset_tuple_id()
    inside = budgeted(domain.get_ctx(), partial(domain.gist, hull.reset_tuple_id()))  # (or unsimplified)
    return hull, simplify_expr(set_to_cond(domain if inside is None else inside, list(variables)))
