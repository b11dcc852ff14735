"""Axes read through floor division or modulo are scanned as loops over their digits.

A body that reads ``H[y // 2, x // 2]`` or ``X[i // 500, (i // 25) % 20, i % 25]`` computes divisions per
element and vectorizes into gathers.  Mixed-radix digits turn the arithmetic into loop structure (``for x:
G[x] = H[x // 2]`` becomes ``for q: for r in range(2): G[2 q + r] = H[q]``).  The divisors of one axis must
form a chain (``25 | 500``).  The digits are scanned in the axis's place, most significant first (the order of
the points is unchanged); an extent the largest divisor does not divide gets ``2 q + r < extent``."""

from __future__ import annotations

from dataclasses import dataclass

from tensorad.simplify.algebra.index import floordiv_rule, mod_rule, normalise_linear

from tensorad.ir.expr import Expr, Op, compare, const, var
from tensorad.ir.rewrite import rewrite, substitute, walk

MAX_INNER = 64  # longer inner digits gain nothing over the plain loop
MAX_TAILS = 2  # axes whose last digit value is scanned apart (2**n statement pieces)


@dataclass(frozen=True)
class AxisSplit:
    """Statement variables after splitting, and how the original axes are written in them."""

    vars: tuple[Expr, ...]  # the new variables, in scan order
    value: dict  # original axis -> expression of the new variables
    constraints: tuple[Expr, ...]  # conditions that keep the digits inside the original extents
    digit_of: dict  # new variable -> its value in the original axes (``x.q -> x // 2``)
    remainders: tuple[Expr, ...]  # the digits below the most significant one
    tops: tuple[Expr, ...] = ()  # per constraint: the most significant digit it bounds
    merged: tuple = ()  # pairs of axes scanned as one variable (:mod:`.loops.coalesce`)

    @property
    def note(self) -> str:
        """What the split does, for the nest's header."""
        digits = len(self.value) > 2 * len(self.merged)  # (each merged pair maps two axes)
        parts = ["axes split into digits of their divisors"] if digits else []
        parts += [f"{a.name}, {b.name} scanned as one loop" for a, b in self.merged]
        return "; ".join(parts)

    def apply(self, e: Expr) -> Expr:
        """``e`` in terms of the new variables, divisions and remainders simplified."""
        return simplify_index(substitute(e, self.value))

    def pieces(self, space) -> list:
        """The split box as isl sets: where the divisor does not divide the extent, the top digit's last
        value is a piece of its own, so that isl scans the rest with constant inner bounds."""
        box = space.box()
        for c in self.constraints:
            box = box.intersect(space.cond(c))
        out = [box]
        if len(self.constraints) > MAX_TAILS:
            return out
        for q in self.tops:
            last = const(q.hi - 1, q.dtype)
            full = space.cond(compare(Op.LT, q, last))
            tail = space.cond(compare(Op.EQ, q, last))
            out = [s for p in out for s in (p.intersect(full), p.intersect(tail)) if not s.is_empty()]
        return out or [box]  # an empty domain (an axis of extent 0): one empty piece


_INDEX_RULES = {
    Op.FLOORDIV: lambda n: floordiv_rule(n, *n.src),  # (c*Q + R) // c = Q when 0 <= R < c
    Op.MOD: lambda n: mod_rule(n, *n.src),  # (c*Q + R) % c = R when 0 <= R < c
    Op.ADD: normalise_linear,  # integer linear forms collected
    Op.SUB: normalise_linear,
    Op.MUL: normalise_linear,
}


def simplify_index(e: Expr) -> Expr:
    """Integer division, modulo and linear arithmetic of ``e`` simplified by variable ranges."""
    return rewrite(e, _INDEX_RULES)


def _divisors(bodies: tuple[Expr, ...], axes: tuple[Expr, ...]) -> dict[Expr, set[int]]:
    found: dict[Expr, set[int]] = {}
    axis_set = set(axes)
    for b in bodies:
        for n in walk(b):
            if n.op in (Op.FLOORDIV, Op.MOD) and n.src[0] in axis_set:
                d = n.src[1]
                if d.op is Op.CONST and int(d.arg) > 1:
                    found.setdefault(n.src[0], set()).add(int(d.arg))
    return found


def plan_split(axes: tuple[Expr, ...], bodies: tuple[Expr, ...]) -> AxisSplit | None:
    """The digit split of ``axes`` for ``bodies``, or ``None`` when no axis qualifies."""
    divs = _divisors(bodies, axes)
    if not divs:
        return None
    new_vars: list[Expr] = []
    value: dict[Expr, Expr] = {}
    constraints: list[Expr] = []
    digit_of: dict[Expr, Expr] = {}
    remainders: list[Expr] = []
    tops: list[Expr] = []
    for ax in axes:
        ds = sorted(d for d in divs.get(ax, ()) if d < ax.extent)
        chain = all(b % a == 0 for a, b in zip(ds, ds[1:]))
        if not ds or not chain or ds[0] > MAX_INNER or ax.lo != 0:
            new_vars.append(ax)
            digit_of[ax] = ax
            continue
        radices = [ds[0]] + [b // a for a, b in zip(ds, ds[1:])]
        top = -(-ax.extent // ds[-1])
        digits = [var(f"{ax.name}.q", 0, top)]
        digits += [var(f"{ax.name}.r{k}", 0, r) for k, r in reversed(list(enumerate(radices)))]
        weights = list(reversed(ds)) + [1]
        terms = [dv if w == 1 else dv * const(w, ax.dtype) for w, dv in zip(weights, digits)]
        value[ax] = sum(terms[1:], terms[0])
        new_vars.extend(digits)
        remainders.extend(digits[1:])
        for k, (w, dv) in enumerate(zip(weights, digits)):
            q = ax if w == 1 else ax // const(w, ax.dtype)
            digit_of[dv] = q if k == 0 else q % const(dv.hi, ax.dtype)
        if ax.extent % ds[-1]:
            constraints.append(compare(Op.LT, value[ax], const(ax.extent, ax.dtype)))
            tops.append(digits[0])
    if not value:
        return None
    return AxisSplit(tuple(new_vars), value, tuple(constraints), digit_of, tuple(remainders),
                     tuple(tops))
