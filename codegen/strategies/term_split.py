"""A sum of several products: one product per term, then added, or one product of a factor all
the terms share.

The gradient of a Gram matrix ``G[b, i, j] = sum_k F[b, i, k] F[b, j, k]`` is no product, but each of its
terms is one: ``dF[b, i, k] = sum_j H[b, i, j] F[b, j, k] + sum_j H[b, j, i] F[b, j, k]``.  Summing the
terms apart reassociates the sum; adding the cofactors of the shared ``F[b, j, k]`` first,
``sum_j (H[b, i, j] + H[b, j, i]) F[b, j, k]``, is one product for two, and changes the value where ``F``
is infinite and the cofactors have opposite signs (inf instead of NaN) or their sum overflows.  Both
are offered under fast math only."""

from __future__ import annotations

from tensorad.ir.expr import Expr, Op, ReduceArg, const, signed_sum, var
from tensorad.ir.rewrite import chain, substitute
from tensorad.ir.tensor import ComputeOp, Tensor

MAX_TERMS = 4  # more terms: more passes over the output than one loop nest saves


def terms(e: Expr, limit: int = MAX_TERMS) -> list[tuple[int, Expr]]:
    """``e`` as ``sum sign * term`` over its additions and subtractions, left to right; past ``limit``
    terms, the first ``limit + 1``."""
    out: list[tuple[int, Expr]] = []
    stack = [(1, e)]
    while stack and len(out) <= limit:
        sign, x = stack.pop()
        if x.op in (Op.ADD, Op.SUB):
            stack.append((sign if x.op is Op.ADD else -sign, x.src[1]))
            stack.append((sign, x.src[0]))
        else:
            out.append((sign, x))
    return out


def shared_factor(body: Expr) -> Expr | None:
    """A sum ``sum (s1 a1 x + s2 a2 x + ...)`` as ``sum (s1 a1 + s2 a2 + ...) x`` for a read ``x``
    that is a factor of every term (``None`` if there is none, or fewer than 2 terms)."""
    if body.op is not Op.REDUCE or body.arg.combiner.kind != "sum" or len(body.src) != 2:
        return None
    cond, src = body.src
    found = terms(src)
    if not 2 <= len(found) <= MAX_TERMS:
        return None
    split = [(sign, chain(t, Op.MUL)) for sign, t in found]
    common = [f for f in split[0][1] if f.op is Op.READ and all(f in fs for _, fs in split[1:])]
    if not common:
        return None
    x = common[0]
    cofactors = []
    for sign, fs in split:
        rest = list(fs)
        rest.remove(x)
        co = rest[0] if rest else const(1.0, x.dtype)
        for f in rest[1:]:
            co = Expr(Op.MUL, co.dtype, (co, f))
        cofactors.append((sign, co))
    return Expr(Op.REDUCE, body.dtype, (cond, Expr(Op.MUL, src.dtype, (signed_sum(cofactors), x))), body.arg)


def split_terms(op: ComputeOp, body: Expr) -> tuple[list[ComputeOp], ComputeOp] | None:
    """``(parts, total)``: one reduction per term of ``op``'s summand over fresh axes, and the op adding
    them (``op``'s buffer); ``None`` unless 2 to ``MAX_TERMS`` terms."""
    if body.op is not Op.REDUCE or body.arg.combiner.kind != "sum" or len(body.src) != 2 \
            or any(a.lo != 0 for a in op.axes):
        return None
    cond, src = body.src
    found = terms(src)
    if not 2 <= len(found) <= MAX_TERMS:
        return None
    ra: ReduceArg = body.arg
    parts = []
    for n, (_, term) in enumerate(found):
        axes = tuple(var(a.name, 0, a.hi) for a in op.axes)
        mapping = dict(zip(op.axes, axes))
        red = Expr(Op.REDUCE, body.dtype, (substitute(cond, mapping), substitute(term, mapping)),
                   ReduceArg(ra.combiner, ra.axes, 0))
        parts.append(ComputeOp(f"{op.name}.term{n}", "", axes, (red,)))
    out_axes = tuple(var(a.name, 0, a.hi) for a in op.axes)
    total = signed_sum([(sign, Expr(Op.READ, body.dtype, out_axes, Tensor(part, 0)))
                        for (sign, _), part in zip(found, parts)])
    return parts, ComputeOp(op.name, op.tag, out_axes, (total,))
