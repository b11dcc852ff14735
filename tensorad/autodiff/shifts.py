"""Stabilizing shifts: tensors whose outputs do not change when the shift changes.

A softmax, a log-softmax and a log-sum-exp subtract the row max ``m`` before ``exp``; the result is the same
for any ``m``, so the derivative through ``m`` is zero, but written out it cancels only algebraically.
:func:`cancelling_shifts` finds such tensors by structure: each is then a constant for differentiation.

The proof replaces ``m[idx]`` by ``m[idx] + c[idx]`` (``c`` arbitrary) and carries, for each expression
downstream, how it changes:

* ``add``: ``v + sum_k a_k c[key_k]`` (a difference ``X - m``, a max of shifted values, a log);
* ``mul``: ``v * exp(sum_k a_k c[key_k])`` (an ``exp`` of an ``add``, products, quotients, sums over axes
  the keys do not mention);
* invariant (no terms), zero (a literal 0: any ``mul`` form), or unknown (``None``).

A shift cancels for the outputs when every output is invariant."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..ir import dtype as dt
from ..ir.expr import Expr, Op
from ..ir.rewrite import fold, free_vars, substitute, walk
from ..ir.tensor import ComputeOp, Tensor


@dataclass(frozen=True)
class Change:
    """How a value changes under the shift: ``kind`` is "inv", "zero", "add" or "mul"."""

    kind: str
    terms: frozenset = frozenset()  # (key: tuple of index Exprs, coefficient)


INV, ZERO = Change("inv"), Change("zero")


def _made(kind: str, terms: dict) -> Change:
    kept = frozenset((k, a) for k, a in terms.items() if a != 0)
    return Change(kind, kept) if kept else INV


def _merged(a: Change, b: Change, scale: float = 1.0) -> dict:
    out = dict(a.terms)
    for k, v in b.terms:
        out[k] = out.get(k, 0) + scale * v
    return out


def _scaled(a: Change, factor: float) -> dict:
    return {k: factor * v for k, v in a.terms}


def _is(a: Change, *kinds: str) -> bool:
    return a.kind in kinds


def _const(node: Expr) -> float | None:
    return float(node.arg) if node.op is Op.CONST and dt.is_float(node.dtype) else None


def _sum(a: Change | None, b: Change | None, sign: float = 1.0) -> Change | None:
    """``a + sign * b``: shifts add; scaled values must share one scale."""
    if a is None or b is None:
        return None
    if _is(b, "zero"):
        return a
    if _is(a, "zero"):
        return b if sign > 0 or not _is(b, "add") else _made("add", _scaled(b, -1))
    if _is(a, "inv", "add") and _is(b, "inv", "add"):
        return _made("add", _merged(a, b, sign))
    return a if _is(a, "mul") and a == b else None


def _product(node: Expr, a: Change | None, b: Change | None, sign: float) -> Change | None:
    """``a * b`` (sign 1) or ``a / b`` (sign -1): scales multiply, a shift scales by a constant."""
    if a is None or b is None:
        return None
    if _is(a, "zero"):
        return ZERO
    if _is(b, "zero"):
        return ZERO if sign > 0 else None
    if _is(a, "inv", "mul") and _is(b, "inv", "mul"):
        return _made("mul", _merged(a, b, sign))
    k = _const(node.src[1]) if _is(a, "add") and _is(b, "inv") else (
        _const(node.src[0]) if sign > 0 and _is(b, "add") and _is(a, "inv") else None)
    return None if not k else _made("add", _scaled(a if _is(a, "add") else b, k if sign > 0 else 1.0 / k))


def _unary(node: Expr, a: Change | None) -> Change | None:
    if a is None or _is(a, "inv"):
        return a
    op = node.op
    if op is Op.NEG:
        return a if not _is(a, "add") else _made("add", _scaled(a, -1))
    if op is Op.EXP:
        return INV if _is(a, "zero") else (_made("mul", dict(a.terms)) if _is(a, "add") else None)
    if op is Op.LOG:
        return _made("add", dict(a.terms)) if _is(a, "mul") else None
    if op is Op.SQRT:
        return _made("mul", _scaled(a, 0.5)) if _is(a, "mul") else (ZERO if _is(a, "zero") else None)
    if op is Op.CAST:
        return a if dt.is_float(node.dtype) and dt.is_float(node.src[0].dtype) else None
    return None


def _choice(node: Expr, c: Change | None, a: Change | None, b: Change | None) -> Change | None:
    """``select(c, a, b)``: the same change on both branches, a literal zero fits any scale."""
    if c is not INV or a is None or b is None:
        return None
    if _is(a, "zero") or a == b:
        return b
    return a if _is(b, "zero") else None


def _extreme(node: Expr, a: Change | None, b: Change | None) -> Change | None:
    """``max(a, b)`` / ``min(a, b)``: one shift or one positive scale on both sides."""
    return a if a is not None and a == b and not _is(a, "zero") else None


def _opaque(node: Expr, *args: Change | None) -> Change | None:
    return INV if all(a is INV or a is ZERO for a in args) else None


class _Proof:
    """The changes of the tensors downstream of one candidate shift ``m``."""

    def __init__(self, m: Tensor) -> None:
        self.m = m
        self.changes: dict[Tensor, Change | None] = {m: None}
        self.table = {op: _opaque for op in Op} | {
            Op.VAR: lambda n: INV,
            Op.CONST: lambda n: ZERO if _const(n) == 0.0 else INV,
            Op.ADD: lambda n, a, b: _sum(a, b),
            Op.SUB: lambda n, a, b: _sum(a, b, -1.0),
            Op.MUL: lambda n, a, b: _product(n, a, b, 1.0),
            Op.DIV: lambda n, a, b: _product(n, a, b, -1.0),
            Op.POW: self._power,
            Op.MAXIMUM: _extreme, Op.MINIMUM: _extreme,
            Op.SELECT: _choice, Op.IF_THEN_ELSE: _choice,
            Op.READ: self._read, Op.REDUCE: self._reduce,
        } | {op: _unary for op in (Op.NEG, Op.EXP, Op.LOG, Op.SQRT, Op.CAST)}

    def change(self, t: Tensor) -> Change | None:
        return None if t == self.m else self.changes.get(t, INV)

    def _power(self, node: Expr, a: Change | None, b: Change | None) -> Change | None:
        k = _const(node.src[1])
        if a is None or b is not INV or k is None:
            return None
        return a if _is(a, "inv") else (_made("mul", _scaled(a, k)) if _is(a, "mul") else None)

    def _read(self, node: Expr, *index: Change | None) -> Change | None:
        if not all(i is INV or i is ZERO for i in index):
            return None
        t = node.arg
        if t == self.m:
            return _made("add", {tuple(node.src): 1.0})
        got = self.changes.get(t, INV)
        if got is None or not got.terms:
            return got
        ren = dict(zip(t.op.axes, node.src))
        return _made(got.kind, {tuple(substitute(e, ren) for e in k): a for k, a in got.terms})

    def _reduce(self, node: Expr, cond: Change | None, *sources: Change | None) -> Change | None:
        if cond is not INV or len(sources) != 1 or sources[0] is None:
            return _opaque(node, cond, *sources)
        src, kind = sources[0], node.arg.combiner.kind
        axes = set(node.arg.axes)
        if any(v in axes for k, _ in src.terms for e in k for v in free_vars(e)):
            return None
        if _is(src, "inv", "zero"):
            return src
        fits = {"sum": ("mul",), "max": ("add", "mul"), "min": ("add", "mul")}.get(kind, ())
        return src if _is(src, *fits) else None

    def run(self, graph: Sequence[Tensor]) -> bool:
        """Whether every tensor of ``graph`` after ``m`` that reads a changed one is
        invariant where it reaches the outputs (the caller checks the outputs)."""
        start = graph.index(self.m) + 1
        for t in graph[start:]:
            op = t.op
            if not isinstance(op, ComputeOp):
                continue
            body = op.body[t.value_index]
            if not any(r.op is Op.READ and self.change(r.arg) is not INV for r in walk(body)):
                continue
            got = fold(body, self.table)
            if got is None:
                return False
            self.changes[t] = got
        return True


def _candidates(graph: Sequence[Tensor]) -> set[Tensor]:
    """The tensors worth a proof: those some body reads inside an ``exp``, and row maxima and minima."""
    found: set[Tensor] = set()
    for op in dict.fromkeys(t.op for t in graph):
        if not isinstance(op, ComputeOp):
            continue
        if op.is_reduction and op.body[0].arg.combiner.kind in ("max", "min"):
            found.add(Tensor(op, 0))
        for body in op.body:
            for node in walk(body):
                if node.op is Op.EXP:
                    found.update(r.arg for r in walk(node.src[0]) if r.op is Op.READ)
    return found


def cancelling_shifts(graph: Sequence[Tensor], outputs: Sequence[Tensor]) -> set[Tensor]:
    """The float single-output compute tensors of ``graph`` (producers first) that every one of
    ``outputs`` is invariant to: ``outputs(m + c) == outputs(m)`` for every ``c`` of ``m``'s shape."""
    graph = list(graph)
    found = set()
    for m in _candidates(graph):
        if (m in outputs or not isinstance(m.op, ComputeOp) or m.op.num_outputs != 1
                or not dt.is_float(m.dtype)):
            continue
        proof = _Proof(m)
        if proof.run(graph) and all(proof.change(o) in (INV, ZERO) for o in outputs):
            found.add(m)
    return found
