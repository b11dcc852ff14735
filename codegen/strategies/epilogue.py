"""Epilogue fusion: an elementwise consumer applied as a reduction stores its results.

For a lifted reduction ``R`` and its consumer ``C[x] = R[x] * 0.25``: when ``C`` is ``R``'s only reader,
reads it exactly at its own index (same shape) and the reduction writes every output element, the
reduction's nest stores ``C``'s body with ``R[x]`` replaced by the accumulated value, and ``R`` gets no
buffer.  A consumer ``select(c, R[x] ..., 0)`` also restricts the reduction to ``c``
(``domain.reduction_domain``); where ``R`` is an output too (``keep``: a block's sum over its rows), it
stores both, over ``R``'s box.  The fused nest runs where ``C``'s would have."""

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
    keep: bool = False  # the reduction is an output too: its value is stored as well

    def apply(self, outer: tuple[Expr, ...], value: Expr) -> Expr:
        """The consumer's value at ``outer`` when the reduction's value there is ``value``."""
        body = substitute(self.body, dict(zip(self.consumer.axes, outer)))
        return replace_reads(body, lambda n: value if n.arg == self.reduction else None)
