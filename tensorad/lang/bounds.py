"""Definition-time bounds checking: no read of a compute may fall outside its tensor.

For each read ``T[idx]`` of a body, isl builds the set of points of the compute's domain (axes, reduction
axes and ``where``, and the ``if_then_else`` conditions guarding the read) at which an index leaves
``[0, shape)``; a nonempty set is an error naming the tensor, the index and one offending point.  Guards
isl cannot represent are taken as possibly true (sound); an index that is not quasi-affine is rejected.  A
gather index (``DATA_INDEX``) is in range by construction: an opaque variable over that range.  Size
variables are parameters of the space over their admissible values: a read is proven for every size."""

from __future__ import annotations

import islpy as isl

from ..ir.expr import Expr, Op, logical_not
from ..ir.intrange import index_bounds
from ..ir.printer import expr_to_str
from ..ir.rewrite import walk
from ..ir.tensor import ComputeOp
from ..poly.affine import IndexSpace, NotAffine, point_str
from .sizes import monomial


class OutOfBoundsError(IndexError):
    """A compute definition reads a tensor outside its shape for some point of its domain."""


def _read_domains(space: IndexSpace, domain: isl.Set, body: Expr) -> list[tuple[Expr, isl.Set]]:
    """Every read under ``body`` with the points where it is evaluated: wherever a user is, restricted to
    its branch (an ``if_then_else`` condition or its negation, a ``where``); users before operands, so one
    pass suffices (a shared node unites its users' sets)."""
    order = list(walk(body))
    has_read: set[Expr] = set()
    for node in order:
        if node.op is Op.READ or any(x in has_read for x in node.src):
            has_read.add(node)
    reach: dict[Expr, isl.Set] = {body: domain}

    def add(node: Expr, where: isl.Set) -> None:
        if node in has_read:
            before = reach.get(node)
            reach[node] = where if before is None else before.union(where).coalesce()

    for node in reversed(order):
        here = reach.get(node)
        if here is None:
            continue
        if node.op is Op.IF_THEN_ELSE:
            c, a, b = node.src
            add(c, here)
            add(a, here.intersect(space.cond(c, exact=False)))
            add(b, here.intersect(space.cond(logical_not(c), exact=False)))
        elif node.op is Op.REDUCE:
            cond = node.src[0]
            add(cond, here)
            inside = here.intersect(space.cond(cond, exact=False))
            for s in node.src[1:]:
                add(s, inside)
        else:
            for s in node.src:
                add(s, here)
    return [(n, reach[n]) for n in order if n.op is Op.READ and n in reach]


def _needs_proof(node: Expr, ranged: frozenset) -> bool:
    """A read whose indices are not all in range by their form (:func:`_in_range`)."""
    return node.op is Op.READ and not all(_in_range(i, s, ranged) for i, s in zip(node.src, node.arg.shape))


def _in_range(i: Expr, s: int | Expr, ranged: frozenset) -> bool:
    """Whether index ``i`` lies in ``[0, s)`` by its form: a constant in it, a variable of ``ranged`` (the
    compute's axes and reduction axes) whose whole range lies in it, or a remainder modulo the extent
    ``s`` itself where that is a positive expression in sizes (``x % n``: no quasi-affine index for isl)."""
    if i.op is Op.CONST:
        return _le(0, i.arg) and _le(i.arg + 1, s)
    if i.op is Op.VAR:
        return i in ranged and _le(0, i.lo) and _le(i.hi, s)
    if i.op is Op.FLOORDIV and i.src[0] in ranged and i.src[0].lo == 0:  # (``k // n`` of ``k < 7 * n``)
        (a, fa), (b, fb) = monomial([i.src[0].hi]), monomial([s, i.src[1]])
        return (a, fa) == (b, fb) and (index_bounds(i.src[1]) or (0, 0))[0] >= 1
    return i.op is Op.MOD and i.src[1] is s and (index_bounds(s) or (0, 0))[0] >= 1


def _le(a: int | Expr, b: int | Expr) -> bool:
    """``a <= b`` by form: integers, or one expression in sizes (an axis over a whole symbolic extent)."""
    return a is b or (isinstance(a, int) and isinstance(b, int) and a <= b)


def check_op_bounds(op: ComputeOp) -> None:
    """Raise :class:`OutOfBoundsError` if some read of ``op`` can be out of bounds."""
    bodies = op.body[:1] if op.is_reduction else op.body
    ranged = frozenset(a for a in list(op.axes) + list(op.reduce_axes)
                       if a.lo is not None and a.hi is not None)
    if not any(_needs_proof(n, ranged) for b in bodies for n in walk(b)):
        return
    axes = list(op.axes) + list(op.reduce_axes)
    opaque = [n for b in bodies for n in walk(b) if n.op is Op.DATA_INDEX]
    space = IndexSpace(axes, opaque)  # gather indices: any value in their range
    domain = space.box()
    for body in bodies:
        for rd, where in _read_domains(space, domain, body):
            tensor = rd.arg
            if not _needs_proof(rd, ranged):
                continue
            for d, (idx, size) in enumerate(zip(rd.src, tensor.shape)):
                if _in_range(idx, size, ranged):
                    continue
                try:
                    pa = space.aff(idx)
                except NotAffine as exc:
                    data = [n for n in walk(idx) if n.op is Op.READ]
                    if data:
                        raise OutOfBoundsError(
                            f"{op.name}: the read {expr_to_str(rd)} indexes {tensor.name} with data "
                            f"(index {d}, {expr_to_str(idx)}, reads tensor {data[0].arg.name}) "
                            f"outside a gather index: build the read with {tensor.name}[...] or "
                            f"{tensor.name}.take(..., mode=...), which check, clip or wrap "
                            f"such an index") from None
                    raise OutOfBoundsError(
                        f"{op.name}: cannot check the read {expr_to_str(rd)}: index {d} "
                        f"({expr_to_str(idx)}) is not quasi-affine ({exc})") from None
                bad = where.intersect(pa.lt_set(space.constant(0)).union(pa.ge_set(space.bound(size))))
                if not bad.is_empty():
                    raise OutOfBoundsError(
                        f"{op.name}: read {expr_to_str(rd)} can be out of bounds of tensor "
                        f"{tensor.name} {list(tensor.shape)}: index {d} ({expr_to_str(idx)}) "
                        f"leaves [0, {size}) at {point_str(space, bad)}")
