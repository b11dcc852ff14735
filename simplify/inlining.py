"""Moving bodies between tensors: inlining cheap producers, fusing gathers of reductions.

* :func:`is_cheap` -- a non-reduction body worth substituting into its readers (no transcendental, power
  or reduction, at most four reads, small): inlined, its guards count for the reader's nonzeroness.
* :func:`inline_read` -- the producer's body at the read's indices.
* :func:`fuse_gather` -- a non-reduction body *linear* in a single read of a sum ``P`` becomes one sum
  over ``P``'s reduction variables: ``ctx(sum_k s_k) = sum_k ctx(s_k)`` when ``ctx(0) = 0``.  The adjoint
  of an injective op (pad, reshape, transpose, slice) is such a gather; fused, the sum runs over the
  smaller tensor's points only."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tensorad.ir.expr import UNARY_MATH, Expr, Op, ReduceArg, is_size, var
from tensorad.ir.rewrite import size_values, substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.poly.affine import decide

from .algebra.rules import is_zero

EXPENSIVE = UNARY_MATH | {Op.POW, Op.REDUCE}
MAX_INLINE_NODES = 40
MAX_INLINE_READS = 4


def is_cheap(body: Expr) -> bool:
    nodes = list(walk(body))
    if any(is_size(n) for n in nodes):  # (values of sizes alone: constants once the sizes are bound)
        sized = size_values(body)
        nodes = [n for n in nodes if n not in sized]
    if len(nodes) > MAX_INLINE_NODES:
        return False
    reads = sum(n.op is Op.READ for n in nodes)
    return not any(n.op in EXPENSIVE for n in nodes) and reads <= MAX_INLINE_READS


def inline_read(node: Expr) -> Expr:
    """The body of the (non-reduction) tensor read by ``node``, at ``node``'s indices."""
    t: Tensor = node.arg
    return substitute(t.op.body[t.value_index], dict(zip(t.op.axes, node.src)))


def rename_reduce(e: Expr, mapping: dict[Expr, Expr]) -> Expr:
    """Substitute variables in ``e`` (a REDUCE's listed axes included)."""
    out = substitute(e, mapping)
    if out.op is Op.REDUCE:
        ra = out.arg
        out = out.replace(arg=ReduceArg(ra.combiner, tuple(mapping.get(a, a) for a in ra.axes),
                                        ra.value_index))
    return out


def _contains(e: Expr, target: Expr) -> bool:
    return any(n is target for n in walk(e))


def _linear_in(e: Expr, target: Expr) -> bool:
    """Whether ``e`` is ``ctx(target)`` with ``ctx`` linear, ``ctx(0) = 0``, one occurrence."""
    while e is not target:
        op = e.op
        if op is Op.MUL:
            a, b = e.src
            ina, inb = _contains(a, target), _contains(b, target)
            if ina == inb:
                return False
            e = a if ina else b
        elif op is Op.DIV:
            if _contains(e.src[1], target):
                return False
            e = e.src[0]
        elif op is Op.NEG:
            e = e.src[0]
        elif op in (Op.SELECT, Op.IF_THEN_ELSE):
            c, a, b = e.src
            if not is_zero(b) or _contains(c, target):
                return False
            e = a
        else:
            return False
    return True


def box_points(axes: Sequence[Expr]) -> int | Expr:
    """The number of points of the box the ``axes`` span (an expression in sizes, over sizes)."""
    return math.prod(a.hi - a.lo for a in axes)


def fuse_gather(axes: Sequence[Expr], body: Expr, fusable: Callable[[ComputeOp], bool]) -> Expr | None:
    """``body`` as one sum when it is linear in a single read of a fusable sum (see above)."""
    if body.op is Op.REDUCE:
        return None
    reads = [n for n in walk(body) if n.op is Op.READ and isinstance(n.arg.op, ComputeOp)
             and n.arg.op.is_reduction and n.arg.op.num_outputs == 1]
    if len(reads) != 1:
        return None
    target = reads[0]
    op: ComputeOp = target.arg.op
    red = op.body[0]
    if red.arg.combiner.kind != "sum" or not fusable(op) or decide(box_points(axes) > box_points(op.axes)):
        return None
    if not _linear_in(body, target):
        return None
    fresh = {k: var(k.name, k.lo, k.hi) for k in red.arg.axes}
    mapping = dict(zip(op.axes, target.src)) | fresh
    cond = substitute(red.src[0], mapping)
    src = substitute(red.src[1], mapping)
    new_src = substitute(body, {target: src})
    return Expr(Op.REDUCE, new_src.dtype, (cond, new_src),
                ReduceArg(red.arg.combiner, tuple(fresh[k] for k in red.arg.axes), 0))
