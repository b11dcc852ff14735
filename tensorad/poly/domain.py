"""Integer sets over named IR variables: the isl questions the nonzeroness optimizer asks.

An :class:`IndexSet` pairs an ordered list of IR variables with an ``isl.Set`` over them and answers in IR
terms: ``solve(v)`` (is ``v`` a quasi-affine function of the others on the set?), ``project_out(v)``,
``constraints_on(v)`` (what the set says of ``v`` once the others are fixed), ``const_range(v)``,
``lower_bounds(v, over)`` (what deskewing a reduction variable needs), ``gist(context)`` and
``to_cond()``.  Results are converted to IR by :mod:`.to_expr`.  Queries that isl may take minutes over
run :func:`budgeted`, within a count of isl's operations, those on a copy in :func:`budget_context`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cmp_to_key, reduce
from typing import TypeVar

import islpy as isl

from ..ir.expr import TRUE, Expr, Op, SizeDecisionError, is_size
from ..ir.rewrite import walk
from .affine import CTX, IndexSpace, admissible, decide
from .to_expr import aff_to_expr, pieces_to_expr, pw_aff_pieces, set_to_cond, val_to_fraction

_IN = isl.dim_type.in_
_OUT = isl.dim_type.out
_SET = isl.dim_type.set
_PARAM = isl.dim_type.param


# isl counts a set with divisions by scanning it, which can take minutes: a set with more than
# ``COUNT_DIVISIONS`` divisions in a piece is not counted, any other with divisions gets
# ``COUNT_OPERATIONS`` of isl's operations; ``None``: too costly to know (:func:`count_bound` estimates).
COUNT_DIVISIONS = 2
COUNT_OPERATIONS = 100_000
# isl's lexicographic minimum or gist of a set with several modulos can run for minutes: each gets
# ``QUERY_OPERATIONS`` of isl's operations, past which a deskew is not tried, a gist not made
QUERY_OPERATIONS = 100_000
T = TypeVar("T")


def budgeted(ctx: isl.Context, query: Callable[[], T], operations: int = QUERY_OPERATIONS) -> T | None:
    """``query()``, or ``None`` where isl stops it past ``operations`` of its operations in ``ctx``."""
    ctx.reset_operations()
    ctx.set_max_operations(operations)
    try:
        return query()
    except isl.Error:
        return None
    finally:
        ctx.set_max_operations(0)


class _BudgetContexts(threading.local):
    """Each thread's isl context for queries on a copy (:func:`budget_context`), made on first use."""

    ctx: isl.Context | None = None


_BUDGETED = _BudgetContexts()


def budget_context() -> isl.Context:
    """This thread's isl context for budgeted queries on objects read into it: a stop there reaches no
    other thread's isl calls, and it is kept for the thread (islpy never frees a context in which an isl
    function consumed an object)."""
    if _BUDGETED.ctx is None:
        _BUDGETED.ctx = isl.Context()
    return _BUDGETED.ctx


def bounded_count(s: isl.Set) -> int | None:
    """The points of the bounded set ``s``, or ``None`` if isl may take long (:data:`COUNT_OPERATIONS`)."""
    divisions = max((b.dim(isl.dim_type.div) for b in s.get_basic_sets()), default=0)
    if not divisions:
        return int(s.count_val().to_python())
    if divisions > COUNT_DIVISIONS:
        return None
    ctx = budget_context()  # (a count stopped by the budget is a null value: no text)
    text = budgeted(ctx, lambda: isl.Set.read_from_str(ctx, s.to_str()).count_val().to_str(),
                    COUNT_OPERATIONS)
    return None if text is None else int(text)


def count_bound(s: isl.Set) -> int:
    """Bounds the points of the bounded set ``s``: :func:`bounded_count`, else the count without divisions."""
    n = bounded_count(s)
    return int(s.remove_divs().count_val().to_python()) if n is None else n


@dataclass(frozen=True)
class Solution:
    """``var = value`` wherever ``domain`` holds (value: an IR expression of the other vars)."""

    var: Expr
    value: Expr
    pieces: int
    divs: int


class IndexSet:
    """An isl set over ``variables`` (in order); immutable."""

    def __init__(self, variables: Sequence[Expr], s: isl.Set) -> None:
        self.vars = list(variables)
        self.set = s

    @classmethod
    def from_conditions(cls, variables: Sequence[Expr], conds: Sequence[Expr],
                        space: IndexSpace | None = None) -> IndexSet:
        """The box of the variables' ranges intersected with every condition (all exact).
        ``space``: an :class:`IndexSpace` over ``variables`` whose conversions to reuse."""
        space = _space(variables, space)
        return cls(space.vars, reduce(isl.Set.intersect, map(space.cond, conds), space.box()))

    @classmethod
    def box(cls, variables: Sequence[Expr], bounded: Sequence[Expr] | None = None,
            space: IndexSpace | None = None) -> IndexSet:
        """The ranges of ``bounded`` (default: all) as a set over ``variables``."""
        space = _space(variables, space)
        return cls(space.vars, space.box(bounded))

    def is_empty(self) -> bool:
        return self.set.is_empty()

    def count(self) -> int:
        return int(self.set.count_val().to_python())

    def _pos(self, v: Expr) -> int:
        for k, x in enumerate(self.vars):
            if x is v:
                return k
        raise ValueError(f"{v} is not a variable of this set")

    def solve(self, v: Expr) -> Solution | None:
        """``v`` as a function of the other variables, if the set determines it (``None`` if empty)."""
        k = self._pos(v)
        if self.set.is_empty():
            return None
        m = isl.Map.from_domain(self.set).move_dims(_OUT, 0, _IN, k, 1)
        if not m.is_single_valued():
            return None
        pma, others = m.as_pw_multi_aff().coalesce(), self.vars[:k] + self.vars[k + 1:]
        affs: list[isl.Aff] = []
        pma.foreach_piece(lambda s, ma: affs.append(ma.get_at(0)))
        divs = sum(a.dim(isl.dim_type.div) for a in affs)
        if len(affs) == 1:
            value = aff_to_expr(affs[0], others)
        else:
            pieces = pw_aff_pieces(pma, others)
            value = pieces_to_expr(pieces)
        return Solution(v, value, len(affs), divs)

    def project_out(self, v: Expr) -> IndexSet:
        k = self._pos(v)
        return IndexSet(self.vars[:k] + self.vars[k + 1:], self.set.project_out(_SET, k, 1))

    def project_onto(self, keep: Sequence[Expr]) -> IndexSet:
        return reduce(IndexSet.project_out, [v for v in self.vars if not any(v is x for x in keep)], self)

    def constraints_on(self, v: Expr) -> IndexSet:
        """What the set says about ``v`` given the others: gisted against its projection."""
        k = self._pos(v)
        ctx = self.set.project_out(_SET, k, 1).insert_dims(_SET, k, 1)
        ctx = ctx.set_dim_id(_SET, k, self.set.get_dim_id(_SET, k))
        return IndexSet(self.vars, self.set.gist(ctx))

    def const_range(self, v: Expr) -> tuple[int | Expr, int | Expr]:
        """Inclusive ``(min, max)`` of ``v`` on the (nonempty, bounded) set; on a set over sizes, each an
        expression in them (:func:`size_bound`)."""
        k = self._pos(v)
        if self.set.dim(_PARAM):
            return size_bound(self.set.dim_min(k)), size_bound(self.set.dim_max(k))
        lo, hi = val_to_fraction(self.set.dim_min_val(k)), val_to_fraction(self.set.dim_max_val(k))
        return int(lo), int(hi)

    def lower_bounds(self, v: Expr, over: Sequence[Expr]) -> list[tuple[Expr, int]]:
        """Single-piece lower bounds ``lo(over)`` of ``v`` valid on the whole set, with extents: the pieces
        of ``lexmin v`` over ``over`` for which ``v >= a`` on the set, each with extent ``max(v - a) + 1``,
        sorted by extent, then by number of divs."""
        keep = [x for x in self.vars if x is v or any(x is o for o in over)]
        proj = self.project_onto(keep)
        k = proj._pos(v)
        others = proj.vars[:k] + proj.vars[k + 1:]
        m = isl.Map.from_domain(proj.set).move_dims(_OUT, 0, _IN, k, 1)
        affs: list[isl.Aff] = []
        lexmin = budgeted(m.get_ctx(), m.lexmin_pw_multi_aff)
        if lexmin is not None:
            lexmin.foreach_piece(lambda s, ma: affs.append(ma.get_at(0)))
        space = IndexSpace(self.vars)
        out: list[tuple[Expr, int, int]] = []
        for a in affs:
            lo = aff_to_expr(a, others)
            try:
                diff = space.aff(v - lo)
            except ValueError:
                continue
            dom = self.set
            if not dom.intersect(diff.lt_set(space.constant(0))).is_empty():
                continue  # not a lower bound everywhere
            # max(v - lo) as the range of a map (``PwAff.max_val`` refuses quasi-affine pieces)
            values = isl.Map.from_pw_aff(diff.intersect_domain(dom)).range()
            top = size_bound(values.dim_max(0)) if values.dim(_PARAM) else values.dim_max_val(0).to_python()
            out.append((lo, top + 1, a.dim(isl.dim_type.div)))
        out.sort(key=cmp_to_key(lambda a, b: -1 if decide(a[1] < b[1]) else 1 if decide(b[1] < a[1])
                                else a[2] - b[2]))
        return [(lo, ext) for lo, ext, _ in out]

    def gist(self, context: IndexSet) -> IndexSet:
        """The set simplified by constraints ``context`` (over the same variables) implies."""
        if context.vars != self.vars:
            raise ValueError("gist: the context must be over the same variables")
        made = budgeted(self.set.get_ctx(), lambda: self.set.gist(context.set))
        return self if made is None else IndexSet(self.vars, made)

    def to_cond(self) -> Expr:
        return set_to_cond(self.set, self.vars)


def _space(variables: Sequence[Expr], space: IndexSpace | None) -> IndexSpace:
    if space is None:
        return IndexSpace(variables)
    if space.vars != list(dict.fromkeys(variables)):
        raise ValueError("the index space must be over the same variables, in order")
    return space


def size_bound(pa: isl.PwAff) -> int | Expr:
    """A bound that depends on sizes only, as an int or an expression in them: one quasi-affine piece over
    every admissible size, else the bound depends on the size in pieces (``SizeDecisionError``)."""
    pieces: list[tuple[isl.Set, isl.Aff]] = []
    pa.foreach_piece(lambda s, a: pieces.append((s, a)))
    if len(pieces) != 1 or not admissible(pa.get_domain_space()).params().is_subset(pieces[0][0].params()):
        raise SizeDecisionError(f"a bound that depends on the sizes in pieces ({pa}): bind them first")
    e = aff_to_expr(pieces[0][1], [])
    return e.arg if e.op is Op.CONST else e


def pw_aff_range(pa: isl.PwAff) -> tuple[int, int]:
    """The smallest and largest value ``pa`` takes on its domain, both inclusive, from the image set
    (``isl_pw_aff_min_val`` raises on some domains with divisions)."""
    image = isl.Map.from_pw_aff(pa).range()
    return image.dim_min_val(0).to_python(), image.dim_max_val(0).to_python()


def affine_part(c: Expr, keep: Sequence[Expr]) -> Expr:
    """What the comparisons of gather indices in condition ``c`` say of the index variables ``keep`` alone
    (``W[0] == i && clip(W[0], 3) == j`` says ``j < 3``): ``c``'s other variables and gather indices (each
    over ``[0, extent)``) projected out by isl, a comparison of data taken as possibly true.  ``True`` where
    ``c`` has no gather index, reads a size, or isl stops past :data:`QUERY_OPERATIONS`."""
    nodes = list(walk(c))
    if all(n.op is not Op.DATA_INDEX for n in nodes):
        return TRUE
    others = [n for n in dict.fromkeys(nodes) if n.op is Op.VAR and n not in keep and not is_size(n)]
    space = IndexSpace([*keep, *others], [n for n in nodes if n.op is Op.DATA_INDEX])
    made = budgeted(CTX, lambda: space.box().intersect(space.cond(c, exact=False)).project_out(
        _SET, len(keep), len(space.vars) - len(keep)).gist(IndexSpace(keep).box()))
    return TRUE if made is None else set_to_cond(made, keep)
