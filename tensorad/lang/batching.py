"""A tensor program with a batch axis in front: what ``vmap`` of a tensorad program computes.

``batch_program(outputs, inputs, batched, size)`` gives each input flagged in ``batched``, and every
tensor that depends on one, a leading axis of length ``size`` (reads of batched tensors take the batch
index first); other tensors are shared unchanged.  Reductions keep their axes; bodies, tags, attributes
and provenance are kept, so autodiff and the optimizer treat it as the original."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir.expr import Expr, Op, var
from ..ir.rewrite import rename, tensor_graph, walk
from ..ir.tensor import ComputeOp, Tensor
from .tensor_lang import make_compute, placeholder


def batch_program(outputs: Sequence[Tensor], inputs: Sequence[Tensor], batched: Sequence[bool],
                  size: int) -> tuple[list[Tensor], list[Tensor]]:
    """``(outputs, inputs)`` of the batched program; an output on no batched input is unchanged."""
    if len(batched) != len(inputs):
        raise ValueError(f"batch_program: {len(inputs)} inputs but {len(batched)} batch flags")
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"batch_program: the batch size must be a positive integer, got {size!r}")
    new: dict[Tensor, Tensor] = {}  # every tensor of the program -> its batched form (or itself)
    changed: set[Tensor] = set()  # the tensors that gain the batch axis
    for x, b in zip(inputs, batched):
        if not x.is_placeholder:
            raise TypeError(f"batch_program: input {x.name!r} is not a placeholder")
        new[x] = placeholder((size, *x.shape), x.dtype, x.name) if b else x
        if b:
            changed.add(x)
    made: dict[ComputeOp, tuple[Tensor, ...]] = {}
    for t in tensor_graph(outputs):
        if t in new:
            continue
        if t.is_placeholder:
            raise ValueError(f"batch_program: the outputs read placeholder {t.name!r}, not an input")
        if t.op not in made:
            made[t.op] = _batch_op(t.op, new, changed, size)
        made_t = made[t.op][t.value_index]
        new[t] = t if made_t is None else made_t
        if made_t is not None:
            changed.add(t)
    return [new[o] for o in outputs], [new[x] for x in inputs]


def _batch_op(op: ComputeOp, new: dict[Tensor, Tensor], changed: set[Tensor],
              size: int) -> tuple[Tensor, ...]:
    reads_batched = {n.arg for b in op.body for n in walk(b) if n.op is Op.READ and n.arg in changed}
    if not reads_batched:
        return (None,) * op.num_outputs
    bvar = var("b", 0, size)
    reduce_axes = {a for b in op.body for n in walk(b) if n.op is Op.REDUCE for a in n.arg.axes}
    fresh = {v: var(v.name, v.lo, v.hi) for v in (*op.axes, *sorted(reduce_axes, key=lambda v: v.name))}

    def read(node: Expr) -> Expr | None:
        return new[node.arg][(bvar, *node.src)] if node.arg in reads_batched else None

    memo: dict = {}
    bodies = [rename(b, fresh, read, memo) for b in op.body]
    axes = [bvar, *(fresh[a] for a in op.axes)]
    return make_compute(op.name, axes, bodies, op.tag, dict(op.attrs), check_bounds=False,
                        provenance=op.provenance)
