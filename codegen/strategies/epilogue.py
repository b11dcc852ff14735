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

from tensorad.ir.expr import Expr
from tensorad.ir.rewrite import replace_reads, substitute
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
