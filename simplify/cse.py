"""Common-subexpression elimination for tensors.

Equal expressions are one node already, but two ops that compute the same thing differ in their axis
variables.  An op's canonical key replaces its axes and reduction variables by positional variables
``(position, lo, hi)``; ops with equal keys are the same tensor, and :class:`OpTable` hands back the first
one created.  Producers are canonicalised first, so the key is structural all the way down.  A tensor may
also be held as a *view*: the read of another tensor, over other axes, that equals it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tensorad.ir.expr import Expr, Op, var
from tensorad.ir.rewrite import reads, substitute
from tensorad.ir.tensor import ComputeOp, Tensor

from .inlining import rename_reduce


def _canon_var(canon: dict, kind: str, k: int, v: Expr) -> Expr:
    key = (kind, k, v.lo, v.hi, v.dtype)
    found = canon.get(key)
    if found is None:
        found = canon[key] = var(f"_{kind}{k}", v.lo, v.hi, v.dtype)
    return found


def canonical_key(op: ComputeOp, canon: dict) -> tuple:
    """Bodies with positional variables (``canon``, shared by the keys compared): equal keys, equal ops."""
    mapping = {a: _canon_var(canon, "a", k, a) for k, a in enumerate(op.axes)}
    for k, r in enumerate(op.reduce_axes):
        mapping[r] = _canon_var(canon, "r", k, r)
    return (op.shape, tuple(rename_reduce(b, mapping) for b in op.body))


def signature(bodies: tuple[Expr, ...]) -> tuple:
    """What every spelling of one tensor shares, cheap to compute: the dtypes, the tensors read
    and the reduction ranges, as a multiset (no variable names, no index expressions)."""
    ranges = frozenset(Counter((r.lo, r.hi) for b in bodies if b.op is Op.REDUCE for r in b.arg.axes).items())
    return (tuple(b.dtype for b in bodies), frozenset(t for b in bodies for t in reads(b)), ranges)


class OpTable:
    """Structurally equal ops merged: ``intern(op)`` returns the first op with its key.  :meth:`may_hold`
    answers "certainly not held" without a key; :meth:`read` reads the op or view held with an op's key."""

    def __init__(self) -> None:
        self._ops: dict[tuple, ComputeOp] = {}
        self._canon: dict[tuple, Expr] = {}
        self._sigs: set[tuple] = set()
        self._keys: dict[ComputeOp, tuple] = {}  # op -> canonical_key(op)
        self._signatures: dict[tuple, tuple] = {}  # bodies -> signature(bodies): asked again
        #   for one op (``may_hold``, then ``read`` and ``register``), each a walk of its bodies
        self._views: dict[tuple, tuple[ComputeOp, tuple[Expr, ...], tuple[Expr, ...]]] = {}
        #   key -> (op held, the axes of the spelling, op's index over them)

    def key(self, op: ComputeOp) -> tuple:
        """:func:`canonical_key` of ``op``, kept per op (looked up, then interned or registered)."""
        found = self._keys.get(op)
        if found is None:
            found = self._keys[op] = canonical_key(op, self._canon)
        return found

    def signature(self, bodies: tuple[Expr, ...]) -> tuple:
        """:func:`signature`, kept per bodies (nodes are immutable: a pure function)."""
        found = self._signatures.get(bodies)
        if found is None:
            found = self._signatures[bodies] = signature(bodies)
        return found

    def intern(self, op: ComputeOp) -> ComputeOp:
        key = self.key(op)
        found = self._ops.get(key)
        if found is None:
            found = self._ops[key] = op
            self._sigs.add(self.signature(op.body))
        return found

    def may_hold(self, bodies: tuple[Expr, ...]) -> bool:
        """False when no op held has ``bodies``' signature (then :meth:`read` finds none)."""
        return self.signature(bodies) in self._sigs

    def register(self, op: ComputeOp, as_op: ComputeOp | None = None) -> None:
        """Hold ``op`` under the key of ``as_op`` (default: its own) unless an equal op is
        held already (``as_op``: the same tensor spelled as the optimizer spells it)."""
        spelled = op if as_op is None else as_op
        self._sigs.add(self.signature(spelled.body))
        self._ops.setdefault(self.key(spelled), op)

    def register_view(self, op: ComputeOp, spelled: ComputeOp, index: Sequence[Expr]) -> None:
        """Hold ``op[index]`` (``index`` over ``spelled``'s axes) as the tensor ``spelled``, unless one is
        held already: read by :meth:`read`, never handed back by :meth:`intern`."""
        self._sigs.add(self.signature(spelled.body))
        self._views.setdefault(self.key(spelled), (op, spelled.axes, tuple(index)))

    def read(self, op: ComputeOp, at: Sequence[Expr]) -> Expr | None:
        """A read equal to ``op`` at the point ``at`` of its axes, of a tensor or view held with its key."""
        if not self.may_hold(op.body):
            return None
        key = self.key(op)
        found = self._ops.get(key)
        if found is not None:
            return Tensor(found, 0)[tuple(at)]
        view = self._views.get(key)
        if view is None:
            return None
        held, axes, index = view
        point = dict(zip(axes, at))
        return Tensor(held, 0)[tuple(substitute(i, point) for i in index)]
