r"""Reductions whose domains nest along an output axis: the running reductions (scans).

For ``Y[.., j, ..] = reduce_{r in D(j)} src(r)`` over an affine set ``D``, the sets *nest upwards* along ``j``
when ``D(j - 1) ⊆ D(j)``: ``Y[j]`` is ``Y[j - 1]`` combined with the terms ``D(j) \ D(j - 1)``, one update per
term.  A prefix sum ``{k : k <= j}`` nests upwards, its adjoint ``{k : k >= j}`` downwards, a sliding window
not at all.  The scan is *ordered* when, with one reduction axis, every term a point adds lies past the last
term it carries (the plain loop's left fold, exact for any combiner): ``k <= j`` is (and ``k <= n - 1 - j``,
downwards), ``k >= j`` is not.  Such a suffix is ordered *reversed*: each term a point adds lies before the
first it carries, so a reduction over the reversed axis ``k' = n - 1 - k`` scans in order.

Code generation scans such reductions (:mod:`codegen.strategies.scan`); reverse mode asks
:func:`running_order` for a winner reduction a scan can carry, :func:`plain_prefix` whether a
product's adjoint is a linear recurrence and :func:`interval_count` how many points a guard pads with the
identity; the optimizer asks :func:`scan_axes` whether its sum is a scan."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

import islpy as isl

from ..ir.expr import Expr, Op, compare, const
from ..ir.rewrite import chain, free_vars
from .affine import IndexSpace, NotAffine
from .to_expr import pieces_to_expr, pw_aff_pieces


def shift(s: isl.Set, pos: int, d: int) -> isl.Set:
    """``{y : y - d e_pos in s}``: ``s`` moved by ``d`` along dimension ``pos``."""
    ma = isl.MultiAff.identity_on_domain_space(s.get_space())
    return s.preimage_multi_aff(ma.set_at(pos, ma.get_at(pos).add_constant_val(isl.Val(-d))))


def lift(s: isl.Set, like: isl.Set) -> isl.Set:
    """``s`` (over the first dimensions of ``like``) as a set over all of ``like``'s."""
    n = s.dim(isl.dim_type.set)
    out = s.insert_dims(isl.dim_type.set, n, like.dim(isl.dim_type.set) - n)
    for q in range(like.dim(isl.dim_type.set)):
        if like.has_dim_id(isl.dim_type.set, q):
            out = out.set_dim_id(isl.dim_type.set, q, like.get_dim_id(isl.dim_type.set, q))
    return out


def nesting(dom: isl.Set, proj: isl.Set, pos: int, step: int) -> tuple[isl.Set, isl.Set] | None:
    """``(carry, prev)`` when the sets of ``dom`` (``proj``: its projection onto the outputs) nest along
    output dimension ``pos`` in direction ``step`` (+1: a point extends ``j - 1``): the points whose
    predecessor is computed and the terms they carry; ``None`` if nothing is or a term leaves the set."""
    carry = proj.intersect(shift(proj, pos, step))
    prev = shift(dom, pos, step).intersect(lift(carry, dom))
    return None if prev.is_empty() or not prev.is_subset(dom) else (carry, prev)


def _as_map(s: isl.Set, n_out: int) -> isl.Map:
    """``s`` over (output, reduction) axes as a map from output points to reduction points."""
    return isl.Map.from_range(s).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, n_out)


def ordered(fresh: isl.Set, prev: isl.Set, n_out: int, reverse: bool = False) -> bool:
    """One reduction axis, and at every point its first new term (of ``fresh``) lies past its
    last carried one (of ``prev``): the scan combines in the plain loop's order.  ``reverse``: the
    same with the reduction axis reversed (its last new term lies before its first carried one)."""
    if fresh.dim(isl.dim_type.set) != n_out + 1:
        return False
    early, late = (prev, fresh) if reverse else (fresh, prev)
    first = _as_map(early, n_out).lexmin_pw_multi_aff().get_pw_aff(0)
    last = _as_map(late, n_out).lexmax_pw_multi_aff().get_pw_aff(0)
    return first.le_set(last).is_empty()


def _domain(axes: Sequence[Expr], raxes: Sequence[Expr], cond: Expr,
            reads: Sequence[Expr]) -> tuple[isl.Set, isl.Set, set]:
    """``(dom, proj, used)`` of ``reduce_{raxes where cond}`` over ``axes``: the representable conjuncts'
    set, its projection onto the axes, and the variables the rest uses."""
    space = IndexSpace(tuple(axes) + tuple(raxes))
    dom, used = space.box(), set()
    for term in chain(cond, Op.AND):
        try:
            dom = dom.intersect(space.cond(term))
        except NotAffine:
            used |= set(free_vars(term))
    used |= {v for e in reads for v in free_vars(e)}
    return dom, dom.project_out(isl.dim_type.set, len(axes), len(raxes)), used


def running_order(axes: Sequence[Expr], raxes: Sequence[Expr], cond: Expr,
                  reads: Sequence[Expr]) -> int | None:
    """``1`` when ``reduce_{raxes where cond}`` over ``axes`` is an ordered scan, upwards or downwards,
    along an output axis: the affine conjuncts of ``cond`` mention the axis and nest along it, and
    neither ``reads`` (the sources) nor the conjuncts isl cannot represent mention it; ``-1`` when it is
    one only with its reduction axis reversed; else ``None``.  ``max_k X[b, k] where k <= i`` over
    ``(b, i)`` gives ``1``, ``where k >= i`` gives ``-1`` (each point adds its first term)."""
    if len(raxes) != 1:
        return None
    dom, proj, used = _domain(axes, raxes, cond, reads)
    bounded = set(free_vars(cond))  # (an axis the condition does not bound: one set throughout)
    found = None
    for pos, j in enumerate(axes):
        if j in used or j.extent < 2 or j not in bounded:
            continue
        for step in (1, -1):
            nested = nesting(dom, proj, pos, step)
            if nested is None:
                continue
            fresh = dom.subtract(nested[1])
            if ordered(fresh, nested[1], len(axes)):
                return 1
            if found is None and ordered(fresh, nested[1], len(axes), reverse=True):
                found = -1
    return found


def scan_axes(axes: Sequence[Expr], raxes: Sequence[Expr], cond: Expr, reads: Sequence[Expr]) -> list[Expr]:
    """The output axes along which ``reduce_{raxes where cond}`` over ``axes`` nests, upwards or
    downwards, in any order (a sum scanned under fast math): the condition bounds the axis, and neither
    ``reads`` nor the conjuncts isl cannot represent mention it.  ``sum_i H[i] where i >= k`` over
    ``(k,)`` gives ``[k]``; ``sum_i H[i] / D[k] where i >= k`` gives ``[]``."""
    if not raxes:
        return []
    dom, proj, used = _domain(axes, raxes, cond, reads)
    bounded = set(free_vars(cond))
    return [j for pos, j in enumerate(axes)
            if j not in used and j.extent >= 2 and j in bounded
            and any(nesting(dom, proj, pos, step) is not None for step in (1, -1))]


def classes_apart(raxes: Sequence[Expr], terms: Sequence[Expr]) -> list[set[Expr]]:
    """The classes of ``raxes`` the conjuncts ``terms`` link (``a <= i``, ``b <= j``: ``[{a}, {b}]``)."""
    classes = [{r} for r in raxes]
    for t in terms:
        read = set(free_vars(t))
        linked = [c for c in classes if c & read]
        if len(linked) > 1:
            classes = [c for c in classes if not c & read] + [set().union(*linked)]
    return classes if len(classes) > 1 else []


def plain_prefix(axes: Sequence[Expr], raxes: Sequence[Expr], cond: Expr,
                 reads: Sequence[Expr]) -> tuple[int, int, list[Expr], int] | None:
    """``(pos, step, rest, shift)`` when ``reduce_{k where cond}`` over ``axes`` is a plain prefix
    (``step = 1``) or suffix (``step = -1``) along the output axis ``j = axes[pos]``: one reduction axis
    ``k`` over ``j``'s range, the conjuncts of ``cond`` that mention ``j`` say exactly ``k <= j - shift``
    (``k >= j + shift``; isl proves it), and ``rest``, the other conjuncts, and ``reads`` do not mention
    ``j``.  Then the point ``j`` reduces the terms on its side that ``rest`` keeps, each term ``k``
    entering at ``j = k + step * shift``.  ``prod_k X[i, k] where k <= j`` over ``(i, j)`` gives
    ``(1, 1, [], 0)``; ``where k < j`` gives ``(1, 1, [], 1)``."""
    if len(raxes) != 1:
        return None
    (k,) = raxes
    terms, used = list(chain(cond, Op.AND)), {v for e in reads for v in free_vars(e)}
    for pos, j in sorted(enumerate(axes), key=lambda pj: (pj[1].lo, pj[1].hi) != (k.lo, k.hi)):
        if j in used:
            continue
        ties = [t for t in terms if j in free_vars(t)]
        if not ties or any(set(free_vars(t)) - {j, k} for t in ties):
            continue
        space = IndexSpace((j, k))
        try:
            dom = reduce(isl.Set.intersect, map(space.cond, ties), space.box())
        except NotAffine:
            continue
        if dom.is_empty():
            continue
        ls = isl.LocalSpace.from_space(dom.get_space())
        k_aff, j_aff = (isl.Aff.var_on_domain(ls, isl.dim_type.set, q) for q in (1, 0))
        diff = k_aff.sub(j_aff)  # k - j
        for step, side, bound in ((1, Op.LE, dom.max_val(diff)), (-1, Op.GE, dom.min_val(diff))):
            if not bound.is_int():
                continue
            d = const(int(bound.to_python()), j.dtype)
            if dom.is_equal(space.box().intersect(space.cond(compare(side, k, j + d)))):
                return pos, step, [t for t in terms if j not in free_vars(t)], -step * int(bound.to_python())
    return None


def interval_count(axes: Sequence[Expr], k: Expr, cond: Expr) -> Expr | None:
    """The number of points of ``k``'s range where ``cond`` holds, per point of ``axes``, as an index
    expression over ``axes``, when ``cond`` is affine and those points form an interval at each point of
    ``axes`` (else ``None``).  ``k > i`` over ``(i,)``, ``k`` in ``[0, n)``, gives ``n - 1 - i``."""
    if any(type(b) is not int for v in (*axes, k) for b in (v.lo, v.hi)):
        return None
    space = IndexSpace((*axes, k))
    try:
        s = space.box().intersect(space.cond(cond))
    except NotAffine:
        return None
    m = _as_map(s, len(axes))
    ks = m.get_space().range()
    if not m.apply_range(isl.Map.lex_le(ks)).intersect(m.apply_range(isl.Map.lex_ge(ks))).is_subset(m):
        return None  # (a hole between two points)
    lo, hi = (f().get_pw_aff(0) for f in (m.lexmin_pw_multi_aff, m.lexmax_pw_multi_aff))
    outputs = space.box().project_out(isl.dim_type.set, len(axes), 1)
    zero = isl.PwAff.zero_on_domain(isl.LocalSpace.from_space(outputs.get_space()))
    count = hi.sub(lo).add_constant_val(isl.Val(1))
    count = count.union_add(zero.intersect_domain(outputs.subtract(m.domain())))
    return pieces_to_expr(pw_aff_pieces(count.coalesce(), list(axes)))
