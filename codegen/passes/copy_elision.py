"""Copy elision: an output that is a plain copy of a temporary computes the temporary itself.

A gradient flowing unchanged into several inputs (a residual add's ``dX`` and ``dR``) is a temporary
``dS`` and one copying nest per output.  The first output that copies ``dS`` at its own point computes
``dS``'s body instead, and every other reader of ``dS`` reads that output (``dR[i, j] = dX[i, j]``).  Only
elementwise temporaries of one value, copied whole in the same dtype."""

from __future__ import annotations

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import replace_reads, substitute
from tensorad.ir.tensor import ComputeOp, Tensor


def _copied(op: ComputeOp, body: Expr) -> ComputeOp | None:
    """The op whose whole value ``op``'s ``body`` copies at ``op``'s own point, or ``None``."""
    if body.op is not Op.READ or body.src != tuple(op.axes) or not isinstance(body.arg.op, ComputeOp):
        return None
    t: Tensor = body.arg
    same = t.op.num_outputs == 1 and t.shape == op.shape and t.dtype == body.dtype == op.body[0].dtype
    return t.op if same else None


def elide_copies(ops: list[ComputeOp], bodies: dict, outputs: frozenset) -> list[ComputeOp]:
    """``ops`` with each elementwise temporary that an output copies whole replaced by that output, in its
    place; ``bodies`` is updated in place."""
    out_ops = {t.op for t in outputs}
    position = {op: k for k, op in enumerate(ops)}
    taken: dict[ComputeOp, ComputeOp] = {}  # temporary -> the output that computes it
    for op in ops:
        if op not in out_ops or op.num_outputs != 1 or op.is_reduction or len(bodies[op]) != 1:
            continue
        src = _copied(op, bodies[op][0])
        if src is None or src in taken or src in out_ops or src not in position or src.is_reduction \
                or len(bodies[src]) != 1:
            continue
        taken[src] = op
    if not taken:
        return ops
    for src, op in taken.items():
        bodies[op] = (substitute(bodies[src][0], dict(zip(src.axes, op.axes))),)

    def reroute(node: Expr) -> Expr | None:
        dst = taken.get(node.arg.op)
        return None if dst is None else Expr(Op.READ, node.dtype, node.src, Tensor(dst, 0))

    moved = set(taken.values())
    # every reader is rerouted, the moved outputs too (a temporary may read another elided one)
    for op in ops:
        if op not in taken:
            bodies[op] = tuple(replace_reads(b, reroute) for b in bodies[op])
    result = [taken.get(op, op) for op in ops if op not in moved]
    for src in taken:
        del bodies[src]
    return result
