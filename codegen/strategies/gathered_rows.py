"""Gathered rows copied once, so that a product reading them is a matrix product.

``C[i, j] = sum_k E[I[i], k] * W[k, j]`` reads ``E`` through a checked gather index, which the
micro-kernel's packers cannot check.  :func:`gather_rows` splits it in two:

    G[i, k] = E[I[i], k]                 a copy: one checked index per point, a row at a time
    C[i, j] = sum_k G[i, k] * W[k, j]    a plain product, packed like any other

Only a read that every point of the sum evaluates is copied: one under a lazy guard or a ``where`` may
hold an index the program never reads."""

from __future__ import annotations

from tensorad.ir.expr import TRUE, Expr, Op, var
from tensorad.ir.rewrite import free_vars, replace_reads, substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor


def _checked(e: Expr) -> bool:
    return any(n.op is Op.DATA_INDEX and n.arg.mode == "raise" for n in walk(e))


def gather_rows(op: ComputeOp, body: Expr) -> tuple[list[ComputeOp], ComputeOp] | None:
    """``(copies, product)``: a copy op per read of ``body`` (a sum) through a checked gather index, and
    ``op`` reading the copies; ``None`` when there is none or one may not run everywhere."""
    if body.op is not Op.REDUCE or body.src[0] is not TRUE:
        return None
    gathered = [n for n in walk(body) if n.op is Op.READ and any(_checked(i) for i in n.src)]
    if not gathered or {m for n in walk(body) if n.op in (Op.SELECT, Op.IF_THEN_ELSE)  # (read under a choice)
                        for m in walk(n) if m.op is Op.READ} & set(gathered):
        return None
    mapping: dict[Expr, Expr] = {}
    copies: list[ComputeOp] = []
    for read in dict.fromkeys(gathered):
        used = free_vars(read) + [a for a in body.arg.axes if any(a is n for n in walk(read))]
        used = list(dict.fromkeys(used))
        if any(v.lo != 0 for v in used):
            return None
        axes = tuple(var(v.name, 0, v.hi) for v in used)
        copy = ComputeOp(f"{read.arg.name}.rows", "", axes, (substitute(read, dict(zip(used, axes))),))
        copies.append(copy)
        mapping[read] = Expr(Op.READ, read.dtype, tuple(used), Tensor(copy, 0))
    product = replace_reads(body, lambda n: mapping.get(n))
    if _checked(product):
        return None
    return copies, ComputeOp(op.name, op.tag, op.axes, (product,), op.attrs, op.provenance)
