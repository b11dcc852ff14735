"""Split-K: a contraction with few, unevenly shared column blocks is summed in two halves.

A convolution's weight gradient may have few column blocks (three, shared 2 : 1 by two threads) but a long
sum.  Splitting the sum's outermost axis in two makes the halves a batch axis (``P[s, f, c, ry, rx] = sum_{n'
< 16, y, x} H[16 s + n', ...] * X[16 s + n', ...]``, ``dW = P[0] + P[1]``): twice the blocks and a combining
pass the size of the output.  Only under fast math, for long sums whose outermost axis has an even extent."""

from __future__ import annotations

from tensorad.ir.expr import Expr, Op, ReduceArg, const, var
from tensorad.ir.rewrite import substitute
from tensorad.ir.tensor import ComputeOp, Tensor

from .contraction import Contraction

MIN_K = 4096  # each half must still be a long sum
MAX_BLOCKS = 7  # more blocks share well enough already


def wants_split(spec: Contraction) -> bool:
    """Whether ``spec``'s parallel blocks are few and odd, and its sum long enough to halve (in a product of
    at least a vector of columns: a narrower one keeps the loops' count of work, with no adding pass)."""
    first = spec.k[0] if spec.k else None
    return (spec.blocks % 2 == 1 and spec.blocks <= MAX_BLOCKS and spec.K >= MIN_K
            and spec.N >= spec.target.lanes(spec.dtype)
            and first is not None and first.extent % 2 == 0 and first.extent >= 2)


def split_k(op: ComputeOp, body: Expr) -> tuple[ComputeOp, ComputeOp]:
    """``(P, R)``: the halves (batch axis first) and the op adding them, on fresh axes, in ``op``'s buffer."""
    ra: ReduceArg = body.arg
    k0 = ra.axes[0]
    half = k0.extent // 2
    s = var(f"{k0.name}.half", 0, 2)
    k0h = var(k0.name, 0, half)
    axes = tuple(var(a.name, 0, a.hi) for a in op.axes)
    k0_value = s * const(half, k0.dtype) + k0h
    mapping = {**dict(zip(op.axes, axes)), k0: k0_value + const(k0.lo, k0.dtype) if k0.lo else k0_value}
    src = tuple(substitute(e, mapping) for e in body.src)
    red = Expr(Op.REDUCE, body.dtype, src, ReduceArg(ra.combiner, (k0h,) + tuple(ra.axes[1:]), 0))
    part = ComputeOp(f"{op.name}.part", "", (s,) + axes, (red,))
    t = Tensor(part, 0)
    out_axes = tuple(var(a.name, 0, a.hi) for a in op.axes)
    total = Expr(Op.ADD, body.dtype, (Expr(Op.READ, body.dtype, (const(0),) + out_axes, t),
                                      Expr(Op.READ, body.dtype, (const(1),) + out_axes, t)))
    return part, ComputeOp(op.name, op.tag, out_axes, (total,))


__all__ = ["wants_split", "split_k"]
