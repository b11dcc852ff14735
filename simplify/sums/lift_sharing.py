"""Guard lifting done once per body shape and renamed for the others (a long chain's optimizer).

The adjoints of a long elementwise chain have one body up to their tensors and fresh axes.
:class:`LiftMemo` (held by the call's :class:`.context.OptimizerContext`) keys a body with
:class:`tensorad.ir.spelling.Speller`'s numbering and renames the first result for every body with the same
key.  The key spells everything lifting reads, so it is exact: the axes and every node (variables with
names, dtypes and ranges; constants bit-exact); each tensor read's kind, shape, dtype, output index, tag,
attrs, role, axes and guard; the orders rules sort by (:func:`tensorad.poly.linear.atom_key`), as ranks.

A body with a node the renaming does not reach (a reduction, a gather index), a result with a variable or
tensor the key did not number, and every body of a call that traces its rules are lifted on their own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress

from tensorad.ir.expr import Expr, Op
from tensorad.ir.spelling import Speller, Unkeyable, hashable, renamed
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.poly.linear import tensor_id


def _ranks(keys: list) -> tuple[int, ...]:
    order = sorted(set(keys))
    where = {k: r for r, k in enumerate(order)}
    return tuple(where[k] for k in keys)


class _BodySpeller(Speller):
    """Numbers variables, nodes and tensors by first appearance (see the module docstring)."""

    def __init__(self, guard_of: Callable[[Tensor], Expr]) -> None:
        super().__init__(named=True)
        self.guard_of = guard_of
        self.tensors: dict[Tensor, int] = {}

    def read(self, e: Expr) -> object:
        return ("r", self.tensor(e.arg))

    def other(self, e: Expr) -> object:
        if e.op is Op.DATA_INDEX or e.op is Op.REDUCE:
            raise Unkeyable(e.op.name)
        return hashable(e.arg)

    def tensor(self, t: Tensor) -> int:
        n = self.tensors.get(t)
        if n is None:
            op = t.op
            if isinstance(op, ComputeOp):
                head = ("C", hashable(op.tag), hashable(op.attrs), op.provenance.role, op.num_outputs,
                        tuple(self.var(a) for a in op.axes), self.expr(self.guard_of(t)))
            elif hasattr(op, "uid"):
                head = ("P",)
            else:
                raise Unkeyable(type(op).__name__)
            n = self.tensors[t] = len(self.tensors)
            self.lines.append(("T", head, t.value_index, tuple(t.shape), t.dtype))
        return n


class LiftMemo:
    """One optimizer call's lifted bodies by name-free key; ``lifted``, ``renamed``: how many of each."""

    def __init__(self) -> None:
        self.table: dict[tuple, tuple[Expr, list[Expr], list[Tensor]]] = {}
        self.lifted = 0
        self.renamed = 0

    def lift(self, axes: Sequence[Expr], body: Expr, guard_of: Callable[[Tensor], Expr],
             compute: Callable[[], Expr]) -> Expr:
        """``compute()`` (the lifting of ``body`` over ``axes``), or that of a body of its key, renamed."""
        sp = _BodySpeller(guard_of)
        try:
            head = tuple(sp.var(a) for a in axes)
            root = sp.expr(body)
        except Unkeyable:
            self.lifted += 1
            return compute()
        variables, tensors = list(sp.vars), list(sp.tensors)
        key = (head, root, tuple(sp.lines), _ranks([(v.arg.name, v.arg.uid) for v in variables]),
               _ranks([tensor_id(t) for t in tensors]))
        found = self.table.get(key)
        if found is not None:
            out, old_vars, old_tensors = found
            with suppress(Unkeyable):  # (else the result holds what the key did not number)
                made = renamed(out, dict(zip(old_tensors, tensors)), {}, dict(zip(old_vars, variables)))
                self.renamed += 1
                return made
        self.lifted += 1
        out = compute()
        if found is None:
            self.table[key] = (out, variables, tensors)
        return out
