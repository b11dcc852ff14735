"""Epilogue fusion: an elementwise consumer applied as a reduction stores its results.

The language lifts ``sum(...) * 0.25`` into a reduction ``R`` and a consumer
``C[x] = R[x] * 0.25``; left alone that is a temporary the size of the output and a second pass
over memory.  When ``C`` is the only reader of ``R``, reads it exactly at its own index ``x``
(same shape), and the reduction writes every output element (no identity fill), the
reduction's nest stores ``C``'s body with ``R[x]`` replaced by the accumulated value -- ``R``
gets no buffer and ``C`` no nest of its own.  A consumer ``select(c, R[x] ..., 0)`` (the
optimizer's form) also restricts the reduction to ``c`` (see ``domain.reduction_domain``).
The fused nest runs where ``C``'s nest would have (after everything ``C`` reads).
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import replace_reads, substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor


@dataclass(frozen=True, eq=False)
class Epilogue:
    consumer: ComputeOp
    reduction: Tensor
    body: Expr  # the consumer's inlined body, over the consumer's axes

    def apply(self, outer: tuple[Expr, ...], value: Expr) -> Expr:
        """The consumer's value at ``outer`` when the reduction's value there is ``value``."""
        body = substitute(self.body, dict(zip(self.consumer.axes, outer)))
        return replace_reads(body, lambda n: value if n.arg == self.reduction else None)


def find_epilogues(ops: list[ComputeOp], bodies: dict[ComputeOp, tuple[Expr, ...]],
                   outputs: set[Tensor], covers_box) -> dict[ComputeOp, Epilogue]:
    """Reductions (keys) whose single elementwise reader can be fused as their epilogue.

    ``covers_box(op, bodies)`` says whether a reduction writes every output element itself.
    """
    readers: dict[ComputeOp, list[ComputeOp]] = {op: [] for op in ops}
    for op in ops:
        for b in bodies[op]:
            for n in walk(b):
                if n.op is Op.READ and isinstance(n.arg.op, ComputeOp) and n.arg.op in readers:
                    if op not in readers[n.arg.op]:
                        readers[n.arg.op].append(op)
    out: dict[ComputeOp, Epilogue] = {}
    taken: set[ComputeOp] = set()  # a consumer takes at most one reduction
    for r in ops:
        t = Tensor(r, 0)
        if not r.is_reduction or r.num_outputs != 1 or t in outputs or len(readers[r]) != 1:
            continue
        c = readers[r][0]
        if c.is_reduction or c.num_outputs != 1 or c.shape != r.shape or c in taken:
            continue
        body = bodies[c][0]
        if any(n.op is Op.READ and n.arg == t and n.src != c.axes for n in walk(body)):
            continue
        if not covers_box(r, bodies[r]):
            continue
        out[r] = Epilogue(c, t, body)
        taken.add(c)
    return out
