"""Contraction order in the lowered program: a sum of one product over several variables as nested sums.

A forward program the optimizer never saw (``ta.lower([Y], [A, B, C])``, the forward of ``ta.function``)
may spell a chain as one sum, ``Y[i, l] = sum_{j, k} A[i, j] B[j, k] C[k, l]`` (n^4 multiply-adds).
:func:`contract_sums` hands each materialized sum to :func:`~tensorad.simplify.sums.chains.contract_chain`,
which nests it where that costs fewer multiply-adds (``T = A B``, ``Y = T C``: 2 n^3).  Each intermediate
is a new op (``Role.SPLIT``) in its canonical spelling, computed once for every sum that reads an equal one
(:class:`~tensorad.simplify.cse.OpTable`), before its first reader; a sum that would become elementwise is
left as written.

:func:`split_scans` nests a running reduction over several ranges that its ``where`` bounds apart, each
along an output axis of its own, the same way: a summed-area table ``Y[i, j] = sum_{a <= i, b <= j} X[a,
b]`` is two scans of ``n^2`` updates (``T[a, j] = sum_{b <= j} X[a, b]``, ``Y[i, j] = sum_{a <= i} T[a,
j]``) instead of ``n^3 / 2``; its adjoint is two suffix scans alike.  Sums, products, max and min nest so;
a float sum or product only under fast math (the nesting reorders it)."""

from __future__ import annotations

from collections.abc import Sequence

from tensorad.simplify.algebra.bracket import canonical
from tensorad.simplify.algebra.logic import all_of
from tensorad.simplify.cse import OpTable
from tensorad.simplify.sums.chains import contract_chain

from tensorad.ir import dtype as dt
from tensorad.ir.expr import TRUE, Expr, Op, ReduceArg, conjuncts
from tensorad.ir.rewrite import free_vars
from tensorad.ir.tensor import ComputeOp, Provenance, Role, Tensor
from tensorad.poly.nesting import classes_apart, scan_axes

from ..strategies.scan import any_order


class _Intermediates:
    """The intermediates of one program: equal ones are one op.  Those of the sum being rewritten are
    ``pending`` until :meth:`keep` adds them to the program (or they are dropped)."""

    def __init__(self) -> None:
        self.table = OpTable()
        self.pending: list[ComputeOp] = []
        self.reader: ComputeOp | None = None

    def make(self, free: Sequence[Expr], body: Expr, alone: bool, nested: bool) -> Expr:
        """A read at ``free`` of a new op computing ``body`` (``contract_chain``'s ``make``)."""
        assert self.reader is not None
        axes, spelled, index, _ = canonical(free, body)
        name = f"{self.reader.name}.c{len(self.pending)}"
        role = Provenance(Role.SPLIT, self.reader.provenance.group, Tensor(self.reader, 0))
        op = ComputeOp(name, self.reader.tag, axes, (spelled,), (), role)
        self.pending.append(op)
        return Tensor(op, 0)[index]

    def lookup(self, free: Sequence[Expr], body: Expr) -> Expr | None:
        """A read of a kept intermediate equal to ``body`` over ``free``, if there is one."""
        axes, spelled, index, _ = canonical(free, body)
        return self.table.read(ComputeOp("", "", axes, (spelled,)), index)

    def keep(self) -> list[ComputeOp]:
        kept, self.pending = self.pending, []
        for op in kept:
            self.table.intern(op)
        return kept


def _rewrite_each(ops: list[ComputeOp], bodies: dict, rewrite) -> list[ComputeOp]:
    """``ops`` with each one-body op's body replaced by ``rewrite(op, body, made)`` (``None``: kept, and
    what it made dropped), the intermediates it made in ``made`` placed before it; ``bodies`` is
    rewritten in place."""
    made = _Intermediates()
    out: list[ComputeOp] = []
    for op in ops:
        (body, *more) = bodies[op]
        if not more:
            made.reader = op
            new = rewrite(op, body, made)
            if new is None:
                made.pending = []
            else:
                bodies[op] = (new,)
                kept = made.keep()
                bodies.update((t, t.body) for t in kept)
                out.extend(kept)
        out.append(op)
    return out


def contract_sums(ops: list[ComputeOp], bodies: dict) -> list[ComputeOp]:
    """``ops`` with the intermediates of every sum :func:`contract_chain` rewrites, each before its first
    reader; ``bodies`` (op -> inlined bodies) is rewritten in place."""
    def contract(op, body, made):
        if body.op is not Op.REDUCE:
            return None
        new = contract_chain(op.axes, body, made.lookup, made.make)
        return new if new is not None and new.op is Op.REDUCE else None  # (elementwise: stays a sum)
    return _rewrite_each(ops, bodies, contract)


def split_scans(ops: list[ComputeOp], bodies: dict, reassociate: bool) -> list[ComputeOp]:
    """``ops`` with every running reduction over independent ranges nested into one-axis scans (the
    module docstring), each intermediate before its reader; ``bodies`` is rewritten in place.
    ``reassociate``: float sums and products may nest (fast math)."""
    def nest(op, body, made):
        new = _nested_scans(op.axes, body, made, reassociate)
        return None if new is body else new
    return _rewrite_each(ops, bodies, nest)


def _nested_scans(axes: Sequence[Expr], red: Expr, made: _Intermediates, reassociate: bool) -> Expr:
    """``red`` over ``axes`` as ``reduce_{R1 where C1} T[..]``, ``T = reduce_{R2 where C2} src`` when the
    conjuncts of its ``where`` split its axes into ``R1`` and ``R2`` (none reads both) and both reductions
    run along an output axis (:func:`~tensorad.poly.nesting.scan_axes`); the outer one nested again."""
    if red.op is not Op.REDUCE or len(red.src) != 2 or len(red.arg.axes) < 2 \
            or not any_order(red.arg.combiner) \
            or not reassociate and red.arg.combiner.kind in ("sum", "prod") and dt.is_float(red.dtype):
        return red
    (cond, src), raxes = red.src, red.arg.axes
    terms = [t for t in conjuncts(cond) if t is not TRUE]
    for inner in classes_apart(raxes, terms):
        rest = tuple(r for r in raxes if r not in inner)
        if not rest:
            continue
        c_in = [t for t in terms if set(free_vars(t)) & inner]
        used = {v for e in (src, *c_in) for v in free_vars(e)}
        free = [v for v in (*axes, *rest) if v in used]
        body = Expr(Op.REDUCE, red.dtype, (all_of(c_in), src),
                    ReduceArg(red.arg.combiner, tuple(r for r in raxes if r in inner), 0))
        c_out = all_of([t for t in terms if not set(free_vars(t)) & inner])
        if not scan_axes(free, body.arg.axes, body.src[0], [src]) or not scan_axes(axes, rest, c_out, free):
            continue
        read = made.lookup(free, body) or made.make(free, body, True, True)
        outer = Expr(Op.REDUCE, red.dtype, (c_out, read), ReduceArg(red.arg.combiner, rest, 0))
        return _nested_scans(axes, outer, made, reassociate)
    return red


__all__ = ["contract_sums", "split_scans"]
