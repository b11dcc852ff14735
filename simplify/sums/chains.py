"""Contraction order: a sum of one product over several variables as a sequence of smaller sums.

A sum of a product whose factors do not all read every summed variable costs fewer multiply-adds as
nested sums whose results are materialized::

    sum_{j,k} A(j) B(j,k) C(k)  =  sum_k C(k) * T(k),      T(k) = sum_j A(j) B(j,k)

The *operands* are the sum's variant factors grouped by the variables they read (``x(i, j) * y(i, j)``
is one operand).  A *step* sums a product of operands and intermediates over the variables no other
operand and no axis reads; it costs the size of the box of every variable it reads (axes no operand
reads left out: lowering sums once for all their points).  :func:`contract_chain`
finds the steps with the fewest multiply-adds exactly (every partition of every subset of at most
:data:`MAX_OPERANDS` operands) and rewrites the sum only where they cost fewer than the sum as written.
Intermediates are tensors over the variables their results keep (the table's, where it holds an equal
one).  Only float sums of one product term over a box (a ``True`` where-condition) are touched."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import product as choices
from math import prod

from tensorad.ir import dtype as dt
from tensorad.ir.expr import TRUE, Expr, Op, ReduceArg
from tensorad.ir.rewrite import walk
from tensorad.poly.affine import decide

from ..algebra.rules import simplify_expr
from .factor import Lookup, Make, one_term, product, scaled

MAX_OPERANDS = 6  # more operands than this: the sum is left as it is


@dataclass(frozen=True)
class Leaf:
    """An operand read as it is, or (``reduced``) first summed over the variables only it reads."""

    index: int
    reduced: bool


@dataclass(frozen=True)
class Node:
    """An intermediate over the operands of ``mask``: a step over ``children``."""

    mask: int
    children: tuple[Leaf | Node, ...]


Child = Leaf | Node


def _partitions(mask: int) -> Iterator[list[int]]:
    """Every partition of the set bits of ``mask`` into blocks, the lowest bit's block first."""
    if not mask:
        yield []
        return
    low = mask & -mask
    rest = mask ^ low
    sub = rest
    while True:
        for tail in _partitions(rest ^ sub):
            yield [low | sub] + tail
        if not sub:
            break
        sub = (sub - 1) & rest


class _Orders:
    """The cheapest steps for operands reading ``reads[i]``, the axes ``keep`` kept, ``sizes`` of each
    variable's range."""

    def __init__(self, reads: Sequence[frozenset], keep: frozenset, sizes: dict) -> None:
        self.reads = list(reads)
        self.keep, self.sizes = keep, sizes
        self.full = (1 << len(reads)) - 1
        self.best: dict[int, tuple[int, tuple[Child, ...]]] = {}

    def size(self, variables: frozenset) -> int:
        return prod(self.sizes[v] for v in variables)

    def reads_of(self, mask: int) -> frozenset:
        return frozenset().union(*(r for i, r in enumerate(self.reads) if mask >> i & 1))

    def kept(self, mask: int) -> frozenset:
        """The variables the result over ``mask`` keeps: axes, and what other operands read."""
        return self.reads_of(mask) & (self.keep | self.reads_of(self.full & ~mask))

    def options(self, block: int) -> list[tuple[int, frozenset, Child]]:
        """``(cost, variables read, child)`` for each way of computing ``block`` as a step's child."""
        if block & (block - 1):
            cost, children = self.intermediate(block)
            return [(cost, self.kept(block), Node(block, children))]
        i = block.bit_length() - 1
        own, kept = self.reads[i], self.kept(block)
        out: list[tuple[int, frozenset, Child]] = [(0, own, Leaf(i, False))]
        if kept != own:
            out.append((self.size(own), kept, Leaf(i, True)))
        return out

    def step(self, mask: int, out: frozenset) -> tuple[int, tuple[Child, ...]]:
        """The cheapest step over two or more blocks of ``mask``'s operands whose loops also run over
        ``out``."""
        found: tuple[int, tuple[Child, ...]] | None = None
        for blocks in _partitions(mask):
            if len(blocks) == 1:
                continue
            for chosen in choices(*(self.options(b) for b in blocks)):
                cost = sum(c for c, _, _ in chosen) + self.size(out.union(*(r for _, r, _ in chosen)))
                if found is None or cost < found[0]:
                    found = (cost, tuple(ch for _, _, ch in chosen))
        assert found is not None
        return found

    def intermediate(self, mask: int) -> tuple[int, tuple[Child, ...]]:
        found = self.best.get(mask)
        if found is None:
            found = self.best[mask] = self.step(mask, frozenset())
        return found


def contract_chain(axes: Sequence[Expr], red: Expr, lookup: Lookup, make: Make, ctx=None) -> Expr | None:
    """``red`` (a sum body over ``axes``) as the cheapest sequence of sums (see the module docstring), or
    ``None`` when the sum as written costs no more."""
    if red.op is not Op.REDUCE or red.arg.combiner.kind != "sum" or len(red.src) != 2 \
            or red.src[0] is not TRUE or len(red.arg.axes) < 2 or not dt.is_float(red.dtype):
        return None
    rvars = red.arg.axes
    scope = tuple(axes) + tuple(rvars)
    if any(v.lo is None or v.hi is None or decide(v.hi <= v.lo) for v in scope):
        return None
    found = one_term(red)
    if found is None:
        return None
    coef, factors = found
    operands: dict[frozenset, list[Expr]] = {}
    for f in factors:
        operands.setdefault(frozenset(n for n in walk(f) if n.op is Op.VAR and n in scope), []).append(f)
    reads = list(operands)
    if not 2 <= len(reads) <= MAX_OPERANDS or set(rvars) - frozenset().union(*reads):
        return None  # (a variable no operand reads: a count, :mod:`.factor`'s)
    read = frozenset().union(*reads)  # (an axis no operand reads is one lowering hoists the sum out of)
    orders = _Orders(reads, frozenset(axes) & read, {v: v.hi - v.lo for v in scope})
    cost, children = orders.step(orders.full, orders.keep)
    if decide(cost >= orders.size(read)):  # (sizes: decided over their values)
        return None
    built = _Builder(orders, [product(fs, red.dtype) for fs in operands.values()], scope, red, lookup, make)
    src = scaled(coef, product([built.child(c) for c in children], red.dtype))
    left = tuple(r for r in rvars if r in frozenset().union(*(built.reads(c) for c in children)))
    if not left:
        return simplify_expr(src, ctx)
    return Expr(Op.REDUCE, red.dtype, (TRUE, simplify_expr(src, ctx)), ReduceArg(red.arg.combiner, left, 0))


@dataclass
class _Builder:
    """The expressions of a plan's children: operands as written, intermediates as reads of tensors."""

    orders: _Orders
    operands: list[Expr]
    scope: Sequence[Expr]
    red: Expr
    lookup: Lookup
    make: Make

    def reads(self, child: Child) -> frozenset:
        if isinstance(child, Node):
            return self.orders.kept(child.mask)
        own = self.orders.reads[child.index]
        return self.orders.kept(1 << child.index) if child.reduced else own

    def child(self, child: Child) -> Expr:
        if isinstance(child, Leaf) and not child.reduced:
            return self.operands[child.index]
        if isinstance(child, Leaf):
            mask, parts = 1 << child.index, [self.operands[child.index]]
            inner = self.orders.reads[child.index]
        else:
            mask, parts = child.mask, [self.child(c) for c in child.children]
            inner = frozenset().union(*(self.reads(c) for c in child.children))
        kept = self.orders.kept(mask)
        summed = tuple(v for v in self.scope if v in inner and v not in kept)
        if not summed:  # (never cheaper: the plan does not choose it)
            return product(parts, self.red.dtype)
        body = Expr(Op.REDUCE, self.red.dtype, (TRUE, product(parts, self.red.dtype)),
                    ReduceArg(self.red.arg.combiner, summed, 0))
        free = tuple(v for v in self.scope if v in kept)
        found = self.lookup(free, body)
        return found if found is not None else self.make(free, body, False, False)
