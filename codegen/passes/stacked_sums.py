"""Products stacked into one product over one more axis: several summed, or several sharing a side.

A recurrent network's weight gradient adds one skinny product per step, ``dW[a, b] = sum_r H1[r, a] G1[r, b] +
sum_r H2[r, a] G2[r, b] + ...`` (one sum of several terms or an elementwise sum of several sums).  A new
reduction axis ``s`` over the terms stacks their sides into ``L[s, r, a] = H_s[r, a]`` and ``R[s, r, b] =
G_s[r, b]`` (trees of ``if_then_else`` over ``s``): one product with ``K = terms * batch``.  A term's factors
split into those over the first side's output axes (with those that read none) and the rest; stacking applies
where every term splits the same way, the sides differ between terms (a shared side is
:mod:`..strategies.term_split`'s), and the copies of a term's sides (``(M + N) K`` values) cost no more than
the partial sum its own product would store and load (``M N``).  The terms are added in another order.

Independent products that share one side stack too: an unrolled layer's ``P_t[i, j] = sum_k X[t, i, k]
W[j, k]`` are one product ``P[s, i, j]`` packing ``W`` once, where the shared side is at least
:data:`MIN_SAVING` times the stacked one and no member's reader comes before what the members read (a
recurrence's products stay apart)."""

from __future__ import annotations

import math
from collections.abc import Callable

from tensorad.ir.dtype import is_float
from tensorad.ir.expr import TRUE, Expr, Op, ReduceArg, box, const, copies, var
from tensorad.ir.rewrite import chain, free_vars, replace_reads, substitute, walk
from tensorad.ir.tensor import ComputeOp, Provenance, Role, Tensor

from .winograd import choice_tree

_UNSAFE = (Op.REDUCE, Op.DATA_INDEX)
MIN_SAVING = 4  # a shared side at least this many times the side stacked in its place


def _terms(e: Expr) -> list[Expr]:
    return chain(e, Op.ADD)


def _factors(e: Expr) -> list[Expr]:
    return chain(e, Op.MUL)


def _product(factors: list[Expr], dtype: str) -> Expr:
    return math.prod(factors[1:], start=factors[0]) if factors else const(1.0, dtype)


def _sum_of_products(red: Expr) -> bool:
    """Whether ``red`` is an unconditional float sum of one source."""
    return red.op is Op.REDUCE and red.arg.combiner.kind == "sum" and len(red.src) == 2 \
        and red.src[0] is TRUE and is_float(red.dtype)


def _split(terms: list[Expr], axes: tuple[Expr, ...]) -> tuple[list, list, tuple, tuple] | None:
    """``(left sides, right sides, left axes, right axes)`` of ``terms`` (see the module docstring)."""
    outs = set(axes)
    first = [set(free_vars(f)) & outs for f in _factors(terms[0])]
    seed = next((s for s in first if s), None)
    if seed is None:
        return None
    left = set(seed)
    grown = True
    while grown:  # the output axes read together with the seed's
        grown = False
        for s in first:
            if s & left and not s <= left:
                left |= s
                grown = True
    right = outs - left
    if not right:
        return None
    lefts, rights = [], []
    for t in terms:
        lf, rf = [], []
        for f in _factors(t):
            used = set(free_vars(f)) & outs
            if any(n.op in _UNSAFE for n in walk(f)) or (used & left and used & right):
                return None
            (rf if used & right else lf).append(f)
        lefts.append(_product(lf, t.dtype))
        rights.append(_product(rf, t.dtype))
    return lefts, rights, tuple(a for a in axes if a in left), tuple(a for a in axes if a in right)


def _sides(terms: list[Expr], axes: tuple[Expr, ...]) -> tuple[list, list, tuple, tuple] | None:
    """:func:`_split` where both sides differ between the terms."""
    found = _split(terms, axes)
    return None if found is None or len(set(found[0])) == 1 or len(set(found[1])) == 1 else found


class _Stacks:
    """The stacked sides one pass makes, by their spelling over canonical axes: equal ones are one op (the
    weight gradients of one recurrent layer stack its gates' gradient once).  A term's place in its stack
    is the position of the latest op it reads, so that sums over the same steps stack them alike."""

    def __init__(self, ops: list[ComputeOp]) -> None:
        self.position = {op: k for k, op in enumerate(ops)}
        self.canonical: dict[tuple[int, int], Expr] = {}
        self.made: dict[tuple, ComputeOp] = {}

    def spell(self, exprs: list[Expr], axes: tuple[Expr, ...]) -> tuple:
        """``(canonical axes, exprs over them)``: ``axes`` by position and extent, each from 0."""
        canon = tuple(self.canonical.setdefault((k, a.hi - a.lo), var(f"c{k}", 0, a.hi - a.lo, a.dtype))
                      for k, a in enumerate(axes))
        shift = {a: c + const(a.lo, a.dtype) if a.lo else c for a, c in zip(axes, canon)}
        return canon, tuple(substitute(x, shift) for x in exprs)

    def order(self, term: Expr) -> int:
        return max((self.position.get(n.arg.op, -1) for n in walk(term) if n.op is Op.READ), default=-1)

    def side(self, name: str, sides: list[Expr], s_axes: tuple[Expr, ...], owner: ComputeOp
             ) -> tuple[ComputeOp, bool]:
        """``(the op over (s,) + s_axes, each from 0, whose slice s computes sides[s]; whether it is new)``"""
        key = self.spell(sides, s_axes)
        canon = key[0]
        if key in self.made:
            return self.made[key], False
        s = var("s", 0, len(sides))
        fresh = tuple(var(a.name, 0, a.hi - a.lo, a.dtype) for a in s_axes)
        spelled = [substitute(x, dict(zip(canon, fresh))) for x in key[1]]
        role = Provenance(Role.SPLIT, owner.provenance.group, Tensor(owner, 0))
        op = self.made[key] = ComputeOp(name, owner.tag, (s,) + fresh, (choice_tree(s, spelled),), (), role)
        return op, True

    def drop(self, ops: list[ComputeOp]) -> None:
        """Forget ``ops`` (made for a sum left as it was)."""
        self.made = {k: op for k, op in self.made.items() if op not in ops}


def stack(red: Expr, axes: tuple[Expr, ...], owner: ComputeOp, stacks: _Stacks
          ) -> tuple[Expr, list[ComputeOp]] | None:
    """``(red as one product over a new axis, the new ops it reads)`` where ``red`` (a sum over
    ``owner``'s output ``axes``) is a sum of several products worth stacking, else ``None``."""
    if not _sum_of_products(red):
        return None
    terms = sorted(_terms(red.src[1]), key=stacks.order)
    found = _sides(terms, axes) if len(terms) >= 2 else None
    if found is None:
        return None
    lefts, rights, left_axes, right_axes = found
    rs = red.arg.axes
    m, n = box(left_axes), box(right_axes)
    if m * n < (m + n) * box(rs):
        return None
    made = [stacks.side(f"{owner.name}.stack{k}", sides, rs + side_axes, owner)
            for k, (sides, side_axes) in enumerate(((lefts, left_axes), (rights, right_axes)))]
    s = var("s", 0, len(terms))
    at = tuple(r - const(r.lo, r.dtype) if r.lo else r for r in rs)
    product = Tensor(made[0][0], 0)[(s,) + at + left_axes] * Tensor(made[1][0], 0)[(s,) + at + right_axes]
    red = Expr(Op.REDUCE, red.dtype, (TRUE, product), ReduceArg(red.arg.combiner, (s,) + rs, 0))
    return red, [op for op, new in made if new]


def _merged(body: Expr, axes: tuple[Expr, ...], sums: dict[ComputeOp, Expr]
            ) -> tuple[Expr, list[Expr], set[ComputeOp]] | None:
    """``(one sum of the terms, the other terms, the sums it merged)`` of an elementwise ``body`` that adds
    reads, at a permutation of ``axes``, of several sums in ``sums`` over equal reduction boxes; else
    ``None``."""
    merged, rest, first, used = [], [], None, set()
    for t in _terms(body):
        red = sums.get(t.arg.op) if t.op is Op.READ else None
        if red is None or len(set(t.src)) != len(t.src) or not set(t.src) <= set(axes):
            rest.append(t)
            continue
        rs = red.arg.axes
        if first is None:
            first = red
        elif [(r.lo, r.hi) for r in rs] != [(r.lo, r.hi) for r in first.arg.axes]:
            rest.append(t)
            continue
        mapping = dict(zip(t.arg.op.axes, t.src)) | dict(zip(rs, first.arg.axes))
        merged.append(substitute(red.src[1], mapping))
        used.add(t.arg.op)
    if len(merged) < 2:
        return None
    value = sum(merged[1:], merged[0])
    return Expr(Op.REDUCE, first.dtype, (TRUE, value), ReduceArg(first.arg.combiner, first.arg.axes, 0)), \
        rest, used


def stack_sums(ops: list[ComputeOp], bodies: dict, outputs: frozenset,
               check: Callable[[ComputeOp, tuple], bool]) -> list[ComputeOp]:
    """``ops`` with every sum of several products stacked (see the module docstring): the new ops before
    their reader, the sums an elementwise sum absorbed removed; ``bodies`` is updated in place;
    ``check(op, bodies)`` proves reads in bounds."""
    readers: dict[ComputeOp, int] = {}
    for op in ops:
        for t in {n.arg for b in bodies[op] for n in walk(b) if n.op is Op.READ}:
            readers[t.op] = readers.get(t.op, 0) + 1
    kept = {t.op for t in outputs}
    sums = {op: bodies[op][0] for op in ops if len(bodies[op]) == 1 and op.num_outputs == 1
            and _sum_of_products(bodies[op][0]) and readers.get(op) == 1 and op not in kept}
    out: list[ComputeOp] = []
    dropped: set[ComputeOp] = set()
    stacks = _Stacks(ops)
    for op in ops:
        if len(bodies[op]) != 1:
            out.append(op)
            continue
        body = bodies[op][0]
        if body.op is Op.REDUCE:
            done = stack(body, op.axes, op, stacks)
            if done is not None and all(check(o, o.body) for o in done[1]) and check(op, (done[0],)):
                out.extend(done[1])
                bodies.update((o, o.body) for o in done[1])
                bodies[op] = (done[0],)
            elif done is not None:
                stacks.drop(done[1])
            out.append(op)
            continue
        found = _merged(body, op.axes, sums)
        done = stack(found[0], op.axes, op, stacks) if found is not None else None
        if done is None or not all(check(o, o.body) for o in done[1]):
            stacks.drop(done[1] if done else [])
            out.append(op)
            continue
        red, rest = done[0], found[1]
        fresh = copies(op.axes)
        role = Provenance(Role.SPLIT, op.provenance.group, Tensor(op, 0))
        total = ComputeOp(f"{op.name}.stacked", op.tag, fresh, (substitute(red, dict(zip(op.axes, fresh))),),
                          (), role)
        value = Tensor(total, 0)[op.axes]
        for t in rest:
            value = value + t
        out.extend(done[1] + [total, op])
        bodies.update((o, o.body) for o in done[1] + [total])
        bodies[op] = (value,)
        dropped |= found[2]
    for op in dropped:
        bodies.pop(op, None)
    return [op for op in out if op not in dropped]


def _one_product(op: ComputeOp, bodies: dict) -> tuple[Expr, list, tuple, tuple] | None:
    """``(the sum, its sides, each side's axes)`` of an op that sums one product, else ``None``."""
    if len(bodies[op]) != 1 or not _sum_of_products(bodies[op][0]):
        return None
    red = bodies[op][0]
    found = _split([red.src[1]], op.axes) if len(list(_terms(red.src[1]))) == 1 else None
    return None if found is None else (red, [found[0][0], found[1][0]], found[2], found[3])


def _shared_groups(ops: list[ComputeOp], bodies: dict, kept: set, stacks: _Stacks) -> list[tuple]:
    """The groups of at least two sums of one product whose one side is the same, the other at least
    :data:`MIN_SAVING` times smaller: per member ``(op, its sum, its other side, that side's axes, the
    shared side)``."""
    groups: dict[tuple, list] = {}
    for op in ops:
        got = _one_product(op, bodies) if op not in kept and op.num_outputs == 1 else None
        if got is None:
            continue
        red, sides, *side_axes = got
        rs = red.arg.axes
        for k in (0, 1):
            shared, other = side_axes[k], side_axes[1 - k]
            if MIN_SAVING * box(other) > box(shared):
                continue
            spelled = stacks.spell([sides[k]], rs + shared)
            where = tuple(d for d, a in enumerate(op.axes) if any(a is b for b in shared))
            extents = tuple((a.lo, a.hi) for a in op.axes + rs)
            member = (op, red, sides[1 - k], other, sides[k])
            groups.setdefault((k, spelled, where, extents), []).append(member)
    return [members for members in groups.values() if len(members) >= 2]


def stack_shared_sides(ops: list[ComputeOp], bodies: dict, outputs: frozenset,
                       check: Callable[[ComputeOp, tuple], bool]) -> list[ComputeOp]:
    """``ops`` with each group of independent sums of one product that share one side computed as one
    product over the other sides stacked along a new axis (an unrolled recurrent layer's input
    products, ``X[t] W^T`` for every step ``t``, as one product over steps and batch); the members'
    readers read the new op; ``bodies`` is updated in place."""
    stacks = _Stacks(ops)
    kept = {t.op for t in outputs}
    tried: set[tuple[ComputeOp, ...]] = set()
    while True:  # (groups found anew after each stack: a member's sum may read one stacked before it)
        members = next((g for g in _shared_groups(ops, bodies, kept, stacks)
                        if tuple(m[0] for m in g) not in tried), None)
        if members is None:
            return ops
        tried.add(tuple(m[0] for m in members))
        first, red, _, other, shared = members[0]
        rs = red.arg.axes
        others = [substitute(side, dict(zip(op.axes, first.axes)) | dict(zip(r.arg.axes, rs)))
                  for op, r, side, *_ in members]
        side, new = stacks.side(f"{first.name}.rows", others, other + rs, first)
        fresh = copies(first.axes)
        s = var("s", 0, len(members))
        at = tuple(r - const(r.lo, r.dtype) if r.lo else r for r in rs)
        value = Tensor(side, 0)[(s,) + other + at] * shared
        body = substitute(Expr(Op.REDUCE, red.dtype, (TRUE, value), red.arg), dict(zip(first.axes, fresh)))
        role = Provenance(Role.SPLIT, first.provenance.group, Tensor(first, 0))
        whole = ComputeOp(f"{first.name}.stacked", first.tag, (s,) + fresh, (body,), (), role)
        index = {op: k for k, (op, *_) in enumerate(members)}
        remaining = [op for op in ops if op not in index]
        read = {n.arg.op for x in (side.body[0], body) for n in walk(x) if n.op is Op.READ}
        place = max((k for k, op in enumerate(remaining) if op in read), default=-1) + 1
        readers = [k for k, op in enumerate(remaining)
                   if any(n.op is Op.READ and n.arg.op in index for b in bodies[op] for n in walk(b))]
        if (readers and min(readers) < place) or not check(side, side.body) or not check(whole, (body,)):
            if new:
                stacks.drop([side])
            continue

        def reroute(node: Expr, index=index, whole=whole, dtype=s.dtype) -> Expr | None:
            k = index.get(node.arg.op)
            return None if k is None else Tensor(whole, 0)[(const(k, dtype),) + node.src]
        for op in remaining:
            bodies[op] = tuple(replace_reads(b, reroute) for b in bodies[op])
        for op in index:
            del bodies[op]
        bodies[whole] = (body,)
        bodies[side] = side.body
        ops = remaining[:place] + ([side] if new else []) + [whole] + remaining[place:]
        kept |= {side, whole}  # (made here: never stacked again)
