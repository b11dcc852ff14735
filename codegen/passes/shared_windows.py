"""A compound operand that sums read through windows, computed once as a tensor.

A convolution's gradients behind a bias and a ReLU read the masked head
``select(conv[n, f, y', x'] + b[f] <= 0, 0, H[n, f, y', x'])`` through nine windows per point; computed
once as ``M[n, f, y, x]``, every product reads one plain array.  :func:`share_windowed_operands` finds such
*operands*: expressions of at least two reads, all at sub-tuples of one *principal* index whose entries
are distinct, non-constant and share no variable, with no variable outside them.  Equal operands share
one tensor.  One is materialized when a site's *expansion* is at least :data:`MIN_EXPANSION` and all
sites' add up to :data:`MIN_READS`, counted both by the entries' variables' ranges and by isl over the
points where the guards and ``where`` around the site hold (a variable read only through ``// m`` or
``% m`` counts for none).  Operations that could fault (integer division) stay with the readers, so a
strided convolution's input gradient, reading the head at ``(y + 1 - ry) // 2``, shares it too.  The
new reads are proved in bounds, else the operand stays; a guard of the index alone is never part of one."""

from __future__ import annotations

import math
from collections.abc import Callable

import islpy as isl

from tensorad.ir.dtype import is_int
from tensorad.ir.expr import Expr, Op, const, logical_not, var
from tensorad.ir.rewrite import empty_reduction, free_vars, substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.poly.affine import IndexSpace, NotAffine

from .footprint import count_points

MIN_EXPANSION = 2.0  # some reader reads each point at least this many times (a window)
MIN_READS = 3.0  # and all readers at least this many times in all
MAX_COUNTED = 1 << 16  # a site's variables over at most this many points have their reads counted by isl

_UNSAFE = (Op.FLOORDIV, Op.MOD, Op.DATA_INDEX, Op.REDUCE)


def _operand(node: Expr) -> tuple[Tensor, tuple[Expr, ...]] | None:
    """``(principal tensor, its index entries)`` when ``node`` is an operand (see the module
    docstring), else ``None``."""
    if node.op in (Op.READ, Op.VAR, Op.CONST) or is_int(node.dtype) or node.dtype == "bool":
        return None
    if node.op in (Op.SELECT, Op.IF_THEN_ELSE) and not any(n.op is Op.READ for n in walk(node.src[0])):
        return None  # (a guard of the index -- padding -- stays with the reader, which it keeps in bounds)
    reads = [n for n in walk(node) if n.op is Op.READ]
    if len(reads) < 2:
        return None
    principal = max(reads, key=lambda r: len(r.src))
    entries = principal.src
    if len(set(entries)) != len(entries):
        return None
    seen: set = set()
    for e in entries:
        vs = set(free_vars(e))
        if not vs or vs & seen:
            return None
        seen |= vs
    if any(not set(r.src) <= set(entries) for r in reads):
        return None
    value = substitute(node, {e: var(f"e{k}", 0, 1) for k, e in enumerate(entries)})  # (the index stays)
    if any(_may_fault(n) for n in walk(value)) or any(_may_fault(n) and not _by_constant(n)
                                                      for e in entries for n in walk(e)):
        return None
    return principal.arg, entries


def _may_fault(n: Expr) -> bool:
    return n.op in _UNSAFE or (n.op is Op.DIV and is_int(n.dtype))


def _by_constant(n: Expr) -> bool:
    """Whether ``n`` is an index's ``a // m`` or ``a % m`` by a positive constant (a strided window's)."""
    return n.op in (Op.FLOORDIV, Op.MOD) and n.src[1].op is Op.CONST and int(n.src[1].arg) > 0


def expansion(entries: tuple[Expr, ...], shape: tuple[int, ...], ranges: dict) -> float | None:
    """How many times a site reads each point of the operand's box: the ranges of its entries' variables
    (narrowed, ``ranges``) over the box's size; ``None`` for a variable without a range."""
    points = 1
    for v in {v for e in entries for v in free_vars(e)}:
        lo, hi = ranges.get(v, (v.arg.lo, v.arg.hi))
        if lo is None or hi is None:
            return None
        points *= max(0, hi - lo)
    return points / max(1, math.prod(shape))


def _undivided(entry: Expr) -> Expr:
    """``entry`` without its floor divisions and remainders: the variables that step it one by one (a
    variable read only through ``v // m`` or ``v % m`` is not counted as a window's)."""
    parts = {n: const(0, n.dtype) for n in walk(entry) if n.op in (Op.FLOORDIV, Op.MOD)}
    return substitute(entry, parts) if parts else entry


_FLIP = {Op.LT: Op.GT, Op.LE: Op.GE, Op.GT: Op.LT, Op.GE: Op.LE, Op.EQ: Op.EQ}
_NEGATE = {Op.LT: Op.GE, Op.LE: Op.GT, Op.GT: Op.LE, Op.GE: Op.LT}


def _narrowed(cond: Expr, ranges: dict, negate: bool = False) -> dict:
    """``ranges`` (variable -> ``(lo, hi)``) narrowed by what ``cond`` (or its negation) says of single
    variables (``v < c``, ``c <= v``, ``v == c``); an over-estimate."""
    if not negate and cond.op is Op.AND:
        return _narrowed(cond.src[1], _narrowed(cond.src[0], ranges))
    op, (a, b) = cond.op, cond.src if len(cond.src) == 2 else (None, None)
    if negate:
        op = _NEGATE.get(op)
    if op is None or a is None:
        return ranges
    if a.op is Op.CONST and b.op is Op.VAR:
        op, a, b = _FLIP.get(op), b, a
    if (op is None or a.op is not Op.VAR or b.op is not Op.CONST or not is_int(b.dtype)
            or a.arg.lo is None or a.arg.hi is None):
        return ranges
    c = int(b.arg)
    lo, hi = ranges.get(a, (a.arg.lo, a.arg.hi))
    narrowed = {Op.LT: (lo, min(hi, c)), Op.LE: (lo, min(hi, c + 1)), Op.GT: (max(lo, c + 1), hi),
                Op.GE: (max(lo, c), hi), Op.EQ: (max(lo, c), min(hi, c + 1))}.get(op)
    return ranges if narrowed is None else {**ranges, a: narrowed}  # (``!=`` says nothing here)


def _sites(root: Expr, skip: set) -> list[tuple[Expr, Tensor, tuple[Expr, ...], dict, tuple[Expr, ...]]]:
    """The operands under ``root`` that no other operand contains, each with the ranges of the variables that
    the index guards around it narrow, and those guards and the ``where`` of the sums around it."""
    found, seen, stack = [], set(), [(root, {}, ())]
    while stack:
        n, ranges, guards = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        hit = _operand(n) if n not in skip else None
        if hit is not None:
            found.append((n, *hit, ranges, guards))
        elif n.op in (Op.SELECT, Op.IF_THEN_ELSE) and not any(r.op is Op.READ for r in walk(n.src[0])):
            c = n.src[0]
            stack.extend([(c, ranges, guards), (n.src[1], _narrowed(c, ranges), guards + (c,)),
                          (n.src[2], _narrowed(c, ranges, negate=True), guards + (logical_not(c),))])
        elif n.op is Op.REDUCE:
            stack.append((n.src[0], ranges, guards))
            stack.extend((c, ranges, guards + (n.src[0],)) for c in n.src[1:])
        else:
            stack.extend((c, ranges, guards) for c in n.src)
    return found


def counted_expansion(entries: tuple[Expr, ...], shape: tuple[int, ...], guards: tuple[Expr, ...]) -> float:
    """:func:`expansion` with the points of the entries' variables counted by isl where the guards and
    the ``where`` of the sums around a site hold (a condition isl cannot represent holds everywhere):
    a sum over a sparse window, or one whose variables are tied to one another, reads each point fewer
    times than its variables' ranges say.  ``inf`` (no refinement) over more than :data:`MAX_COUNTED`
    points, which isl would walk one by one."""
    variables = list(dict.fromkeys(v for e in entries for v in free_vars(e)))
    if not variables:
        return 1 / max(1, math.prod(shape))
    others = list(dict.fromkeys(v for g in guards for v in free_vars(g) if v not in variables))
    ranged = variables + others
    if not all(v.op is Op.VAR and type(v.arg.lo) is int and type(v.arg.hi) is int for v in ranged) or \
            math.prod(max(0, v.arg.hi - v.arg.lo) for v in ranged) > MAX_COUNTED:
        return math.inf
    space = IndexSpace(variables + others)
    points = space.box()
    try:
        for g in guards:
            points = points.intersect(space.cond(g, exact=False))
    except NotAffine:
        return math.inf
    if others:
        points = points.project_out(isl.dim_type.set, len(variables), len(others))
    return count_points(points.coalesce()) / max(1, math.prod(shape))


def _worth(sites: list, times: Callable) -> bool:
    """Whether some site reads each point at least :data:`MIN_EXPANSION` times and all at least
    :data:`MIN_READS` times, by ``times`` of each site (its expansion)."""
    expansions = [times(s) for s in sites]
    return max(expansions) >= MIN_EXPANSION and sum(expansions) >= MIN_READS


def share_windowed_operands(ops: list[ComputeOp], bodies: dict,
                            check: Callable[[ComputeOp, tuple], bool]) -> list[ComputeOp]:
    """``ops`` with a new elementwise op per operand worth computing once, before its first reader, whose
    ``bodies`` read it (in place); ``check(op, bodies)`` proves its reads in bounds."""
    whole = {bodies[op][0] for op in ops if len(bodies[op]) == 1 and not op.is_reduction}
    # canonical body -> (its new op, the sites reading it: (op, node, entries, expansion))
    groups: dict[Expr, tuple[ComputeOp, list]] = {}
    axes_of: dict[tuple, tuple[Expr, ...]] = {}
    for op in ops:
        # (a reduction over an empty box reads nothing: the ops its body names may be dead)
        for b in (b for b in bodies[op] if not empty_reduction(b)):
            for node, principal, entries, ranges, guards in _sites(b, whole):
                shape = tuple(principal.shape)
                times = expansion(tuple(map(_undivided, entries)), shape, ranges)
                if times is None:
                    continue
                key = (principal, shape)
                axes = axes_of.get(key)
                if axes is None:
                    axes = axes_of[key] = tuple(var(f"w{k}", 0, n_) for k, n_ in enumerate(shape))
                body = substitute(node, dict(zip(entries, axes)))
                if not set(free_vars(body)) <= set(axes):
                    continue
                if body not in groups:
                    new = ComputeOp(f"{op.name}.operand", op.tag, axes, (body,), (), op.provenance)
                    groups[body] = (new, [])
                groups[body][1].append((op, node, entries, times, guards))
    new_ops = list(ops)
    for body, (new, sites) in groups.items():
        shape = tuple(new.shape)
        if not _worth(sites, lambda s: s[3]) or not _worth(sites, lambda s, shape=shape: counted_expansion(
                tuple(map(_undivided, s[2])), shape, s[4])) or not check(new, (body,)):
            continue
        tensor = Tensor(new, 0)
        changed: dict[ComputeOp, tuple] = {}
        for op, node, entries, *_ in sites:
            read_it = Expr(Op.READ, node.dtype, entries, tensor)
            changed[op] = tuple(substitute(b, {node: read_it}) for b in changed.get(op, bodies[op]))
        if not all(check(op, bs) for op, bs in changed.items()):
            continue  # (a reader would read it where the operand's own guards kept it in bounds)
        read = {n.arg.op for n in walk(body) if n.op is Op.READ}
        after = [k for k, op in enumerate(new_ops) if op in read]
        at = max(after) + 1 if after else 0
        if at > min(new_ops.index(op) for op in changed):
            continue  # (a reader computes what the operand reads: it stays inline)
        bodies.update(changed)
        bodies[new] = (body,)
        new_ops.insert(at, new)
    return new_ops
