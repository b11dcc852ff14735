"""Which tensors get a buffer and which are recomputed inside their consumers.

The rule (visible in the printed program as ``# inlined: ...`` and ``allocate ...``):

* outputs and reductions are materialized (a reduction recomputed per use multiplies work),
  and values whose readers must see the same bits (``Role.SAVED``: a max gradient's tie test);
* a non-reduction tensor is inlined into its readers -- unless recomputing it costs more than
  storing it: its body has a transcendental function or several reads, and its readers read it
  at least twice per element (``reads / size >= 2``, estimated from the readers' iteration
  boxes) -- the softmax ``exp`` read by both the sum and the division;
* but a tensor larger than every input and output together is never materialized when it can
  be inlined (a Jacobian-sized intermediate must not reach memory).

:func:`inline_bodies` then substitutes the bodies of inlined tensors into their readers, giving
each materialized op bodies that read only buffers.
"""

from __future__ import annotations

from tensorad.ir.expr import UNARY_MATH, Expr, Op
from tensorad.ir.rewrite import replace_reads, substitute, walk
from tensorad.ir.tensor import ComputeOp, Role, Tensor

EXPENSIVE = UNARY_MATH | {Op.POW, Op.DIV, Op.REDUCE}


def _box(op: ComputeOp) -> int:
    n = 1
    for ax in list(op.axes) + list(op.reduce_axes):
        n *= max(ax.hi - ax.lo, 0)
    return n


def _cost(body: Expr) -> tuple[int, int]:
    """(number of reads, number of expensive operations) in ``body``."""
    reads = sum(1 for n in walk(body) if n.op is Op.READ)
    heavy = sum(1 for n in walk(body) if n.op in EXPENSIVE)
    return reads, heavy


def choose_materialized(tensors: list[Tensor], outputs: list[Tensor], inputs: set[Tensor],
                        force_inline: set = frozenset(), force_materialize: set = frozenset()
                        ) -> set[ComputeOp]:
    """The compute ops that get buffers (see the module docstring)."""
    ops = [t.op for t in tensors if isinstance(t.op, ComputeOp) and t not in inputs]
    ops = list(dict.fromkeys(ops))
    out_ops = {t.op for t in outputs}
    limit = sum(t.size for t in list(inputs) + list(outputs))
    chosen: set[ComputeOp] = set()
    for op in ops:
        if op in out_ops or op.is_reduction or op in force_materialize or op.provenance.role is Role.SAVED:
            chosen.add(op)
    # reads of each op by every other op, weighted by the reader's iteration box
    uses: dict[ComputeOp, int] = dict.fromkeys(ops, 0)
    for reader in ops:
        w = _box(reader)
        for b in reader.body[:1] if reader.is_reduction else reader.body:
            for n in walk(b):
                if n.op is Op.READ and isinstance(n.arg.op, ComputeOp) and n.arg.op in uses:
                    uses[n.arg.op] += w
    # decide consumers first so that a reader's own inlining is known (approximation: boxes)
    for op in ops:
        if op in chosen or op in force_inline:
            continue
        size = max(_box(op), 1)
        reads, heavy = 0, 0
        for b in op.body:
            r, h = _cost(b)
            reads, heavy = reads + r, heavy + h
        costly = heavy > 0 or reads >= 3
        if costly and uses[op] >= 2 * size and size <= max(limit, 1):
            chosen.add(op)
    return chosen


def inline_bodies(op: ComputeOp, materialized: set[ComputeOp], inputs: set[Tensor]) -> tuple[Expr, ...]:
    """``op``'s bodies with every read of a non-materialized compute replaced by its body."""
    def inline(node: Expr) -> Expr | None:
        t: Tensor = node.arg
        if t in inputs or not isinstance(t.op, ComputeOp) or t.op in materialized:
            return None
        return substitute(t.op.body[t.value_index], dict(zip(t.op.axes, node.src)))

    return tuple(replace_reads(b, inline) for b in op.body)
