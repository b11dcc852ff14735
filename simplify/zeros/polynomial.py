"""Proving a sum identically zero: expressions as polynomials whose atoms include sums.

The gradient of a softmax by its row maximum is zero, but only algebra across sums shows it
(``sum_j adj_E[i, j] * -E[i, j]`` with ``adj_E = H / S + adj_S``, ``adj_S = sum_j H * -(E / S) / S``).

An expression becomes a polynomial with exact rational coefficients over *atoms*, with integer exponents:

* ``+ - * neg`` and division by a single monomial are exact polynomial arithmetic;
* a read of a non-reduction tensor is its body at the read's indices, a read of a sum that sum there (a
  bounded number of expansions);
* a sum is linear: ``sum_k (c * I * D(k)) = c * I * [sum_k D(k)]``, the bracket one atom with its
  variables renamed by position, range and nesting level, nested sums in a canonical order
  (:meth:`_Builder._domain_sum`);
* anything else (``exp``, a ``select``, a placeholder read) is an atom as it stands.

``provably_zero(e)`` holds when the polynomial is 0.  With a context the cheap checks come first: the
refuter (:mod:`.zeros.refute`) within :data:`FIRST_STEPS`, the proof within :data:`QUICK_EXPANSIONS`, the
refuter in full, a layered proof (:func:`_layered`), and the proof in full.  Past :data:`MAX_TERMS` or
the expansion budget the answer is "not known to be zero".  The identities hold in real arithmetic, so a
removed value is zero up to rounding for finite values (docs/conventions.md)."""

from __future__ import annotations

import math
from collections import deque
from fractions import Fraction

from tensorad.ir import dtype as dt
from tensorad.ir.expr import Expr, Op, ReduceArg, const, var
from tensorad.ir.rewrite import fold_along, replace_reads, substitute, substituter, walk
from tensorad.ir.tensor import ComputeOp
from tensorad.poly.linear import atom_key

from ..algebra.logic import all_of, conjuncts
from ..algebra.rules import simplify_expr
from .nonzero import assume

MAX_TERMS = 48
MAX_EXPANSIONS = 64
FIRST_STEPS = 100  # the refuter's budget before the quick proof (:func:`provably_zero`)
QUICK_EXPANSIONS = 1  # the budget of a proof tried before the refuter (:func:`_quick`)
LAYERS = 3  # the depth of the sums a layered proof expands (:func:`_layered`)

Mono = tuple[tuple[Expr, int], ...]
Poly = dict[Mono, Fraction]


class _TooBig(Exception):
    pass


def _mono_mul(a: Mono, b: Mono, keys: dict) -> Mono:
    """``a * b``, atoms in :func:`atom_key` order (``keys``: the call's memo of structural keys)."""
    d = dict(a)
    for atom, e in b:
        d[atom] = d.get(atom, 0) + e
    return tuple(sorted(((x, e) for x, e in d.items() if e), key=lambda t: atom_key(t[0], keys)))


def _add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, c in b.items():
        _accumulate(out, m, sign * c, bounded=False)
    if len(out) > MAX_TERMS:
        raise _TooBig
    return out


def _accumulate(out: Poly, m: Mono, c: Fraction, bounded: bool = True) -> None:
    """``out += c * m`` in place (``out`` is a polynomial being built, never a memoized one), within
    :data:`MAX_TERMS` where ``bounded``."""
    v = out.get(m, Fraction(0)) + c
    if v:
        out[m] = v
    else:
        out.pop(m, None)
    if bounded and len(out) > MAX_TERMS:
        raise _TooBig


def _mul(a: Poly, b: Poly, keys: dict) -> Poly:
    if len(a) * len(b) > MAX_TERMS * 4:
        raise _TooBig
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            _accumulate(out, _mono_mul(ma, mb, keys), ca * cb)
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


def _factors(e: Expr) -> list[tuple[Expr, int]]:
    """A product (:func:`_product_expr`'s) as its factors and powers: ``e`` is their product."""
    out: list[tuple[Expr, int]] = []
    stack = [(e, 1)]
    while stack:
        n, p = stack.pop()
        if n.op is Op.MUL:
            stack.extend((s, p) for s in reversed(n.src))
        elif n.op is Op.DIV:
            stack.extend(((n.src[1], -p), (n.src[0], p)))
        elif n.op is Op.POW and n.src[1].op is Op.CONST and float(n.src[1].arg).is_integer():
            stack.append((n.src[0], p * int(n.src[1].arg)))
        elif not (n.op is Op.CONST and n.arg == 1):
            out.append((n, p))
    return out


class ProofMemo:
    """What the zero-proofs of one optimizer call share (held by the call's context), by exact *replay*: a
    proof's answer must not depend on what was proved before, and its budget is per proof.  Every node a
    conversion computes is kept as a :class:`_Record` (its polynomial, what it spent of the budget, the
    nodes it asked for, in order); a later proof that asks for a kept node walks the records, spending
    each new node's cost in the conversion's order, so its budget runs out (``_TooBig``) at the same node.
    An atom whose inlining the budget would cut short has another spelling: the proof restarts without
    replay (:class:`_Cut`) and keeps nothing.  An expanded sum's variables are made once per read node and
    the positional ones once per call, so equal nodes of two proofs are one node; a read is never expanded
    inside its own expansion, so no variable is captured."""

    def __init__(self, pure: ProofMemo | None = None) -> None:
        self.records: dict[tuple, _Record] = {}  # (node, facts) -> its conversion
        self.bound: dict[tuple, Expr] = {}  # (position, lo, hi, dtype) -> a question's summed axis
        if pure is not None:  # (the tables that do not depend on what a proof expands)
            self.instances, self.positions, self.levels, self.free, self.loose, self.bodies = \
                pure.instances, pure.positions, pure.levels, pure.free, pure.loose, pure.bodies
            return
        self.instances: dict[Expr, tuple[Expr, ...]] = {}  # read of a sum -> its variables
        self.positions: dict[tuple, Expr] = {}  # (family, position, lo, hi, dtype) -> variable
        self.levels: dict[Expr, int] = {}  # a sum atom's variable -> its level (_Builder._sum_atom)
        self.free: dict[Expr, frozenset] = {}  # node -> the variables under it
        self.loose: dict[Expr, frozenset] = {}  # node -> the variables free in it
        self.bodies: dict[tuple, Expr] = {}  # (read, facts) -> its producer's body there

    def closed(self, e: Expr) -> Expr:
        """``e`` with the axes of its outermost sum renamed by position and range, so that questions equal
        up to those axes are one node, one answer and one set of expansions.  A question that already
        mentions one of those names is kept as it is (no capture)."""
        if e.op is not Op.REDUCE or (self.bound and not self.variables(e).isdisjoint(self.bound.values())):
            return e
        axes = []
        for k, a in enumerate(e.arg.axes):
            key = (k, a.lo, a.hi, a.dtype)
            if key not in self.bound:
                self.bound[key] = var(f"_q{k}", a.lo, a.hi, a.dtype)
            axes.append(self.bound[key])
        rename = substituter(dict(zip(e.arg.axes, axes)))
        return Expr(Op.REDUCE, e.dtype, tuple(rename(s) for s in e.src),
                    ReduceArg(e.arg.combiner, tuple(axes), e.arg.value_index))

    def unbound(self, e: Expr) -> frozenset:
        """The variables ``e`` mentions outside the sums that bind them (memoized)."""
        found = self.loose.get(e)  # (most questions: a node met before, no walk to start)
        if found is not None:
            return found

        def visit(n: Expr) -> frozenset:
            if n.op is Op.VAR:
                return frozenset((n,))
            out = frozenset().union(*(self.loose[c] for c in n.src))
            return out.difference(n.arg.axes) if n.op is Op.REDUCE else out

        return fold_along(e, lambda n: n.src, visit, self.loose)

    def variables(self, e: Expr) -> frozenset:
        """The variables ``e`` mentions (memoized per node for the call)."""
        found = self.free.get(e)
        if found is not None:
            return found

        def visit(n: Expr) -> frozenset:
            if n.op is Op.VAR:
                return frozenset((n,))
            if not n.src:
                return frozenset()
            if len(n.src) == 1:
                return self.free[n.src[0]]
            return frozenset().union(*(self.free[c] for c in n.src))

        return fold_along(e, lambda n: n.src, visit, self.free)


class _Record:
    __slots__ = ("poly", "cost", "atom", "asked")

    def __init__(self, poly: Poly, cost: int, atom: bool, asked: list) -> None:
        self.poly = poly  # the node's polynomial
        self.cost = cost  # expansions it spent itself: 1 (a read), or the reads an atom inlined
        self.atom = atom  # the cost is an atom's inlining (bounded: never raises)
        self.asked = asked  # the (node, facts) keys it converted or found, in order


class _Cut(Exception):
    """A replayed atom would have been spelled differently (its inlining cut by the budget)."""


class _Builder:
    """One conversion: memo per node, a budget of tensor expansions (see :class:`ProofMemo`
    for what is shared with the other proofs of the call; ``replay=False``: nothing read)."""

    def __init__(self, ctx=None, shared: ProofMemo | None = None, replay: bool = True,
                 budget: int | None = None, depths: dict | None = None) -> None:
        self.memo: dict[tuple, Poly] = {}
        self.expansions = 0
        self.budget = MAX_EXPANSIONS if budget is None else budget
        self.ctx = ctx
        self.keys: dict = {} if ctx is None else ctx.keys  # node -> structural key (atom_key)
        self.shared = ProofMemo() if shared is None else shared
        self.replay = replay
        self.cut = False  # an atom's inlining was cut by the budget: keep no more records
        self.facts: list[Expr] = []  # conjuncts of the enclosing sums' where-conditions
        self.products: dict[tuple, Expr] = {}  # (monomial, dtype) -> its product, simplified
        self.frames: list[list] = []  # per node being converted: [cost, atom, asked keys]
        self.depths = depths  # sum tensors expanded (others are atoms); None: every one
        self.renamers: dict[tuple, tuple] = {}  # (variables, level) -> (renaming, nodes renamed)

    def positional(self, k: int, v: Expr, prefix: str = "_s") -> Expr:
        """The call's variable for position ``k`` of range ``v``'s in the family ``prefix``."""
        key = (prefix, k, v.lo, v.hi, v.dtype)
        pos = self.shared.positions
        if key not in pos:
            pos[key] = var(f"{prefix}{k}", v.lo, v.hi, v.dtype)
        return pos[key]

    def poly(self, e: Expr) -> Poly:
        key = (e, tuple(self.facts))  # a node means what the facts around it allow
        if self.frames:
            self.frames[-1][2].append(key)
        found = self.memo.get(key)
        if found is not None:
            return found
        if self.replay and key in self.shared.records:
            return self._replay(key)
        frame: list = [0, False, []]
        self.frames.append(frame)
        try:
            found = self.memo[key] = self._poly(e)
        finally:
            self.frames.pop()
        if not self.cut:
            self.shared.records[key] = _Record(found, frame[0], frame[1], frame[2])
        return found

    def _replay(self, key: tuple) -> Poly:
        """The kept conversion of ``key``, spending the budget as converting it would."""
        records, memo = self.shared.records, self.memo
        stack = [(key, False)]
        while stack:
            k, done = stack.pop()
            rec = records[k]
            if done:
                memo[k] = rec.poly
                continue
            if k in memo:
                continue
            if rec.atom:
                if self.expansions + rec.cost > self.budget:
                    raise _Cut
                self.expansions += rec.cost
            elif rec.cost:
                self.expansions += 1
                if self.expansions > self.budget:
                    raise _TooBig
            stack.append((k, True))
            stack.extend((c, False) for c in reversed(rec.asked))
        return memo[key]

    def _under_facts(self, e: Expr) -> Expr:
        """``e`` simplified where the where-conditions of the enclosing sums hold."""
        return assume(e, self.facts, self.ctx) if self.facts else e

    def _canonical_atom(self, e: Expr) -> Expr:
        """An atom spelled one way: non-reduction reads inlined (bounded), simplified under its sums."""
        def inline(node: Expr) -> Expr | None:
            t = node.arg
            if not isinstance(t.op, ComputeOp) or t.op.num_outputs != 1 or t.op.is_reduction:
                return None
            if self.expansions >= self.budget:
                self.cut = True
                return None
            self.expansions += 1
            if self.frames:
                self.frames[-1][0] += 1
                self.frames[-1][1] = True
            return substitute(t.op.body[0], dict(zip(t.op.axes, node.src)))

        if e.op is Op.REDUCE or not any(n.op is Op.READ for n in walk(e)):
            return self._under_facts(e)
        return self._under_facts(simplify_expr(replace_reads(e, inline), self.ctx))

    def _expand(self) -> None:
        self.expansions += 1
        if self.frames:
            self.frames[-1][0] = 1
        if self.expansions > self.budget:
            raise _TooBig

    def _instance_vars(self, e: Expr, rvars: tuple[Expr, ...]) -> tuple[Expr, ...]:
        """The variables of the sum ``e`` (a read) expands to: one set per read node."""
        inst = self.shared.instances
        found = inst.get(e)
        if found is None:
            found = inst[e] = tuple(var(r.name, r.lo, r.hi) for r in rvars)
        return found

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
            if body.op is not Op.REDUCE or (body.arg.combiner.kind == "sum" and (
                    self.depths is None or t in self.depths)):
                self._expand()
                mapping = dict(zip(t.op.axes, e.src))
                if body.op is Op.REDUCE:
                    fresh = dict(zip(body.arg.axes, self._instance_vars(e, body.arg.axes)))
                    inst = Expr(Op.REDUCE, body.dtype,
                                tuple(substitute(s, mapping | fresh) for s in body.src),
                                ReduceArg(body.arg.combiner, tuple(fresh.values()), 0))
                    return self.poly(inst)
                key = (e, tuple(self.facts))
                found = self.shared.bodies.get(key)
                if found is None:  # (pure: proofs of one call expand the same reads again)
                    found = self.shared.bodies[key] = \
                        self._under_facts(simplify_expr(substitute(body, mapping), self.ctx))
                return self.poly(found)
        if op is Op.REDUCE and e.arg.combiner.kind == "sum" and len(e.src) == 2:
            return self._sum(e)
        if op is Op.IF_THEN_ELSE or op is Op.SELECT:
            known = self._under_facts(e)
            if known is not e:
                return self.poly(known)
        return _atom(self._canonical_atom(e))

    def _sum(self, e: Expr) -> Poly:
        """``sum_k where c of P``: factors free of ``k`` move out, the rest is one :meth:`_domain_sum`."""
        cond, src = e.src
        rvars = e.arg.axes
        bound = set(rvars)
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
                    uses[x] = not bound.isdisjoint(self.shared.variables(x))
            indep = tuple((x, p) for x, p in m if not uses[x])
            dep = tuple((x, p) for x, p in m if uses[x])
            sums = self._domain_sum(list(rvars), list(facts), dep, e)
            _accumulate(out, _mono_mul(indep, sums, self.keys), c)
        return out

    def _domain_sum(self, vs: list[Expr], conds: list[Expr], dep: Mono, e: Expr) -> Mono:
        """``sum over vs where conds of dep`` as a product of sum atoms (Fubini's exchange).  A finite sum
        over a polyhedral domain may be taken in any order, each condition travelling with the innermost
        sum that mentions its variable.  So the nested sums among ``dep`` are first flattened into one
        domain, then the variables are summed innermost first, the one the fewest factors mention first
        (ties: by what they are), each as an atom ``[sum_v where C_v of F_v]`` over the factors and
        conditions that mention it: ``sum_{n} sum_{q >= n} g(q) e(q, n) / S(q)^2`` becomes
        ``sum_{q} g(q) [sum_{n <= q} e(q, n)] / S(q)^2``, whose bracket is ``S(q)``'s expansion, and
        cancels.  Variables every factor mentions stay one atom; factors no variable mentions move out."""
        f: dict[Expr, int] = dict(dep)
        outer = set(vs)
        pending = [x for x, p in dep if p == 1 and self._is_sum(x)]
        if not pending and len(vs) == 1:  # (one variable, which every factor mentions)
            return ((self._sum_atom(vs, conds, dep, e), 1),)
        while pending:  # flatten the nested sums over the domain's variables
            x = pending.pop(0)
            if f.get(x) != 1 or outer.isdisjoint(self.shared.unbound(x)):
                continue
            del f[x]
            # (a new sum's names are a level no sum inside binds: no free variable under it has one)
            axes = [self.positional(len(vs) + k, a, "_t") for k, a in enumerate(x.arg.axes)]
            mapping, memo = dict(zip(x.arg.axes, axes)), {}
            vs.extend(axes)
            outer.update(axes)
            conds.extend(self.rename(c, mapping, memo) for c in conjuncts(x.src[0]))
            for y, p in _factors(x.src[1]):
                y = self.rename(y, mapping, memo)
                f[y] = f.get(y, 0) + p
                if not f[y]:
                    del f[y]
                elif f[y] == 1 and self._is_sum(y):
                    pending.append(y)
        out: Mono = ()
        blank = None  # (variables -> one placeholder per range, nodes renamed, keys)
        while True:
            mentions = {x: self.shared.unbound(x) for x in f}
            free = tuple((x, p) for x, p in f.items() if outer.isdisjoint(mentions[x]))
            out = _mono_mul(out, free, self.keys)
            for x, _ in free:
                del f[x]
            if len(vs) <= 1:
                break
            per = {v: [x for x in f if v in mentions[x]] for v in vs}
            inner = [v for v in vs if 0 < len(per[v]) < len(f)]
            if not inner:
                break
            fewest = min(len(per[v]) for v in inner)
            inner = [v for v in inner if len(per[v]) == fewest]
            if len(inner) > 1:
                if blank is None:
                    blank = ({w: self.positional(0, w, "_x") for w in vs}, {}, {})
                inner.sort(key=lambda v: self._shape(v, conds, {x: f[x] for x in per[v]}, blank))
            v = inner[0]
            cv = [c for c in conds if v in self.shared.unbound(c)]
            conds = [c for c in conds if not any(c is d for d in cv)]
            atom = self._sum_atom([v], cv, tuple((x, f.pop(x)) for x in per[v]), e)
            f[atom] = f.get(atom, 0) + 1
            if not f[atom]:
                del f[atom]
            vs = [w for w in vs if w is not v]
            outer.discard(v)
        if vs:  # (no factor left: a count of the domain's points)
            out = _mono_mul(out, ((self._sum_atom(vs, conds, tuple(f.items()), e), 1),), self.keys)
        return out

    def _shape(self, v: Expr, conds: list[Expr], factors: dict, blank: tuple) -> tuple:
        """A key of summing ``v`` first that names no variable of the domain (the factors, powers and
        conditions that mention ``v``, each variable one placeholder per range): alike in any order."""
        mapping, memo, keys = blank
        out = []
        for x, p in factors.items():
            k = keys.get(x)
            if k is None:
                k = keys[x] = atom_key(self.rename(x, mapping, memo), self.keys)
            out.append((k, p))
        own = mapping | {v: self.positional(0, v, "_v")}
        mine: dict = {}
        out.extend((atom_key(self.rename(c, own, mine), self.keys), 0)
                   for c in conds if v in self.shared.unbound(c))
        return tuple(sorted(out))

    def rename(self, e: Expr, mapping: dict, memo: dict) -> Expr:
        """``e`` with the free occurrences of ``mapping``'s variables replaced (a sum that binds one keeps
        it), rebuilding only the nodes that mention one (``memo``, shared by the calls with one mapping);
        the new names are temporaries or a level no sum inside binds."""
        keys, free = mapping.keys(), self.shared.free
        if keys.isdisjoint(self.shared.variables(e)):  # (and every node under e is in free)
            return e
        stack = [e]
        while stack:
            n = stack[-1]
            if n in memo:
                stack.pop()
                continue
            if n in mapping:
                memo[n] = mapping[n]
                stack.pop()
                continue
            if n.op is Op.REDUCE and not keys.isdisjoint(n.arg.axes):
                bound = frozenset(n.arg.axes)
                inner = {k: v for k, v in mapping.items() if k not in bound}
                memo[n] = n.replace(src=tuple(self.rename(c, inner, {}) for c in n.src)) if inner else n
                stack.pop()
                continue
            todo = [c for c in n.src if c not in memo and not keys.isdisjoint(free[c])]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            memo[n] = n.replace(src=tuple(memo.get(c, c) for c in n.src))
        return memo[e]

    def _is_sum(self, x: Expr) -> bool:
        return x.op is Op.REDUCE and len(x.src) == 2 and x.arg.combiner.kind == "sum"

    def _sum_atom(self, vs: list[Expr], conds: list[Expr], m: Mono, e: Expr) -> Expr:
        """``[sum over vs where conds of m]``, its variables named by position, range and level (above the
        highest named inside): equal sums are one atom, no name captured."""
        named = self.shared.levels
        level = 1 + max((named.get(y, 0) for x, _ in m for y in self.shared.variables(x)), default=0)
        names = [self.positional(k, v, f"_s{level}_") for k, v in enumerate(vs)]
        named.update(dict.fromkeys(names, level))
        key = (*vs, level)
        found = self.renamers.get(key)
        if found is None:  # (one per domain: the atoms of one sum share what they rename)
            found = self.renamers[key] = (dict(zip(vs, names)), {})
        mono = _mono_mul((), tuple((self.rename(x, *found), p) for x, p in m), self.keys)
        where = all_of(self.rename(c, *found) for c in conds)
        return Expr(Op.REDUCE, e.dtype, (where, self.product(mono, e.dtype) if mono else const(1, e.dtype)),
                    ReduceArg(e.arg.combiner, tuple(names), 0))

    def product(self, m: Mono, dtype: str) -> Expr:
        """:func:`_product_expr`, once per monomial in a conversion (sums of one source share factors)."""
        key = (m, dtype)
        found = self.products.get(key)
        if found is None:
            found = self.products[key] = _product_expr(m, dtype, self.ctx)
        return found


def provably_zero(e: Expr, ctx=None) -> bool:
    """Whether ``e`` is identically zero as a polynomial over its atoms (the module docstring), with a
    budget of its own, so the answer depends on ``e`` alone; the context memoizes it
    (:meth:`ProofMemo.closed`) and replays other proofs' nodes (:class:`ProofMemo`)."""
    e = unscaled(e)
    if ctx is None:
        return _prove(e, None)
    found = ctx.zero.get(e)
    if found is None:
        found = ctx.zero[e] = _prove(ctx.proofs.closed(e), ctx)
    return found


def unscaled(e: Expr) -> Expr:
    """A float sum ``sum(c * f)``, ``sum(f * c)`` or ``sum(-f)`` (``c`` a finite nonzero constant,
    repeatedly) as ``sum(f)``, zero exactly when it is: one proof answers all.  Anything else as it is."""
    if e.op is not Op.REDUCE or len(e.src) != 2 or e.arg.combiner.kind != "sum" or not dt.is_float(e.dtype):
        return e
    body = e.src[1]
    while True:
        if body.op is Op.NEG:
            body = body.src[0]
        elif body.op is Op.MUL and (_scale(body.src[0]) or _scale(body.src[1])):
            body = body.src[1] if _scale(body.src[0]) else body.src[0]
        else:
            break
    return e if body is e.src[1] else Expr(Op.REDUCE, e.dtype, (e.src[0], body), e.arg)


def _scale(c: Expr) -> bool:
    return c.op is Op.CONST and isinstance(c.arg, (int, float)) and c.arg != 0 and math.isfinite(c.arg)


def _prove(e: Expr, ctx) -> bool:
    """:func:`provably_zero` of ``e`` as asked (the refuter, the quick proof, the full one)."""
    if ctx is not None and e in ctx.zero:
        return ctx.zero[e]
    if ctx is not None and ctx.refuter is not None:
        out = False if ctx.refuter.refutes(e, FIRST_STEPS) else None
        if out is None:
            ctx.counts["quick proof"] += 1
            out = _quick(e, ctx)
        if out is None and ctx.refuter.refutes(e):
            out = False  # (nonzero at a point of a model the proof's steps hold in)
        if out is not None:
            ctx.zero[e] = out
            return out
    if ctx is not None:
        ctx.counts["zero-proof"] += 1  # (a full proof)
    if _layered(e, ctx):
        if ctx is not None:
            ctx.zero[e] = True
        return True
    shared = ProofMemo() if ctx is None else ctx.proofs
    try:
        try:
            out = not _Builder(ctx, shared).poly(e)
        except _Cut:  # (an atom spelled otherwise: convert without replay)
            out = not _Builder(ctx, shared, replay=False).poly(e)
    except (_TooBig, ZeroDivisionError, OverflowError, ValueError):
        out = False
    if ctx is not None:
        ctx.zero[e] = out
    return out


def sum_depths(e: Expr, deepest: int, most: int, memo: dict | None = None) -> dict:
    """The sum tensors ``e`` reaches within ``deepest``, by depth (the fewest sums read on the way; ``e``'s
    own at 1), at most ``most`` visited, nearest first.  ``memo``: each body's reads, the context's."""
    memo = {} if memo is None else memo

    def reads(x: Expr) -> list:
        found = memo.get(x)
        if found is None:
            found = memo[x] = [n.arg for n in walk(x) if n.op is Op.READ
                               and isinstance(n.arg.op, ComputeOp) and n.arg.op.num_outputs == 1]
        return found

    def is_sum(t) -> bool:
        b = t.op.body[0]
        return b.op is Op.REDUCE and b.arg.combiner.kind == "sum"

    best: dict = {}
    queue = deque((int(is_sum(t)), t) for t in reads(e))
    while queue and len(best) < most:  # (0-1 breadth-first: the smallest depth first)
        d, t = queue.popleft()
        if t in best or d > deepest:
            continue
        best[t] = d
        for u in reads(t.op.body[0]):
            if u not in best:
                if is_sum(u):
                    queue.append((d + 1, u))
                else:
                    queue.appendleft((d, u))
    return {t: d for t, d in best.items() if is_sum(t)}


def _layered(e: Expr, ctx) -> bool:
    """Whether ``e`` is zero as a polynomial whose atoms include the reads of the sums deeper than
    :data:`LAYERS` (or than all but the deepest), the sums within expanded: sound for any set of expanded
    reads, and small where the reason for zero lies a few sums down."""
    depths = sum_depths(e, LAYERS + 1, 4 * MAX_EXPANSIONS, None if ctx is None else ctx.body_reads)
    layer = min(LAYERS, max(depths.values(), default=0) - 1)
    if layer < 1:
        return False
    within = frozenset(t for t, d in depths.items() if d <= layer)
    memo = ProofMemo() if ctx is None else ctx.layers.get(within)
    if memo is None:
        memo = ProofMemo(None if ctx is None else ctx.proofs)
        if ctx is not None:
            ctx.layers[within] = memo
    try:
        try:
            return not _Builder(ctx, memo, depths=within).poly(e)
        except _Cut:  # (an atom spelled otherwise: convert without replay)
            return not _Builder(ctx, memo, replay=False, depths=within).poly(e)
    except (_TooBig, ZeroDivisionError, OverflowError, ValueError):
        return False


def _quick(e: Expr, ctx) -> bool | None:
    """The proof of ``e`` within :data:`QUICK_EXPANSIONS`: its answer if it ends there, no inlining cut."""
    try:
        try:
            b = _Builder(ctx, ctx.proofs, budget=QUICK_EXPANSIONS)
            out = not b.poly(e)
        except _Cut:
            b = _Builder(ctx, ctx.proofs, replay=False, budget=QUICK_EXPANSIONS)
            out = not b.poly(e)
    except (_Cut, _TooBig):
        return None
    except (ZeroDivisionError, OverflowError, ValueError):
        return False
    return None if b.cut else out
