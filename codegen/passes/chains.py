"""Contraction order in the lowered program: a sum of one product over several variables as nested sums.

A forward program the optimizer never saw (``ta.lower([Y], [A, B, C])``, the forward of ``ta.function``)
may spell a chain of products as one sum::

    Y[i, l] = sum_{j, k} A[i, j] B[j, k] C[k, l]      (n^4 multiply-adds)

:func:`contract_sums` hands each materialized sum to the optimizer's
:func:`~tensorad.simplify.sums.chains.contract_chain`, which chooses the cheapest nesting
(``T[i, k] = sum_j A[i, j] B[j, k]``, ``Y[i, l] = sum_k T[i, k] C[k, l]``: 2 n^3) and rewrites the sum only
where that costs fewer multiply-adds.  Each intermediate is a new op (``Role.SPLIT``) in its canonical
spelling, computed once for every sum that reads an equal one (:class:`~tensorad.simplify.cse.OpTable`),
before its first reader.  A sum that would become elementwise is left as written (its op stays a
reduction)."""

from __future__ import annotations

from collections.abc import Sequence

from tensorad.simplify.algebra.bracket import canonical
from tensorad.simplify.cse import OpTable
from tensorad.simplify.sums.chains import contract_chain

from tensorad.ir.expr import Expr, Op
from tensorad.ir.tensor import ComputeOp, Provenance, Role, Tensor


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


def contract_sums(ops: list[ComputeOp], bodies: dict) -> list[ComputeOp]:
    """``ops`` with the intermediates of every sum :func:`contract_chain` rewrites, each before its first
    reader; ``bodies`` (op -> inlined bodies) is rewritten in place."""
    made = _Intermediates()
    out: list[ComputeOp] = []
    for op in ops:
        (body, *more) = bodies[op]
        if not more and body.op is Op.REDUCE:
            made.reader = op
            new = contract_chain(op.axes, body, made.lookup, made.make)
            if new is None or new.op is not Op.REDUCE:  # (an elementwise result: the op stays a sum)
                made.pending = []
            else:
                bodies[op] = (new,)
                kept = made.keep()
                bodies.update((t, t.body) for t in kept)
                out.extend(kept)
        out.append(op)
    return out


__all__ = ["contract_sums"]
