"""Name-free spellings: the one numbering machinery behind every key that shares work between things equal
up to a renaming of their variables, tensors and buffers.

A key that numbers each variable, node, tensor, op and buffer by first appearance is equal for two things
exactly when one is the other renamed, as far as the spelling goes: each user's :class:`Speller` subclass
spells everything its work reads.  :func:`renamed` turns what was made for one thing into what the same
work makes for another with the same key.  Constants are spelled bit-exactly; an unhashable payload makes
the thing :class:`Unkeyable`.  Iterative, each shared node once."""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from operator import is_not

from .expr import Expr, Op
from .rewrite import fold_along, operands


class Unkeyable(Exception):
    """The thing holds something its key does not spell exactly."""


def float_bits(x: float) -> str:
    """``x``'s IEEE-754 double bits as hex (equal exactly for the same value and sign)."""
    return struct.pack("<d", x).hex()


def hashable(x: object) -> object:
    """``x`` as a key part: tagged with its type, floats by their bits (also within tuples and
    frozensets); :class:`Unkeyable` when ``x`` cannot be hashed."""
    if isinstance(x, float):
        return ("f", float_bits(x))
    if isinstance(x, tuple):
        return ("tuple", tuple(hashable(y) for y in x))
    if isinstance(x, frozenset):
        return ("frozenset", frozenset(hashable(y) for y in x))
    try:
        hash(x)
    except TypeError:
        raise Unkeyable(f"unhashable {type(x).__name__}") from None
    return (type(x).__name__, x)


def spell(root: Expr, nodes: dict[Expr, int], lines: list[tuple], payload: Callable[[Expr], object]) -> int:
    """The number of ``root`` in ``nodes``, appending a line ``(op, dtype, operand numbers,
    payload)`` per node not numbered yet -- operands first, iteratively (no recursion limit)."""
    def visit(e: Expr) -> int:
        data = payload(e)
        lines.append((e.op, e.dtype, tuple(nodes[s] for s in e.src), data))
        return len(nodes)

    return fold_along(root, operands, visit, nodes)


def renamed(root: Expr, tensors: Mapping, memo: dict[Expr, Expr],
            variables: Mapping[Expr, Expr] | None = None) -> Expr:
    """``root`` with each read of a tensor of ``tensors`` reading its image and each variable of
    ``variables`` replaced by its image (``memo``: earlier calls' nodes).  :class:`Unkeyable` where
    ``root`` reads another tensor, holds another variable, or a gather index or a sum."""
    def rebuilt(n: Expr) -> Expr:
        op = n.op
        if op is Op.VAR and variables is not None:
            if n not in variables:
                raise Unkeyable("a variable the key did not number")
            return variables[n]
        src = tuple(memo[c] for c in n.src)
        if op is Op.READ:
            if n.arg not in tensors:
                raise Unkeyable("a read of a tensor the key did not number")
            return Expr(Op.READ, n.dtype, src, tensors[n.arg])
        if op is Op.DATA_INDEX or op is Op.REDUCE:
            raise Unkeyable(op.name)
        return n.replace(src=src) if any(map(is_not, src, n.src)) else n

    return fold_along(root, operands, rebuilt, memo)


class Speller:
    """Numbers variables and nodes by first appearance into ``lines``.  Subclasses spell what a variable
    (:meth:`var_data`), a read (:meth:`read`) and other payloads (:meth:`other`) hold; by default a range,
    a reduction's combiner and axes, :func:`hashable`; ``named``: a variable's name is spelled too."""

    def __init__(self, named: bool = False) -> None:
        self.named = named
        self.vars: dict[Expr, int] = {}
        self.nodes: dict[Expr, int] = {}
        self.lines: list[tuple] = []

    def expr(self, root: Expr) -> int:
        """The number of ``root``; a line per node not spelled yet (see :func:`spell`)."""
        return spell(root, self.nodes, self.lines, self.payload)

    def var(self, v: Expr) -> int:
        """The number of the variable node ``v`` (an axis)."""
        if v.op is not Op.VAR:
            raise Unkeyable("an axis that is not a variable")
        return self.expr(v)

    def payload(self, e: Expr) -> object:
        op = e.op
        if op is Op.VAR:
            n = self.vars.setdefault(e, len(self.vars))
            return ("v", n, *self.var_data(e))
        if op is Op.READ:
            return self.read(e)
        if op is Op.CONST:
            return hashable(e.arg)
        if op is Op.REDUCE:
            arg = e.arg
            c = arg.combiner
            exprs = lambda es: tuple(self.expr(x) for x in es)  # noqa: E731
            return ("R", c.name, c.kind, exprs(c.lhs), exprs(c.rhs), exprs(c.result), exprs(c.identity),
                    tuple(self.var(a) for a in arg.axes), arg.value_index)
        return self.other(e)

    def var_data(self, v: Expr) -> tuple:
        return (v.arg.name, v.arg.lo, v.arg.hi) if self.named else (v.arg.lo, v.arg.hi)

    def read(self, e: Expr) -> object:
        raise Unkeyable("a read")

    def other(self, e: Expr) -> object:
        return hashable(e.arg)
