"""Two perfectly nested loops over one contiguous plane, emitted as one loop.

``for a in [0, A): for b in [0, B): body`` becomes ``for e in [0, A B): body[a := e // B,
b := e % B]`` when ``a`` and ``b`` appear in the body only as the two digits of one address
(``X[.., a, b]`` with ``X``'s rows ``B`` elements apart), which the address computation merges
back into ``e`` (:func:`.llvm_expr.recombine_digits`): no division is ever computed, and the
body reads and writes the plane as one run.

Why: LLVM fully unrolls a plane of up to a few hundred copies (its ``-O3`` size budget), and a
plane unrolled inside a loop around it leaves that loop with hundreds of memory accesses, on
which its loop-access analysis -- run by the loop vectorizer and load elimination, quadratic
in the accesses -- spends most of a build: a global average pool's gradient (a 14 x 14 plane
of stores in a loop over 256 channels) compiled in 0.31 CPU-s, of which 0.25 there (AMD EPYC).
As one loop of 196 trips the plane is vectorized as a loop instead, in a tenth of the time.

Only planes of more than ``WINDOW_COPIES`` and at most ``UNROLL_NEST_LIMIT`` points are
collapsed (the caller passes both): smaller ones -- pooling windows -- unroll cheaply and are
vectorized by the loop around them (:mod:`.chains`); larger ones are never unrolled.
"""

from __future__ import annotations

from dataclasses import replace

from tensorad.ir.expr import Expr, Op, const, var
from tensorad.ir.rewrite import free_vars, replace_reads, substitute, walk

from .llvm_expr import recombine_digits
from .program import Assign, Loop, Store


def _trips(x: Loop) -> int | None:
    if x.step != 1 or x.lo.op is not Op.CONST or int(x.lo.arg) != 0 or x.hi.op is not Op.CONST:
        return None
    return int(x.hi.arg)


def collapsed_plane(loop: Loop, strides, smallest: int, largest: int) -> Loop | None:
    """``loop`` and the one loop it holds as one loop (see the module), or ``None`` when they
    do not qualify: both serial from 0 by 1 with constant ends, ``smallest < A B <= largest``,
    the inner body only stores and accumulator updates, and every use of ``a`` or ``b`` an
    address digit pair that recombines into the new variable.  ``strides(tensor)``: a
    tensor's element strides."""
    if loop.kind != "serial" or len(loop.body) != 1 or not isinstance(loop.body[0], Loop):
        return None
    inner = loop.body[0]
    na, nb = _trips(loop), _trips(inner)
    if inner.kind != "serial" or na is None or nb is None or nb < 2 or not smallest < na * nb <= largest:
        return None
    if not all(isinstance(s, (Store, Assign)) for s in inner.body):
        return None
    a, b = loop.var, inner.var
    e = var(f"{a.name}.{b.name}", 0, na * nb, a.dtype)
    mapping = {a: e // const(nb, a.dtype), b: e % const(nb, a.dtype)}
    accesses: list[tuple] = []  # (tensor, index after substitution)
    values: list[Expr] = []
    for s in inner.body:
        if isinstance(s, Store):
            accesses.append((s.buffer.tensor, tuple(substitute(i, mapping) for i in s.index)))
            values.append(s.value)
        else:
            values.extend(s.values)
    for v in values:
        if {a, b} & set(free_vars(replace_reads(v, lambda n: const(0, n.dtype)))):
            return None  # a digit used as a value or a condition, not only as an address
        for n in walk(substitute(v, mapping)):
            if n.op is Op.READ:
                accesses.append((n.arg, n.src))
    for tensor, index in accesses:
        for term, _ in recombine_digits(tuple(index), strides(tensor)):
            if e in free_vars(term) and any(n.op in (Op.FLOORDIV, Op.MOD) and e in free_vars(n)
                                            for n in walk(term)):
                return None  # a digit not merged back into ``e``
    body = tuple(replace(s, index=tuple(substitute(i, mapping) for i in s.index),
                         value=substitute(s.value, mapping)) if isinstance(s, Store)
                 else replace(s, values=tuple(substitute(v, mapping) for v in s.values))
                 for s in inner.body)
    return Loop(e, const(0, a.dtype), const(na * nb, a.dtype), body, 1, "serial", loop.dim)
