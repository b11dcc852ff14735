"""The nonzeroness optimizer on a tensor and the tensors it owns.

``optimize_and_lift_nonzeroness(T)`` rewrites ``T``'s op and the ops ``T`` *owns*: the
reductions the language lifted out of ``T``'s body (``T.red``, ``T.red2``, ...: autodiff's
adjoint ``X.grad = term1 + term2 + ...`` lifts every reduction term this way) and the tensors
this pass creates itself (split terms ``T.t0``, ``T.t1``...).  Other tensors -- the user's
forward computation, adjoints optimized before -- are only *read*: a cheap non-reduction is
inlined into ``T`` (its guards then count for ``T``'s nonzeroness), and a gather of an
adjoint sum may be fused into ``T`` (:func:`.inline.fuse_gather`); neither changes them, so
nothing the user computes is duplicated behind their back.

Per op: inline cheap producers, optimize the body (:mod:`.lift`), merge sums over the same
domain (:mod:`.merge`), fuse a gathered adjoint sum and optimize again, replace a sum that is
provably zero by 0 (:mod:`.polynomial`), and merge structurally equal helper ops
(:mod:`.cse`).  An op whose body does not change is returned as is.  Dead code needs no pass
of its own: a tensor no longer read (inlined, fused, proved zero) is simply not reachable
from the result.  Results are memoized per op, so optimizing a tensor twice
(or a tensor that reads one optimized before) costs a dictionary lookup.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from tensorad.ir.expr import Expr, Op, const
from tensorad.ir.rewrite import reads, replace_reads, walk
from tensorad.ir.tensor import ComputeOp, Tensor

from .cse import OpTable
from .inline import fuse_gather, inline_read, is_cheap
from .lift import lift_body, optimize_sum, simplify_reduction
from .merge import merge_sums
from .polynomial import provably_zero
from .rules import simplify_expr

MAX_FUSE_ROUNDS = 4
MAX_INLINED_NODES = 160  # a cheap producer chain inlined into one read: at most this many nodes

_MEMO: dict[ComputeOp, ComputeOp] = {}
_CREATED: weakref.WeakSet = weakref.WeakSet()  # ops this pass made (it owns them)
_NO_SPLIT: weakref.WeakSet = weakref.WeakSet()  # merged sums: splitting them would undo the merge
_TABLE = OpTable()


def _remember(old: ComputeOp, new: ComputeOp) -> ComputeOp:
    if len(_MEMO) > 50_000:
        _MEMO.clear()
    _MEMO[old] = new
    _MEMO[new] = new
    return new


def is_adjoint(op: ComputeOp) -> bool:
    """An adjoint built by autodiff (``X.grad``) or a tensor this pass created."""
    return op.name.endswith(".grad") or op in _CREATED


def _inlinable(t: Tensor) -> bool:
    op = t.op
    return isinstance(op, ComputeOp) and not op.is_reduction and op.num_outputs == 1 \
        and is_cheap(op.body[0])


def _inlined_size_within(t: Tensor, budget: int) -> bool:
    """Whether ``t``'s body, with the cheap producers it reads inlined in turn (as the rewriter
    will), stays within ``budget`` nodes counted as a tree.

    Each producer is cheap on its own, but a chain of them is not: ``Y_k = 0.5 Y_{k-1}^2 + 0.1``
    inlined transitively puts the whole forward chain into every adjoint -- quadratic size over
    a chain's gradient (issue 8, D9), and a rewriter nesting as deep as the chain.  The search
    stops as soon as the budget is spent, so it costs O(budget) per read.
    """
    stack = [t]
    while stack:
        u = stack.pop()
        body = u.op.body[u.value_index]
        budget -= sum(1 for _ in walk(body))
        if budget < 0:
            return False
        stack.extend(r for r in reads(body) if _inlinable(r))
    return True


class _Pass:
    """Optimization of one top-level op and the ops it owns."""

    def __init__(self, top: ComputeOp) -> None:
        self.prefix = top.name + ".red"

    def owns(self, op: ComputeOp) -> bool:
        return op in _CREATED or op.name.startswith(self.prefix)

    # ---- reads ---------------------------------------------------------------------------
    def _read(self, node: Expr) -> Expr | None:
        t: Tensor = node.arg
        op = t.op
        if not isinstance(op, ComputeOp):
            return None
        if self.owns(op):
            new = self.op(op)
            if not new.is_reduction and new.num_outputs == 1:
                return inline_read(Expr(Op.READ, node.dtype, node.src, Tensor(new, t.value_index)))
            return None if new is op else Expr(Op.READ, node.dtype, node.src, Tensor(new, t.value_index))
        if _inlinable(t) and _inlined_size_within(t, MAX_INLINED_NODES):
            return inline_read(node)
        return None

    def inline(self, body: Expr) -> Expr:
        return replace_reads(body, self._read)

    # ---- ops -----------------------------------------------------------------------------
    def make(self, name: str, axes: Sequence[Expr], body: Expr, split: bool = True) -> Tensor:
        op = ComputeOp(name, "", tuple(axes), (body,))
        _CREATED.add(op)
        if not split:
            _NO_SPLIT.add(op)
        new = self.op(op)
        new = _TABLE.intern(new)
        _CREATED.add(new)
        return Tensor(new, 0)

    def make_merged(self, name: str, axes: Sequence[Expr], body: Expr) -> Tensor:
        return self.make(name, axes, body, split=False)

    def body(self, axes: Sequence[Expr], body: Expr, name: str, split: bool = True) -> Expr:
        body = self.inline(body)
        if body.op is Op.REDUCE:
            if body.arg.combiner.kind == "sum":
                body = optimize_sum(axes, body, name, self.make, split)
                if body.op is not Op.REDUCE:
                    body = lift_body(axes, self.inline(body))
            else:
                body = simplify_reduction(axes, body)
        else:
            body = lift_body(axes, body)
        if body.op is not Op.REDUCE:
            merged = merge_sums(axes, body, self.owns, self.make_merged, name)
            if merged is not None:
                body = lift_body(axes, self.inline(merged))
        return body

    def op(self, op: ComputeOp) -> ComputeOp:
        found = _MEMO.get(op)
        if found is not None:
            return found
        if op.num_outputs > 1:
            bodies = tuple(simplify_expr(self.inline(b)) for b in op.body)
        else:
            split = op not in _NO_SPLIT
            body = self.body(op.axes, op.body[0], op.name, split)
            for _ in range(MAX_FUSE_ROUNDS):
                fused = fuse_gather(op.axes, body, is_adjoint)
                if fused is None:
                    break
                body = self.body(op.axes, fused, op.name, split=False)
            if body.op is Op.REDUCE and provably_zero(body):
                body = const(0, body.dtype)
            bodies = (body,)
        if bodies == op.body:
            return _remember(op, op)
        new = ComputeOp(op.name, op.tag, op.axes, bodies, op.attrs)
        if op in _CREATED:
            _CREATED.add(new)
        return _remember(op, new)


def optimize_and_lift_nonzeroness(tensor: Tensor) -> Tensor:
    """An equivalent tensor with reductions over zeros eliminated (see the module docstring)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"OptimizeAndLiftNonzeronessConditions: expected a Tensor, got "
                        f"{type(tensor).__name__}")
    op = tensor.op
    if not isinstance(op, ComputeOp):
        return tensor
    return Tensor(_Pass(op).op(op), tensor.value_index)
