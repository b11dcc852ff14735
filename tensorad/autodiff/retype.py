"""Promote a program to float64: the same tensor DAG with every float32 (or half) value made float64, so
that ``gradcheck``'s comparisons are not limited by rounding.  Placeholders become new float64
placeholders (same names and shapes); integer tensors are kept."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir.expr import Expr, Op, ReduceArg, const, var
from ..ir.reducer import CommReducer
from ..ir.rewrite import rewrite, substitute, tensor_graph, walk
from ..ir.tensor import ComputeOp, Tensor
from ..lang import make_compute, placeholder

WIDE = "float64"
NARROW = ("float32", "float16", "bfloat16")  # the float types the copy widens


class _Promoter:
    def __init__(self) -> None:
        self.tensors: dict[Tensor, Tensor] = {}
        self.combiners: dict[CommReducer, CommReducer] = {}

    def combiner(self, comb: CommReducer) -> CommReducer:
        if comb not in self.combiners:
            new = {v: var(v.name, dtype=WIDE) if v.dtype == "float32" else v for v in comb.lhs + comb.rhs}
            res = tuple(self.expr(substitute(r, new)) for r in comb.result)
            self.combiners[comb] = CommReducer(comb.name, comb.kind, tuple(new[v] for v in comb.lhs),
                                               tuple(new[v] for v in comb.rhs), res,
                                               tuple(self.expr(e) for e in comb.identity))
        return self.combiners[comb]

    def rule(self, node: Expr) -> Expr | None:
        if node.op is Op.READ and node.arg in self.tensors:
            t = self.tensors[node.arg]
            return node.replace(arg=t, dtype=t.dtype) if t is not node.arg else None
        if node.op is Op.REDUCE and node.arg.combiner in self.combiners:
            ra = node.arg
            comb = self.combiners[ra.combiner]
            if comb is not ra.combiner:
                return node.replace(arg=ReduceArg(comb, ra.axes, ra.value_index),
                                    dtype=comb.lhs[ra.value_index].dtype)
        if node.dtype not in NARROW:
            return None
        if node.op is Op.CONST:
            return const(node.arg, WIDE)
        if node.op is Op.CAST and node.src[0].dtype == WIDE:
            return node.src[0]
        return node.replace(dtype=WIDE)

    def expr(self, e: Expr) -> Expr:
        for n in walk(e):
            if n.op is Op.REDUCE:
                self.combiner(n.arg.combiner)
        return rewrite(e, self.rule)

    def tensor(self, t: Tensor) -> Tensor:
        op = t.op
        if not isinstance(op, ComputeOp):
            return placeholder(op.shape, WIDE, op.name) if op.dtype in NARROW else t
        made = make_compute(op.name, op.axes, [self.expr(b) for b in op.body], op.tag,
                            dict(op.attrs), check_bounds=False, provenance=op.provenance)
        return made[t.value_index]


def promote_to_float64(outputs: Sequence[Tensor]) -> dict[Tensor, Tensor]:
    """``{tensor: float64 copy}`` for every tensor the outputs depend on."""
    pro = _Promoter()
    done_ops: dict = {}
    for t in tensor_graph(outputs):  # producers first
        if t.op not in done_ops:
            done_ops[t.op] = pro.tensor(t).op
        pro.tensors[t] = Tensor(done_ops[t.op], t.value_index)
    return pro.tensors
