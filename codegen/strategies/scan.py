"""Running reductions (scans): a reduction whose terms along one output axis nest, computed by
carrying the running value along that axis instead of reducing again at every point.

``Y[.., j, ..] = reduce_{r in D(j)} src(r)`` where ``src`` and the non-affine rest of the
condition do not mention ``j``, and the affine sets nest: ``D(j - 1) ⊆ D(j)`` (a prefix sum,
``k <= j + c``: scanned upwards) or ``D(j + 1) ⊆ D(j)`` (a suffix sum, ``k >= j``, the adjoint
of a prefix sum: scanned downwards).  Then

    Y[.., j, ..] = Y[.., j -/+ 1, ..]  combined with  reduce_{r in D(j) \\ D(j -/+ 1)} src(r)

where ``j -/+ 1`` is computed too, and the whole reduction where it is not (the first point of
each row).  A prefix sum over ``n`` points makes ``n`` updates instead of ``n (n + 1) / 2``.
isl proves the nesting and gives both sets exactly, so any affine bounds, offsets, other axes
and reduction axes qualify; the scanned axis may be anywhere, and the output axes after it run
innermost (vectorized across them), the ones before it are parallel.  Sums, products, max
and min qualify (no inverse is needed; a sliding window's sets do not nest: plain loops).

Order: a prefix sum adds its terms in the order of the plain sequential loop (``((x0 + x1) +
x2) ...``); a suffix sum in the reversed order, which fast math allows (``fastmath=False``
keeps plain loops for anything but a proven same-order prefix: one reduction axis whose new
terms all follow the ones it carries)."""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from tensorad.ir.expr import TRUE, Expr, Op, const
from tensorad.ir.rewrite import free_vars, substitute
from tensorad.poly.domain import count_bound

from ..loops.domain import PolyStmt, ReductionInfo
from ..program import Buffer, If, Store

COMBINERS = ("sum", "max", "min", "prod")


@dataclass(frozen=True, eq=False)
class ScanSpec:
    """How :func:`scan_form` scans: output axis ``axis`` (a position) in direction ``step``."""

    axis: int
    step: int  # +1: upwards (each point extends its predecessor j - 1), -1: downwards
    carry: isl.Set  # over the output axes: the points whose predecessor is computed too
    fresh: isl.Set  # over output + reduction axes: the terms a point adds to what it carries
    updates: int  # points of ``fresh``, the nest's work (an upper bound where isl might count long)


def _shift(s: isl.Set, pos: int, d: int) -> isl.Set:
    """``{y : y - d e_pos in s}``: ``s`` moved by ``d`` along dimension ``pos``."""
    ma = isl.MultiAff.identity_on_domain_space(s.get_space())
    return s.preimage_multi_aff(ma.set_at(pos, ma.get_at(pos).add_constant_val(isl.Val(-d))))


def _lift(s: isl.Set, like: isl.Set) -> isl.Set:
    """``s`` (over the first dimensions of ``like``) as a set over all of ``like``'s."""
    n = s.dim(isl.dim_type.set)
    out = s.insert_dims(isl.dim_type.set, n, like.dim(isl.dim_type.set) - n)
    for q in range(like.dim(isl.dim_type.set)):
        if like.has_dim_id(isl.dim_type.set, q):
            out = out.set_dim_id(isl.dim_type.set, q, like.get_dim_id(isl.dim_type.set, q))
    return out


def find_scan(info: ReductionInfo, ordered: bool = False) -> ScanSpec | None:
    """The cheapest scan of ``info`` (fewest updates), when one carries terms; else ``None``.
    ``ordered``: only a scan that combines in the plain loop's order (``fastmath=False``)."""
    comb = info.combiner
    if comb.arity != 1 or comb.kind not in COMBINERS or not info.outer or not info.raxes \
            or info.epilogue is not None:
        return None
    used = {v for e in (*info.sources, info.rest) for v in free_vars(e)}
    dom, proj = info.update_domain, info.outer_domain
    best = None
    for pos, j in enumerate(info.outer):
        if j in used or j.extent < 2:
            continue
        for step in (1, -1):
            carry = proj.intersect(_shift(proj, pos, step))
            prev = _shift(dom, pos, step).intersect(_lift(carry, dom))
            if prev.is_empty() or not prev.is_subset(dom):
                continue  # (nothing carried, or a term that leaves)
            fresh = dom.subtract(prev)
            updates = count_bound(fresh)  # (a cost estimate: exact unless isl might take long)
            if best is None or updates < best.updates:
                if not ordered or (step == 1 and _ordered(fresh, prev, len(info.outer))):
                    best = ScanSpec(pos, step, carry, fresh, updates)
    return best


def _as_map(s: isl.Set, n_out: int) -> isl.Map:
    """``s`` over (output, reduction) axes as a map from output points to reduction points."""
    return isl.Map.from_range(s).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, n_out)


def _ordered(fresh: isl.Set, prev: isl.Set, n_out: int) -> bool:
    """One reduction axis, and at every point its first new term lies past its last carried
    one: the scan combines in the plain loop's order."""
    if fresh.dim(isl.dim_type.set) != n_out + 1:
        return False
    first = _as_map(fresh, n_out).lexmin_pw_multi_aff().get_pw_aff(0)
    last = _as_map(prev, n_out).lexmax_pw_multi_aff().get_pw_aff(0)
    return first.le_set(last).is_empty()


def scan_form(info: ReductionInfo, out: Buffer, spec: ScanSpec) -> list[PolyStmt]:
    """The statements of the scan: ``out[x] = out[x - step e_j]`` where ``x`` carries, the
    identity elsewhere, then ``out[x] = combine(out[x], src)`` over the fresh terms.  Time:
    the output axes up to ``j`` (``j`` negated downwards), the phase, the reduction axes, the
    output axes after ``j`` (innermost: vectorized across)."""
    outer, raxes, comb = info.outer, info.raxes, info.combiner
    p, j = spec.axis, info.outer[spec.axis]
    here = Expr(Op.READ, out.dtype, outer, out.tensor)
    shifted = tuple((j - const(1, j.dtype) if spec.step > 0 else j + const(1, j.dtype)) if v is j else v
                    for v in outer)
    before = Expr(Op.READ, out.dtype, shifted, out.tensor)
    combined = substitute(comb.result[0], {comb.lhs[0]: here, comb.rhs[0]: info.sources[0]})
    update: tuple = (Store(out, outer, combined),)
    if info.rest is not TRUE:
        update = (If(info.rest, update, (), affine=False),)
    head = tuple(outer[:p]) + ((j if spec.step > 0 else const(0, j.dtype) - j),)
    tail = tuple(outer[p + 1:])
    first = head + (0,) + (0,) * len(raxes) + tail
    return [
        PolyStmt("C", outer, spec.carry, (Store(out, outer, before, counted=False),), first),
        PolyStmt("I", outer, info.outer_domain.subtract(spec.carry),
                 (Store(out, outer, comb.identity[0], counted=False),), first),
        PolyStmt("U", outer + raxes, spec.fresh, update, head + (1,) + tuple(raxes) + tail),
    ]
