"""Costly operations shared by the branches of an eager choice, computed once.

A ``select`` computes every branch, so a division or transcendental function repeated in its branches is paid
per branch: ``select(c1, H * (X / 6), select(c2, 0, H * ((X * 0.5) / 6)))`` becomes ``select(c1, V, select(c2,
0, V))`` with ``V = H * (select(c1, X, select(c2, X, X * 0.5)) / 6)``. Branches that share a *context*
``C[.]``, equal but for one operand inside (the *hole*), become one ``C[H]``, ``H`` the same tree of choices
over their holes: bit for bit the same.  The hole may not be an operand of ``+``/``-``/negation (a contracted
FMA would change) nor a read's index, and only lazy-free trees are touched."""

from __future__ import annotations

from tensorad.ir.expr import UNARY_MATH, Expr, Op
from tensorad.ir.rewrite import rewrite, walk

COSTLY = UNARY_MATH - {Op.ABS} | {Op.DIV, Op.POW}
MAX_LEAVES = 32  # a larger tree is left alone (each node's tree is collected again)
_CONTRACTS = (Op.ADD, Op.SUB, Op.NEG)
_ADDRESSED = (Op.READ, Op.DATA_INDEX)  # a chosen index would make a contiguous load a gather


def factor_choices(body: Expr) -> Expr:
    """``body`` with the costly contexts its ``select`` trees repeat computed once each."""
    if not any(n.op is Op.SELECT for n in walk(body)):
        return body  # (most bodies: no rebuilding walk)
    return rewrite(body, {Op.SELECT: _factor})


def _leaves(tree: Expr) -> list[Expr] | None:
    """The branches of the ``select`` tree at ``tree`` (not selects), in order; ``None``
    past ``MAX_LEAVES``."""
    out, stack = [], [tree]
    while stack:
        n = stack.pop()
        if n.op is Op.SELECT:
            stack += [n.src[2], n.src[1]]
        else:
            out.append(n)
            if len(out) > MAX_LEAVES:
                return None
    return out


def _context(leaves: list[Expr]) -> tuple[list[tuple[Expr, int]], list[Expr]] | None:
    """The path ``(node of the first leaf, operand position)`` from the root to the hole that
    ``leaves`` share, and their holes; ``None`` without a costly node on the path."""
    path, cur = [], list(leaves)
    while True:
        first = cur[0]
        if any((n.op, n.dtype, n.arg, len(n.src)) != (first.op, first.dtype, first.arg, len(first.src))
               for n in cur[1:]) or not first.src or first.op in _ADDRESSED:
            break
        differ = [i for i in range(len(first.src)) if any(n.src[i] is not first.src[i] for n in cur[1:])]
        if len(differ) != 1:
            break
        path.append((first, differ[0]))
        cur = [n.src[differ[0]] for n in cur]
    if not path or path[-1][0].op in _CONTRACTS or not any(n.op in COSTLY for n, _ in path):
        return None
    return None if any(h.dtype != cur[0].dtype for h in cur) else (path, cur)


def _factor(node: Expr) -> Expr | None:
    leaves = _leaves(node)
    if leaves is None:
        return None
    distinct = list(dict.fromkeys(x for x in leaves if x.op is not Op.CONST))
    groups: dict[tuple, list[Expr]] = {}
    for x in distinct:
        groups.setdefault((x.op, x.dtype, x.arg, len(x.src)), []).append(x)
    for group in sorted(groups.values(), key=len, reverse=True):
        found = _context(group) if len(group) >= 2 else None
        if found is not None:
            return _shared(node, group, *found)
    return None


def _shared(tree: Expr, group: list[Expr], path: list[tuple[Expr, int]], holes: list[Expr]) -> Expr:
    """``tree`` with the branches of ``group`` replaced by their context around the same
    tree of choices over their ``holes``."""
    hole_of = dict(zip(group, holes))
    value = _map_leaves(tree, lambda x: hole_of.get(x, holes[0]))
    for parent, i in reversed(path):
        value = parent.replace(src=parent.src[:i] + (value,) + parent.src[i + 1:])
    return _map_leaves(tree, lambda x: value if x in hole_of else x)


def _map_leaves(tree: Expr, fn) -> Expr:
    """The ``select`` tree ``tree`` with each branch ``x`` replaced by ``fn(x)``."""
    if tree.op is not Op.SELECT:
        return fn(tree)
    c, a, b = tree.src
    a, b = _map_leaves(a, fn), _map_leaves(b, fn)
    # (a tree of holes has the holes' dtype: an int32 read under a cast)
    return tree.replace(src=(c, a, b), dtype=a.dtype)
