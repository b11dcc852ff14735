"""One buffer for a masked sum of scatter-adds that several consumers read.

A max pool's gradient is two scatter-adds, the winners ``R1`` and the tied points ``R2``, and behind a
ReLU every consumer reads ``select(conv[j] + b <= 0, 0, R1[j] + R2[j])``.  Materialized once as ``S[j]``,
the ``scatter-sum`` strategy adds both scatters straight into ``S``'s buffer, each add under the mask.

:func:`share_scatter_sums` finds such expressions in the inlined bodies: an ``ADD`` tree of reads of at
least two scatter reductions, optionally under zero-branch masks, all at one index of distinct loop
variables; equal expressions share one tensor.  A scatter is taken only when every read of it is inside
such an expression and it is not an output."""

from __future__ import annotations

from collections.abc import Callable

from tensorad.simplify.algebra.rules import is_zero

from tensorad.ir.expr import Expr, Op, var
from tensorad.ir.rewrite import chain, free_vars, substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.poly.linear import to_linear

from ..strategies.scatter import match_scatter


def _unmask(e: Expr) -> Expr:
    """The value under ``select``/``if_then_else`` masks whose other branch is zero."""
    while e.op in (Op.SELECT, Op.IF_THEN_ELSE):
        if is_zero(e.src[2]):
            e = e.src[1]
        elif is_zero(e.src[1]):
            e = e.src[2]
        else:
            break
    return e


def _scatter_sum(node: Expr, scatters: set[ComputeOp]) -> tuple[tuple[Expr, ...], list[ComputeOp]] | None:
    """``(variables, scatter ops)`` when ``node`` is a (masked) sum of >= 2 reads of distinct scatter ops at
    one index, each entry a distinct variable plus a constant, every variable of ``node`` among them."""
    terms = chain(_unmask(node), Op.ADD)
    if len(terms) < 2:
        return None
    index, ops = None, []
    for t in terms:
        if t.op is not Op.READ or t.arg.op not in scatters or t.arg.op in ops or t.dtype != node.dtype:
            return None
        if index is None:
            index = t.src
        elif t.src != index:
            return None
        ops.append(t.arg.op)
    variables = []
    for i in index:  # ``v`` or ``v + c``: a loop variable from 0, maybe shifted (padding)
        f = to_linear(i)
        if len(f.terms) != 1 or f.terms[0][1] != 1 or f.terms[0][0].op is not Op.VAR:
            return None
        v = f.terms[0][0]
        if v.arg.lo != 0 or v.arg.hi is None:
            return None
        variables.append(v)
    if len(set(variables)) != len(variables) or not set(free_vars(node)) <= set(variables):
        return None
    return tuple(variables), ops


def _outermost(root: Expr, scatters: set[ComputeOp], skip: set[Expr]) -> list[tuple[Expr, tuple]]:
    """The matches of :func:`_scatter_sum` under ``root`` that no other match contains."""
    found, seen, stack = [], set(), [root]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        hit = _scatter_sum(n, scatters) if n not in skip else None
        if hit is not None:
            found.append((n, hit))
        else:
            stack.extend(n.src)
    return found


def share_scatter_sums(ops: list[ComputeOp], bodies: dict, outputs: frozenset,
                       check: Callable[[ComputeOp, tuple], bool]) -> list[ComputeOp]:
    """``ops`` with a new elementwise op for each shared (masked) sum of scatter-adds, after the scatters
    it reads; its readers' ``bodies`` read it (updated in place).  ``check(op, bodies)`` proves its reads
    in bounds, else the expression stays."""
    scatters = {op for op in ops if op.is_reduction and op.num_outputs == 1
                and Tensor(op, 0) not in outputs and match_scatter(op, bodies[op]) is not None}
    if len(scatters) < 2:
        return ops
    whole = {bodies[op][0] for op in ops if len(bodies[op]) == 1}  # (an op that is the sum already)
    # canonical body -> (its new op, the sites reading it, the scatters it reads)
    groups: dict[Expr, tuple[ComputeOp, list, list[ComputeOp]]] = {}
    axes_of: dict[tuple, tuple[Expr, ...]] = {}
    for op in ops:
        for b in bodies[op]:
            for n, (index, reads) in _outermost(b, scatters, whole):
                shape = tuple(v.arg.hi for v in index)
                key = (shape, tuple(r.name for r in reads))
                axes = axes_of.get(key)
                if axes is None:
                    axes = axes_of[key] = tuple(var(f"s{k}", 0, n_) for k, n_ in enumerate(shape))
                body = substitute(n, dict(zip(index, axes)))
                if body not in groups:
                    first = reads[0]
                    new = ComputeOp(f"{first.name}.sum", first.tag, axes, (body,), (), first.provenance)
                    groups[body] = (new, [], reads)
                groups[body][1].append((op, n, index))
    if not groups:
        return ops
    new_ops = list(ops)
    for body, (new, sites, reads) in groups.items():
        if sum(1 for g in groups.values() if set(g[2]) & set(reads)) > 1:
            continue  # (a scatter read in two different sums: its buffer stays)
        if not check(new, (body,)):
            continue
        tensor = Tensor(new, 0)
        changed = {}
        for op, n, index in sites:
            old = changed.get(op, bodies[op])
            changed[op] = tuple(substitute(b, {n: Expr(Op.READ, n.dtype, index, tensor)}) for b in old)
        taken = {Tensor(r, 0) for r in reads}
        rest = [op for op in new_ops if op not in reads and op is not new]
        if any(n.op is Op.READ and n.arg in taken for op in rest
               for b in changed.get(op, bodies[op]) for n in walk(b)):
            continue  # a read of a scatter outside the sum: no gain
        # after every op its body reads (the scatters, what the mask reads), before its first reader
        read = {n.arg.op for n in walk(body) if n.op is Op.READ}
        at = max(k for k, op in enumerate(new_ops) if op in read) + 1
        if at > min(new_ops.index(op) for op in changed):
            continue  # (cannot happen: its readers read all of it)
        bodies.update(changed)
        bodies[new] = (body,)
        new_ops.insert(at, new)
    return new_ops
