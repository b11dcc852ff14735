"""Proving a sum identically zero: expressions as polynomials whose atoms include sums.

The gradient of a softmax by its row maximum is zero (the output does not change when every
input of a row is shifted), but symbolically it is ``sum_j adj_E[i, j] * -E[i, j]`` with
``adj_E = H / S + adj_S`` and ``adj_S = sum_j H * -(E / S) / S``: only algebra across sums
shows it -- and then the max's winner tensor and a whole pass disappear from the gradient.

An expression becomes a polynomial with exact rational coefficients over *atoms*, with
integer (also negative) exponents:

* ``+ - * neg`` and division by a single monomial are exact polynomial arithmetic;
* a read of a non-reduction tensor is its body at the read's indices; a read of a sum is that
  sum at the indices (a bounded number of expansions);
* a sum ``sum_k where c of P`` is linear: each monomial splits into the factors free of ``k``
  and the rest, and ``sum_k (c * I * D(k)) = c * I * [sum_k D(k)]`` where the bracket is one
  atom, its reduction variables renamed by position so that equal sums are equal atoms;
* anything else (``exp``, a ``select``, a placeholder read) is an atom as it stands.

``provably_zero(e)`` holds when the polynomial is 0.  It is only ever used to *remove* a
tensor: a polynomial that grows past :data:`MAX_TERMS` or an expansion budget means "not
known to be zero".  The identities used (``(1/S) * S = 1``) hold in real arithmetic, so the
removed value is zero up to rounding for finite values (real-number identities: at inf or NaN
the removed value may have been NaN, docs/conventions.md).
"""

from __future__ import annotations

from fractions import Fraction

from tensorad.ir import dtype as dt
from tensorad.ir.expr import Expr, Op, ReduceArg, const, var
from tensorad.ir.rewrite import replace_reads, substitute, walk
from tensorad.ir.tensor import ComputeOp
from tensorad.poly.linear import atom_key

from .logic import conjuncts
from .nonzero import assume
from .rules import simplify_expr

MAX_TERMS = 48
MAX_EXPANSIONS = 64

Mono = tuple[tuple[Expr, int], ...]
Poly = dict[Mono, Fraction]


class _TooBig(Exception):
    pass


def _mono_mul(a: Mono, b: Mono, keys: dict) -> Mono:
    """``a * b``, atoms in :func:`atom_key` order (``keys``: the call's memo of structural keys,
    so equal subtrees have one key object and compare by identity)."""
    d = dict(a)
    for atom, e in b:
        d[atom] = d.get(atom, 0) + e
    return tuple(sorted(((x, e) for x, e in d.items() if e), key=lambda t: atom_key(t[0], keys)))


def _add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, c in b.items():
        v = out.get(m, Fraction(0)) + sign * c
        if v:
            out[m] = v
        else:
            out.pop(m, None)
    if len(out) > MAX_TERMS:
        raise _TooBig
    return out


def _mul(a: Poly, b: Poly, keys: dict) -> Poly:
    if len(a) * len(b) > MAX_TERMS * 4:
        raise _TooBig
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            out = _add(out, {_mono_mul(ma, mb, keys): ca * cb})
    return out


def _atom(e: Expr, power: int = 1) -> Poly:
    return {((e, power),): Fraction(1)}


def _inverse(p: Poly) -> Poly | None:
    if len(p) != 1:
        return None
    (m, c), = p.items()
    return {tuple((x, -e) for x, e in m): 1 / c}


def _product_expr(m: Mono, dtype: str, ctx) -> Expr:
    out: Expr = const(1, dtype)
    for atom, e in m:
        for _ in range(abs(e)):
            out = out * atom if e > 0 else out / atom
    return simplify_expr(out, ctx)


class _Builder:
    """One conversion: memo per node, a budget of tensor expansions."""

    def __init__(self, ctx=None) -> None:
        self.memo: dict[Expr, Poly] = {}
        self.expansions = 0
        self.ctx = ctx
        self.keys: dict = {} if ctx is None else ctx.keys  # node -> structural key (atom_key)
        self.pos: dict[tuple, Expr] = {}  # reduction variables renamed by position
        self.facts: list[Expr] = []  # conjuncts of the enclosing sums' where-conditions

    def positional(self, k: int, v: Expr) -> Expr:
        key = (k, v.lo, v.hi)
        if key not in self.pos:
            self.pos[key] = var(f"_s{k}", v.lo, v.hi)
        return self.pos[key]

    def poly(self, e: Expr) -> Poly:
        key = (e, tuple(self.facts))  # a node means what the facts around it allow
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._poly(e)
        return found

    def _under_facts(self, e: Expr) -> Expr:
        """``e`` simplified where the where-conditions of the enclosing sums hold (an
        ``if_then_else(j <= i, x, 0)`` read inside ``sum over j <= i`` is ``x``)."""
        return assume(e, self.facts, self.ctx) if self.facts else e

    def _canonical_atom(self, e: Expr) -> Expr:
        """An atom spelled one way: reads of non-reduction tensors inlined (a bounded number),
        simplified under the enclosing sums' conditions -- ``exp(scaled[i, j] - m[i])`` and
        ``exp(scores[i, j] / 8 - m[i])`` are one atom when ``scaled = scores / 8``."""
        def inline(node: Expr) -> Expr | None:
            t = node.arg
            if not isinstance(t.op, ComputeOp) or t.op.num_outputs != 1 or t.op.is_reduction \
                    or self.expansions >= MAX_EXPANSIONS:
                return None
            self.expansions += 1
            return substitute(t.op.body[0], dict(zip(t.op.axes, node.src)))

        if e.op is Op.REDUCE or not any(n.op is Op.READ for n in walk(e)):
            return self._under_facts(e)
        return self._under_facts(simplify_expr(replace_reads(e, inline), self.ctx))

    def _expand(self) -> None:
        self.expansions += 1
        if self.expansions > MAX_EXPANSIONS:
            raise _TooBig

    def _poly(self, e: Expr) -> Poly:
        op = e.op
        if not dt.is_float(e.dtype):
            return _atom(e)
        if op is Op.CONST:
            return {(): Fraction(e.arg)} if e.arg else {}
        if op is Op.ADD:
            return _add(self.poly(e.src[0]), self.poly(e.src[1]))
        if op is Op.SUB:
            return _add(self.poly(e.src[0]), self.poly(e.src[1]), -1)
        if op is Op.NEG:
            return {m: -c for m, c in self.poly(e.src[0]).items()}
        if op is Op.MUL:
            return _mul(self.poly(e.src[0]), self.poly(e.src[1]), self.keys)
        if op is Op.DIV:
            num, den = self.poly(e.src[0]), self.poly(e.src[1])
            inv = _inverse(den)
            return _mul(num, inv if inv is not None else _atom(e.src[1], -1), self.keys)
        if op is Op.POW and e.src[1].op is Op.CONST and float(e.src[1].arg).is_integer() \
                and abs(e.src[1].arg) <= 4:
            n = int(e.src[1].arg)
            base = self.poly(e.src[0])
            if n < 0:
                base = _inverse(base)
                if base is None:
                    return _atom(e)
            out: Poly = {(): Fraction(1)}
            for _ in range(abs(n)):
                out = _mul(out, base, self.keys)
            return out
        if op is Op.READ and isinstance(e.arg.op, ComputeOp) and e.arg.op.num_outputs == 1:
            t = e.arg
            body = t.op.body[0]
            if body.op is not Op.REDUCE or body.arg.combiner.kind == "sum":
                self._expand()
                mapping = dict(zip(t.op.axes, e.src))
                if body.op is Op.REDUCE:
                    fresh = {r: var(r.name, r.lo, r.hi) for r in body.arg.axes}
                    inst = Expr(Op.REDUCE, body.dtype,
                                tuple(substitute(s, mapping | fresh) for s in body.src),
                                ReduceArg(body.arg.combiner, tuple(fresh.values()), 0))
                    return self.poly(inst)
                return self.poly(self._under_facts(simplify_expr(substitute(body, mapping), self.ctx)))
        if op is Op.REDUCE and e.arg.combiner.kind == "sum" and len(e.src) == 2:
            return self._sum(e)
        if op is Op.IF_THEN_ELSE or op is Op.SELECT:
            known = self._under_facts(e)
            if known is not e:
                return self.poly(known)
        return _atom(self._canonical_atom(e))

    def _sum(self, e: Expr) -> Poly:
        """``sum_k where c of P``: factors free of ``k`` move out, the rest is one atom."""
        cond, src = e.src
        rvars = e.arg.axes
        bound = set(rvars)
        canon = {r: self.positional(k, r) for k, r in enumerate(rvars)}
        out: Poly = {}
        facts = conjuncts(cond)
        self.facts.extend(facts)
        try:
            terms = self.poly(src)
        finally:
            del self.facts[len(self.facts) - len(facts):]
        uses: dict[Expr, bool] = {}  # atom -> whether it mentions a reduction variable
        for m, c in terms.items():
            for x, _ in m:
                if x not in uses:
                    uses[x] = any(n in bound for n in walk(x))
            indep = tuple((x, p) for x, p in m if not uses[x])
            dep = tuple((x, p) for x, p in m if uses[x])
            inner = substitute(_product_expr(dep, e.dtype, self.ctx), canon)
            atom = Expr(Op.REDUCE, e.dtype, (substitute(cond, canon), inner),
                        ReduceArg(e.arg.combiner, tuple(canon[r] for r in rvars), 0))
            out = _add(out, _mul({indep: c}, _atom(atom), self.keys))
        return out


def provably_zero(e: Expr, ctx=None) -> bool:
    """Whether ``e`` is identically zero as a polynomial over its atoms (see the docstring).

    Each call starts a fresh conversion (its own expansion budget), so the answer depends on
    ``e`` alone: the call's context memoizes it (the optimizer asks again about the same sums
    when it factors and when it optimizes an op)."""
    if ctx is not None and e in ctx.zero:
        return ctx.zero[e]
    try:
        out = not _Builder(ctx).poly(e)
    except (_TooBig, ZeroDivisionError, OverflowError, ValueError):
        out = False
    if ctx is not None:
        ctx.zero[e] = out
    return out
