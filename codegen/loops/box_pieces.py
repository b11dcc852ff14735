"""An elementwise body's affine zero-guards decided per piece of its box.

A small stencil over a big output is a sum of guarded terms, each read only where its shifted index stays
inside the input (``if_then_else(1 <= y && 1 <= x, H[n, c, y - 1, x - 1] * W[c, 0, 2, 2], 0) + ...``).
The guards' sets cut the box into pieces (the interior, edges, corners), in each of which every guard is
constant, so isl scans the pieces as separate unguarded loops.  Ops that ask (:data:`GUARD_ATTR`) are cut,
and elementwise ones whose guard holds a transcendental function (:func:`guards_math`: an LSTM's gate
gradients ``if_then_else(u < 256, ... sigmoid(G[n, u]) ..., 0) + if_then_else(256 <= u < 512, ...)``, whose
lazy branches keep one loop over ``u`` scalar), into at most :data:`MAX_PIECES` pieces."""

from __future__ import annotations

import islpy as isl
from tensorad.simplify.algebra.rules import is_zero

from tensorad.ir.expr import UNARY_MATH, Expr, Op
from tensorad.ir.rewrite import substitute, walk
from tensorad.poly.affine import IndexSpace, NotAffine

GUARD_ATTR = "guard_pieces"  # an elementwise op whose guards are decided per piece
MAX_PIECES = 32  # (a 5 x 5 stencil's box: 25)


def _guards(body: Expr) -> list[Expr]:
    """The choices of ``body`` with a zero branch, in order of first appearance."""
    return [n for n in walk(body) if n.op in (Op.IF_THEN_ELSE, Op.SELECT)
            and (is_zero(n.src[1]) or is_zero(n.src[2]))]


def guards_math(body: Expr) -> bool:
    """Whether a zero-guarded choice of ``body`` holds a transcendental function or a power in its branch."""
    return any(m.op in UNARY_MATH or m.op is Op.POW
               for n in _guards(body) for m in walk(n.src[1] if is_zero(n.src[2]) else n.src[2]))


def guard_pieces(space: IndexSpace, box: isl.Set, body: Expr,
                 decide: bool = True) -> list[tuple[isl.Set, Expr]] | None:
    """``[(piece, body there)]``: ``box`` cut by the affine conditions of ``body``'s zero-guarded choices,
    each decided in each piece (not ``decide``: ``body`` as it stands, for the pieces alone); ``None`` when
    nothing is cut or past :data:`MAX_PIECES`."""
    sets: dict[Expr, isl.Set] = {}
    for n in _guards(body):
        try:
            sets[n] = space.cond(n.src[0])
        except NotAffine:
            continue
    if not sets:
        return None
    distinct: list[isl.Set] = []
    for s in sets.values():
        if not any(s.is_equal(d) for d in distinct):
            distinct.append(s)
    pieces = [box]
    for s in distinct:
        pieces = [q for p in pieces for q in (p.intersect(s), p.subtract(s)) if not q.is_empty()]
        if len(pieces) > MAX_PIECES:
            return None
    out = []
    for p in pieces:
        decided = {}
        for n, s in sets.items() if decide else ():
            if p.is_subset(s):
                decided[n] = n.src[1]
            elif p.intersect(s).is_empty():
                decided[n] = n.src[2]
        out.append((p, substitute(body, decided) if decided else body))
    return out
