"""Definition-time bounds checking: no read of a compute may fall outside its tensor.

For each read ``T[idx]`` in a compute body we build, with isl, the set of points of the
compute's domain (its axes, the reduction's axes and ``where`` condition, and the conditions of
the ``if_then_else`` branches that guard the read) at which some index leaves ``[0, shape)``.
A nonempty set is an error naming the tensor, the index and one offending point.

Guards that isl cannot represent (data-dependent conditions) are taken as possibly true, so the
check stays sound: such a guard cannot excuse an out-of-bounds read.  An index that is not
quasi-affine cannot be checked and is rejected with a clear message.
"""

from __future__ import annotations

from ..ir.expr import TRUE, Expr, Op, logical, logical_not
from ..ir.printer import expr_to_str
from ..ir.rewrite import walk
from ..ir.tensor import ComputeOp
from ..poly.affine import IndexSpace, NotAffine, point_str


class OutOfBoundsError(IndexError):
    """A compute definition reads a tensor outside its shape for some point of its domain."""


def _guarded_reads(body: Expr):
    """Yield ``(read_node, guard)`` for every read, with the condition under which it runs."""
    seen: set[tuple[Expr, Expr]] = set()
    stack: list[tuple[Expr, Expr]] = [(body, TRUE)]
    while stack:
        node, guard = stack.pop()
        if (node, guard) in seen:
            continue
        seen.add((node, guard))
        if node.op is Op.READ:
            yield node, guard
        if node.op is Op.IF_THEN_ELSE:
            c, a, b = node.src
            stack.append((c, guard))
            stack.append((a, _and(guard, c)))
            stack.append((b, _and(guard, logical_not(c))))
        elif node.op is Op.REDUCE:
            cond = node.src[0]
            stack.append((cond, guard))
            for s in node.src[1:]:
                stack.append((s, _and(guard, cond)))
        else:
            stack.extend((s, guard) for s in node.src)


def _and(a: Expr, b: Expr) -> Expr:
    return b if a is TRUE else logical(Op.AND, a, b)


def check_op_bounds(op: ComputeOp) -> None:
    """Raise :class:`OutOfBoundsError` if some read of ``op`` can be out of bounds."""
    axes = list(op.axes) + list(op.reduce_axes)
    space = None
    for body in op.body[:1] if op.is_reduction else op.body:
        for rd, guard in _guarded_reads(body):
            tensor = rd.arg
            if all(i.op is Op.CONST and 0 <= i.arg < s for i, s in zip(rd.src, tensor.shape)):
                continue  # constant indices in range: nothing to prove
            if space is None:
                space = IndexSpace(axes)
                domain = space.box()
            where = domain.intersect(space.cond(guard, exact=False))
            for d, (idx, size) in enumerate(zip(rd.src, tensor.shape)):
                try:
                    pa = space.aff(idx)
                except NotAffine as exc:
                    data = [n for n in walk(idx) if n.op is Op.READ]
                    if data:
                        raise OutOfBoundsError(
                            f"{op.name}: the read {expr_to_str(rd)} indexes {tensor.name} with data "
                            f"(index {d}, {expr_to_str(idx)}, reads tensor {data[0].arg.name}): "
                            f"data-dependent reads (gathers) are not supported yet; the one-hot "
                            f"reduction sum(select({expr_to_str(idx)} == v, ...[v ...], 0), v) over a "
                            f"reduce axis v computes the same") from None
                    raise OutOfBoundsError(
                        f"{op.name}: cannot check the read {expr_to_str(rd)}: index {d} "
                        f"({expr_to_str(idx)}) is not quasi-affine ({exc})") from None
                bad = where.intersect(pa.lt_set(space.constant(0)).union(pa.ge_set(space.constant(size))))
                if not bad.is_empty():
                    raise OutOfBoundsError(
                        f"{op.name}: read {expr_to_str(rd)} can be out of bounds of tensor "
                        f"{tensor.name} {list(tensor.shape)}: index {d} ({expr_to_str(idx)}) "
                        f"leaves [0, {size}) at {point_str(space, bad)}")
