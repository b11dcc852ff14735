"""Elementwise values that the forward computes and the backward would compute again: saved.

:func:`share_values` makes such a value (a transcendental function or a power, as log-softmax's
``exp(z - m)``) a tensor ``E`` over the box of its index variables, rewrites both programs to read it, and
the residual planner saves ``E``.  A value is shared when it lies in a forward op's body outside any lazy
``if_then_else`` and ``where``-reduction, over that op's axes; ``E`` is no larger than the largest tensor
the value reads and reads in bounds (isl's proof); the backward contains it (matched structurally) over
ranges inside ``E``'s; and ``worth(value)`` says a load beats recomputing."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..ir.expr import TRUE, UNARY_MATH, Expr, Op, SizeDecisionError, var
from ..ir.rewrite import free_vars, match_pattern, reads, rewrite, substitute, tensor_graph, walk, walk_along
from ..ir.tensor import ComputeOp, Provenance, Role, Tensor
from ..lang.bounds import OutOfBoundsError
from ..lang.tensor_lang import make_compute
from ..poly.affine import decide

HEAVY = UNARY_MATH | {Op.POW}


@dataclass(frozen=True)
class _Value:
    """A candidate: ``node`` over the index variables ``axes``; ``pattern`` its spelling
    (:class:`_Speller`); ``itself`` the source's own tensor when the value is its whole body."""

    node: Expr
    axes: tuple[Expr, ...]
    source: ComputeOp
    pattern: Expr
    itself: Tensor | None = None

    @property
    def size(self) -> int:
        return math.prod(v.hi - v.lo for v in self.axes)


class _Speller:
    """One spelling per value: reads of the forward's cheap elementwise tensors replaced by their bodies,
    so that both passes' spellings of one value are one pattern."""

    def __init__(self, forward: Sequence[Tensor]) -> None:
        # cheap tensors only (those the optimizer inlines), so a spelling stays linear in size
        self.inline = {t for t in forward if isinstance(t.op, ComputeOp) and not t.op.is_reduction
                       and t.op.provenance.role is not Role.SAVED
                       and not any(n.op in HEAVY for b in t.op.body for n in walk(b))}
        self.memo: dict = {}

    def __call__(self, e: Expr) -> Expr:
        def rule(n: Expr) -> Expr | None:
            t = n.arg
            if t not in self.inline:
                return None
            return substitute(t.op.body[t.value_index], dict(zip(t.op.axes, n.src)))
        return rewrite(e, {Op.READ: rule}, self.memo)


def _lazy_free_nodes(body: Expr) -> list[Expr]:
    """The nodes of ``body`` that run wherever it runs: not under a lazy choice or in a reduction's where."""
    def unconditional(n: Expr) -> tuple[Expr, ...]:
        if n.op is Op.IF_THEN_ELSE:
            return n.src[:1]  # the condition runs; the branches only where chosen
        if n.op is Op.REDUCE:
            return n.src[1:] if n.src[0] is TRUE else ()
        return n.src

    return list(walk_along(body, unconditional))


def _at_most(a: int | Expr, b: int | Expr) -> bool:
    """Whether count ``a`` is at most ``b`` at every admissible size (counts over size variables)."""
    try:
        return decide(a <= b)
    except SizeDecisionError:
        return False


def _candidates(ops: Sequence[ComputeOp], worth: Callable[[Expr], bool], spell: _Speller) -> list[_Value]:
    found: dict[tuple, _Value] = {}
    for op in ops:
        own = tuple(op.axes) + tuple(op.reduce_axes)
        for body in op.body:
            for n in _lazy_free_nodes(body):
                if n.op not in HEAVY or (n, op) in found:
                    continue
                used = set(free_vars(n))
                axes = tuple(v for v in own if v in used)
                if not axes or len(axes) != len(used) or any(v.hi is None or v.lo is None for v in axes):
                    continue
                reads = [r.arg for r in walk(n) if r.op is Op.READ]
                itself = None
                if not op.is_reduction and op.num_outputs == 1 and body is n and axes == tuple(op.axes):
                    itself = Tensor(op, 0)
                value = _Value(n, axes, op, spell(n), itself)
                if reads and any(_at_most(value.size, t.size) for t in reads) and worth(n):
                    found[(n, op)] = value
    return list(found.values())


def _bind(value: _Value, node: Expr, allowed: Callable[[Expr], bool]) -> tuple[Expr, ...] | None:
    """The indices at which ``node`` reads ``value``'s tensor, or None unless at variables in its box."""
    bind: dict = {}
    if not match_pattern(value.pattern, node, frozenset(value.axes), bind) or len(bind) != len(value.axes):
        return None
    for v in value.axes:
        b = bind[v]
        if b.op is not Op.VAR or b.lo is None or b.hi is None or not _at_most(v.lo, b.lo) \
                or not _at_most(b.hi, v.hi) or not allowed(b):
            return None
    return tuple(bind[v] - v.lo if v.lo else bind[v] for v in value.axes)


@dataclass(frozen=True)
class Shared:
    """The programs rewritten to read the shared values (``outputs``, ``grads``); ``values``: the value
    tensors the backward reads; ``original``: rewritten -> given tensor."""

    outputs: list[Tensor]
    grads: list[Tensor]
    values: tuple[Tensor, ...]
    original: dict[Tensor, Tensor]


def share_values(outputs: Sequence[Tensor], grads: Sequence[Tensor], worth: Callable[[Expr], bool]) -> Shared:
    """The programs rewritten to read the values worth sharing (unchanged, no values, if none qualifies)."""
    forward = tensor_graph(outputs)
    forward_set = set(forward)
    fwd_ops = list(dict.fromkeys(t.op for t in forward if isinstance(t.op, ComputeOp)))
    spell = _Speller(forward)
    candidates = _candidates(fwd_ops, worth, spell)
    if not candidates:
        return Shared(list(outputs), list(grads), (), {})
    whole = tensor_graph(list(outputs) + list(grads))  # the forward's tensors first
    back_ops = list(dict.fromkeys(t.op for t in whole
                                  if isinstance(t.op, ComputeOp) and t not in forward_set))
    read_back = {r for op in back_ops for b in op.body for r in reads(b)}
    heavy_ops = {c.node.op for c in candidates}
    in_backward: dict[tuple, list[Expr]] = {}  # the backward's nodes by key (see _key)
    for op in back_ops:
        for b in op.body:
            for n in walk(b):
                if n.op in heavy_ops:
                    m = spell(n)
                    in_backward.setdefault(_key(m), []).append(m)
    by_key: dict[tuple, list[_Value]] = {}
    for c in candidates:  # only values the backward reads or recomputes
        if c.itself in read_back or any(_bind(c, m, lambda v: True) is not None
                                        for m in in_backward.get(_key(c.pattern), ())):
            by_key.setdefault(_key(c.pattern), []).append(c)
    if not by_key:
        return Shared(list(outputs), list(grads), (), {})
    return _Rebuild(by_key, forward_set, spell).run(whole, outputs, grads)


def _key(spelled: Expr) -> tuple:
    """What a value and every node matching it share: the operation and the tensors read
    (a match binds only index variables), so each node is compared with few candidates."""
    return spelled.op, frozenset(reads(spelled))


class _Rebuild:
    """One pass over the whole graph, producers first: each op's bodies read the rebuilt
    tensors and the value tensors; each value tensor is made at its first use."""

    def __init__(self, by_key: dict, forward_set: set, spell: _Speller) -> None:
        self.by_key, self.forward_set, self.spell = by_key, forward_set, spell
        self.heavy_ops = {k[0] for k in by_key}
        self.producers: dict[_Value, set[Tensor]] = {}
        self.new: dict[Tensor, Tensor] = {}
        self.old: dict[Tensor, Tensor] = {}  # rebuilt -> given tensor (candidates read the given ones)
        self.given: dict = {}  # rewrite memo of :meth:`_given`
        self.made: dict[_Value, Tensor | None] = {}

    def feeds(self, tensor: Tensor, c: _Value) -> bool:
        """Whether ``tensor`` is one of the tensors ``c``'s value is computed from (reading the value
        there would be a cycle); only forward tensors are walked."""
        if tensor not in self.forward_set:
            return False
        if c not in self.producers:
            self.producers[c] = set(tensor_graph([r.arg for r in walk(c.node) if r.op is Op.READ]))
        return tensor in self.producers[c]

    def value_tensor(self, c: _Value) -> Tensor | None:
        if c.itself is not None:
            return self.new.get(c.itself)
        if c not in self.made:
            fresh = tuple(var(v.name, 0, v.hi - v.lo if v.lo else v.hi) for v in c.axes)  # (a size: itself)
            m = {v: (a + v.lo if v.lo else a) for v, a in zip(c.axes, fresh)}
            body = rewrite(c.node, lambda n: m.get(n) if n.op is Op.VAR else self._remap(n))
            try:
                (t,) = make_compute(f"{c.source.name}.value", fresh, (body,), "saved_value",
                                    provenance=Provenance(Role.SAVED))
            except OutOfBoundsError:
                t = None
            self.made[c] = t
        return self.made[c]

    def _given(self, n: Expr) -> Expr:
        """``n`` reading the given tensors where it reads rebuilt ones: a value that reads a tensor rebuilt to
        read another shared value is spelled over the given tensors, as its candidate is."""
        def back(x: Expr) -> Expr | None:
            return x.replace(arg=self.old[x.arg]) if x.op is Op.READ and x.arg in self.old else None
        return rewrite(n, back, self.given) if self.old else n

    def _remap(self, n: Expr) -> Expr | None:
        if n.op is Op.READ and n.arg in self.new and self.new[n.arg] is not n.arg:
            return n.replace(arg=self.new[n.arg])
        return None

    def body(self, op: ComputeOp, tensor: Tensor, b: Expr) -> Expr:
        own = set(op.axes) | set(op.reduce_axes)

        def rule(n: Expr) -> Expr | None:
            if n.op not in self.heavy_ops:
                return self._remap(n)
            m = self.spell(self._given(n))
            for c in self.by_key.get(_key(m), ()):
                if (c.itself is not None and op is c.source) or self.feeds(tensor, c):
                    continue
                at = _bind(c, m, lambda v: v in own)
                if at is None:
                    continue
                t = self.value_tensor(c)
                if t is not None:
                    return Expr(Op.READ, n.dtype, at, t)
            return self._remap(n)
        return rewrite(b, rule)

    def run(self, whole: list[Tensor], outputs, grads) -> Shared:
        done: dict[ComputeOp, ComputeOp] = {}
        backward: list[ComputeOp] = []
        for t in whole:
            if not isinstance(t.op, ComputeOp):
                self.new[t] = t
                continue
            if t.op not in done:
                op = t.op
                bodies = tuple(self.body(op, t, b) for b in op.body)
                done[op] = op if all(x is y for x, y in zip(bodies, op.body)) else ComputeOp(
                    op.name, op.tag, op.axes, bodies, op.attrs, op.provenance)
                if t not in self.forward_set:
                    backward.append(done[op])
            self.new[t] = t if done[t.op] is t.op else Tensor(done[t.op], t.value_index)
            if self.new[t] is not t:
                self.old[self.new[t]] = t
        candidates = {self.value_tensor(c) for vs in self.by_key.values() for c in vs} - {None}
        read = {r for op in backward for b in op.body for r in reads(b)}
        values = tuple(t for t in candidates if t in read)
        if not values:
            return Shared(list(outputs), list(grads), (), {})
        original = {n: t for t, n in self.new.items() if n is not t}
        return Shared([self.new[o] for o in outputs], [self.new[g] for g in grads], values, original)
