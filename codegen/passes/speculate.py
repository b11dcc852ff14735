"""Lazy choices made eager where that is safe: ``if_then_else`` -> ``select`` on data tests.

``if_then_else(c, a, b)`` is emitted as branches, which stop LLVM's vectorizer; its laziness only matters
for reads out of bounds in the branch ``c`` excludes.  The bounds checker (``tensorad.lang.bounds``) takes
a *data-dependent* atom as possibly true (and its negation as possibly false), so when every atom of ``c``
reads data (outside every gather index), as ``winner[y // 2, x // 2] == (y % 2) * 2 + x % 2``, both
branches' reads are in bounds and a ``select`` is safe.  Only cheap branches are speculated (no
transcendental function, division or reduction)."""

from __future__ import annotations

from tensorad.ir.expr import UNARY_MATH, Expr, Op
from tensorad.ir.rewrite import rewrite, walk, walk_along
from tensorad.ir.tensor import reads_data

_LOGIC = (Op.AND, Op.OR, Op.NOT)
_COSTLY = UNARY_MATH - {Op.ABS} | {Op.POW, Op.DIV, Op.REDUCE}  # (``abs``: one bitwise and)
MAX_BRANCH_NODES = 24


def data_dependent(c: Expr) -> bool:
    """Whether every atom of condition ``c`` reads data isl cannot model (so the bounds proof
    could use none of them)."""
    logic = walk_along(c, lambda n: n.src if n.op in _LOGIC else ())
    return all(reads_data(a) for a in logic if a.op not in _LOGIC)


def cheap(e: Expr, costly: frozenset | set = _COSTLY) -> bool:
    """Small, none of the ``costly`` ops, and no checked gather index (the bounds proof took it as in
    range, which only the branch's guard may make true)."""
    for count, n in enumerate(walk(e), 1):
        if n.op in costly or count > MAX_BRANCH_NODES or n.op is Op.DATA_INDEX and n.arg.mode == "raise":
            return False
    return True


def _rule(node: Expr) -> Expr | None:
    c, a, b = node.src
    return Expr(Op.SELECT, node.dtype, node.src) if data_dependent(c) and cheap(a) and cheap(b) else None


def speculate(body: Expr) -> Expr:
    """``body`` with safe, cheap ``if_then_else`` nodes turned into ``select`` (see above); sound only for
    bodies whose reads the bounds checker has proved."""
    if not any(n.op is Op.IF_THEN_ELSE and data_dependent(n.src[0]) for n in walk(body)):
        return body  # (no choice to make eager: the rule's test reads the same atoms rebuilt)
    return rewrite(body, {Op.IF_THEN_ELSE: _rule})
