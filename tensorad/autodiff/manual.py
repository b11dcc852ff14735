"""The seed's manual path: ``generalized_matmul`` with a head, then ``inline_non_reductions``::

    J = jacobian(Y, W)                       # [i..., j...]
    G = generalized_matmul(H, J, Y.ndim)     # sum over i of H[p, i] * J[i, j]
    G = inline_non_reductions(G, [J])        # put J's body into G's reduction
    G = optimize(G)"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import dtype as dt
from ..ir.expr import Expr, Op, cast
from ..ir.intrange import wraps_where_stored
from ..ir.reducer import sum as sum_reducer
from ..ir.rewrite import rewrite, walk
from ..ir.tensor import ComputeOp, Tensor
from .build import axis_vars, compute, copy_vars, rename


def generalized_matmul(a: Tensor, b: Tensor, ndims: int) -> Tensor:
    """Contract the last ``ndims`` axes of ``a`` with the first ``ndims`` axes of ``b``.

    ``C[p..., q...] = sum over k of a[p..., k...] * b[k..., q...]``: a matrix product of
    ``a`` and ``b`` reshaped to matrices, reshaped back (``ndims=0`` is the outer product)."""
    if not 0 <= ndims <= min(a.ndim, b.ndim):
        raise ValueError(f"generalized_matmul: cannot contract {ndims} axes of tensors with "
                         f"shapes {list(a.shape)} and {list(b.shape)}")
    inner_a, inner_b = tuple(a.shape[a.ndim - ndims:]), tuple(b.shape[:ndims])
    if inner_a != inner_b:
        raise ValueError(f"generalized_matmul: the last {ndims} axes of {a.name!r} "
                         f"{list(a.shape)} do not match the first {ndims} axes of {b.name!r} "
                         f"{list(b.shape)}")
    dtype = dt.promote(a.dtype, b.dtype)
    p = axis_vars(a.shape[:a.ndim - ndims])
    q = axis_vars(b.shape[ndims:], start=len(p))
    k = axis_vars(inner_a, prefix="k")  # reduce axes: variables over [0, extent)
    prod = cast(dtype, a[tuple(p + k)]) * cast(dtype, b[tuple(k + q)])
    body = sum_reducer(prod, k) if k else prod
    return compute(f"{a.name}.{b.name}.matmul", p + q, [body])[0]


def inline_non_reductions(tensor: Tensor, tensors: Sequence[Tensor]) -> Tensor:
    """``tensor`` with every read of a listed non-reduction tensor replaced by its body, transitively.
    Listed reductions and placeholders stay reads, and so does an ``int32`` tensor whose store may wrap a
    value its body computes exactly (:func:`tensorad.ir.intrange.wraps_where_stored`)."""
    if not isinstance(tensor.op, ComputeOp):
        return tensor
    inline = {t for t in tensors if isinstance(t.op, ComputeOp) and not t.op.is_reduction
              and not wraps_where_stored(t.op.body[t.value_index])}

    def rule(node: Expr) -> Expr | None:
        if node.op is not Op.READ or node.arg not in inline:
            return None
        op = node.arg.op
        return rename(op.body[node.arg.value_index], dict(zip(op.axes, node.src)))

    op = tensor.op
    if not any(r.op is Op.READ and r.arg in inline for b in op.body for r in walk(b)):
        return tensor
    m = copy_vars(op.axes + op.reduce_axes)
    bodies = [rename(rewrite(b, rule), m) for b in op.body]
    return compute(op.name, [m[a] for a in op.axes], bodies, op.provenance)[tensor.value_index]
