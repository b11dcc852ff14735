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

``provably_zero(e)`` holds when the polynomial is 0 (the proofs of one optimizer call share
the nodes they convert, by exact replay: :class:`ProofMemo`).  With a context, the cheap
checks come first: the refuter (:mod:`.refute`: a nonzero value at a point of a model in which
every step of the proof holds means "not zero") within :data:`FIRST_STEPS` node evaluations
(a question about elements other questions evaluated costs a few), then the proof within
:data:`QUICK_EXPANSIONS` (small layers' proofs finish there), then the refuter with its whole
budget, and only then the proof in full -- the same answers, by construction.  It is only
ever used to *remove* a tensor: a polynomial that grows past :data:`MAX_TERMS` or an
expansion budget means "not known to be zero".  The identities used (``(1/S) * S = 1``) hold
in real arithmetic, so the removed value is zero up to rounding for finite values (real-number
identities: at inf or NaN the removed value may have been NaN, docs/conventions.md).
"""

from __future__ import annotations

from fractions import Fraction

from tensorad.ir import dtype as dt
from tensorad.ir.expr import Expr, Op, ReduceArg, const, var
from tensorad.ir.rewrite import fold_along, replace_reads, substitute, substituter, walk
from tensorad.ir.tensor import ComputeOp
from tensorad.poly.linear import atom_key

from .logic import conjuncts
from .nonzero import assume
from .rules import simplify_expr

MAX_TERMS = 48
MAX_EXPANSIONS = 64
FIRST_STEPS = 100  # the refuter's budget before the quick proof (:func:`provably_zero`)
QUICK_EXPANSIONS = 2  # the budget of a proof tried before the refuter (:func:`_quick`)

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


def _accumulate(out: Poly, m: Mono, c: Fraction) -> None:
    """``out += c * m`` in place (``out`` is a polynomial being built, never a memoized one)."""
    v = out.get(m, Fraction(0)) + c
    if v:
        out[m] = v
    else:
        out.pop(m, None)
    if len(out) > MAX_TERMS:
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


class ProofMemo:
    """What the zero-proofs of one optimizer call share (held by the call's context).

    Proofs of one call expand the same tensors again and again (every bracket of one sum reads
    the same adjoints).  A proof's answer must not change with what was proved before, and its
    expansion budget is counted per proof, so sharing is exact *replay*: every node a
    conversion computes is kept as a :class:`_Record` -- its polynomial, what it spent of the
    budget itself (one expansion, or the reads an atom's spelling inlined) and the nodes it
    asked for, in order -- and a later proof that asks for a kept node walks the records
    instead of converting: each node not yet in its own memo spends its cost in the same
    order as the conversion would, so the budget runs out (``_TooBig``) at the same node.  An
    atom whose inlining the budget would cut short has another spelling: the proof starts
    again without replay (:class:`_Cut`), and a proof that cut an atom short keeps nothing.

    The variables of an expanded sum are made once per read node (not per expansion), and
    the positional variables once per call, so equal nodes of two proofs are one node.  A
    read is never expanded inside its own expansion (tensors form a DAG), so no variable is
    captured."""

    def __init__(self) -> None:
        self.records: dict[tuple, _Record] = {}  # (node, facts) -> its conversion
        self.instances: dict[Expr, tuple[Expr, ...]] = {}  # read of a sum -> its variables
        self.positions: dict[tuple, Expr] = {}  # (position, lo, hi) -> positional variable
        self.free: dict[Expr, frozenset] = {}  # node -> the variables under it
        self.bound: dict[tuple, Expr] = {}  # (position, lo, hi, dtype) -> a question's summed axis
        self.bodies: dict[tuple, Expr] = {}  # (read, facts) -> its producer's body there

    def closed(self, e: Expr) -> Expr:
        """``e`` with the axes of its outermost sum renamed by position and range: questions
        equal up to those axes -- a long chain's adjoint summed over a fresh axis by each
        bracket that asks -- are one node, one answer and one set of expansions.  The names
        appear only as that sum's own axes: a question that already mentions one (asked
        inside another renamed one) is kept as it is, so no name is captured."""
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

    def variables(self, e: Expr) -> frozenset:
        """The variables ``e`` mentions (memoized per node for the call)."""
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
                 budget: int | None = None) -> None:
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

    def positional(self, k: int, v: Expr) -> Expr:
        key = (k, v.lo, v.hi)
        pos = self.shared.positions
        if key not in pos:
            pos[key] = var(f"_s{k}", v.lo, v.hi)
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
        """``e`` simplified where the where-conditions of the enclosing sums hold (an
        ``if_then_else(j <= i, x, 0)`` read inside ``sum over j <= i`` is ``x``)."""
        return assume(e, self.facts, self.ctx) if self.facts else e

    def _canonical_atom(self, e: Expr) -> Expr:
        """An atom spelled one way: reads of non-reduction tensors inlined (a bounded number),
        simplified under the enclosing sums' conditions -- ``exp(scaled[i, j] - m[i])`` and
        ``exp(scores[i, j] / 8 - m[i])`` are one atom when ``scaled = scores / 8``."""
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
            if body.op is not Op.REDUCE or body.arg.combiner.kind == "sum":
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
        rename = substituter(canon)  # one walk over the terms' shared subtrees
        where = rename(cond)
        arg = ReduceArg(e.arg.combiner, tuple(canon[r] for r in rvars), 0)
        for m, c in terms.items():
            for x, _ in m:
                if x not in uses:
                    uses[x] = not bound.isdisjoint(self.shared.variables(x))
            indep = tuple((x, p) for x, p in m if not uses[x])
            dep = tuple((x, p) for x, p in m if uses[x])
            atom = Expr(Op.REDUCE, e.dtype, (where, rename(self.product(dep, e.dtype))), arg)
            _accumulate(out, _mono_mul(indep, ((atom, 1),), self.keys), c)
        return out

    def product(self, m: Mono, dtype: str) -> Expr:
        """:func:`_product_expr`, once per monomial in a conversion (sums of one source share
        their variant factors)."""
        key = (m, dtype)
        found = self.products.get(key)
        if found is None:
            found = self.products[key] = _product_expr(m, dtype, self.ctx)
        return found


def provably_zero(e: Expr, ctx=None) -> bool:
    """Whether ``e`` is identically zero as a polynomial over its atoms (see the docstring).

    Each call starts a fresh conversion (its own expansion budget), so the answer depends on
    ``e`` alone: the call's context memoizes it (the optimizer asks again about the same sums
    when it factors and when it optimizes an op; a sum is asked with its axes renamed by
    position, :meth:`ProofMemo.closed`), and the nodes other proofs of the call converted
    are replayed, not converted again, spending this proof's budget as converting them would
    (:class:`ProofMemo`)."""
    if ctx is None:
        return _prove(e, None)
    found = ctx.zero.get(e)
    if found is None:
        found = ctx.zero[e] = _prove(ctx.proofs.closed(e), ctx)
    return found


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


def _quick(e: Expr, ctx) -> bool | None:
    """The proof of ``e`` within :data:`QUICK_EXPANSIONS`: its answer when it finishes there
    without cutting an atom's inlining short (the full proof converts the same nodes in the
    same order, so it answers the same), ``None`` when it runs out -- then the refuter
    (:mod:`.refute`) with its whole budget and, if that finds no nonzero point, the full
    proof.  Most proofs of small layers finish here, cheaper than a long refutation (the
    refuter's first, short try comes before: a question about elements evaluated already)."""
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
