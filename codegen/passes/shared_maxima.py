"""A max or min that a winner reduction computes too, read from the winner.

Reverse mode finds a max's winner, first index and tie count in one pass (``tensorad.autodiff``'s winner
reduction), whose first output is the max itself: its combiner's first result combines its first
operands as the max's does, from the same identity, over the same box, condition and source.  When the
program needs the max as well (a later layer reads the pooled values), its readers read the winner's
first output, computed where the first of the two was, and the max is not computed."""

from __future__ import annotations

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import replace_reads, substitute
from tensorad.ir.tensor import ComputeOp, Tensor


def _reduction(op: ComputeOp, bodies: dict) -> Expr | None:
    body = bodies[op][0]
    return body if body.op is Op.REDUCE else None


def _first_value(winner: Expr, y: Expr) -> bool:
    """Whether the first combined value of the reduction ``winner`` combines as the one-value ``y``."""
    w, c = winner.arg.combiner, y.arg.combiner
    if c.arity != 1 or w.arity < 2 or w.identity[0] is not c.identity[0]:
        return False
    return substitute(w.result[0], {w.lhs[0]: c.lhs[0], w.rhs[0]: c.rhs[0]}) is c.result[0]


def _same_box(a: ComputeOp, x: Expr, b: ComputeOp, y: Expr) -> dict | None:
    """The renaming of ``b``'s axes and reduction axes to ``a``'s, when the boxes are equal."""
    pairs = list(zip(a.axes, b.axes)) + list(zip(x.arg.axes, y.arg.axes))
    if len(a.axes) != len(b.axes) or len(x.arg.axes) != len(y.arg.axes) \
            or any((u.lo, u.hi) != (v.lo, v.hi) for u, v in pairs):
        return None
    return {v: u for u, v in pairs}


def _computed_by(y_op: ComputeOp, ops: list[ComputeOp], bodies: dict) -> ComputeOp | None:
    """The winner op whose first output is ``y_op``'s value, else ``None``."""
    y = _reduction(y_op, bodies) if y_op.num_outputs == 1 else None
    if y is None or y.arg.combiner.kind not in ("max", "min"):
        return None
    for w_op in ops:
        w = _reduction(w_op, bodies) if w_op is not y_op else None
        if w is None or w.arg.value_index != 0 or not _first_value(w, y):
            continue
        to_y = _same_box(y_op, y, w_op, w)
        if to_y is not None and all(substitute(e, to_y) is f for e, f in zip(w.src[:2], y.src)):
            return w_op
    return None


def read_maxima_from_winners(ops: list[ComputeOp], bodies: dict, outputs: frozenset) -> list[ComputeOp]:
    """``ops`` with each max/min that a winner computes (not an output) replaced by that winner, at the
    first of the two places; the max's readers read the winner's first output.  ``bodies`` is updated
    in place."""
    out_ops = {t.op for t in outputs}
    taken: dict[ComputeOp, ComputeOp] = {}
    for op in ops:
        w = None if op in out_ops else _computed_by(op, ops, bodies)
        if w is not None and w not in taken.values():
            taken[op] = w
    if not taken:
        return ops

    def reroute(node: Expr) -> Expr | None:
        w = taken.get(node.arg.op)
        return None if w is None else Expr(Op.READ, node.dtype, node.src, Tensor(w, 0))

    for op in ops:
        bodies[op] = tuple(replace_reads(b, reroute) for b in bodies[op])
    result = list(dict.fromkeys(taken.get(op, op) for op in ops))  # (the winner reads what the max reads)
    for op in taken:
        del bodies[op]
    return result


__all__ = ["read_maxima_from_winners"]
