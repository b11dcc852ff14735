"""Factor loop-invariant terms out of sums, and share sums that are equal up to such factors.

A sum over ``k`` is linear in its source, so factors that do not mention ``k`` move out::

    sum_k (a * f(k) + b * g(k))  =  a * [sum_k f(k)] + b * [sum_k g(k)]          (linearity)
    sum_{k in box} c             =  c * |box|                                     (a count)

Brackets are tensors of the call's :class:`~.cse.OpTable`, so equal brackets (batch norm's
``[sum_k H * (X - mean)]`` in two gradients) are one tensor.

:func:`factor_sum` rewrites a sum only when that adds no pass: every bracket is a count, provably zero or
a sum the table holds, except at most one new sum (the *remainder*).  A variant factor that is itself a
sum (``mean - X``) is expanded only when that makes its brackets shared or counts (no catastrophic
cancellation).  Only *sum* reductions are touched.

``coef * [sum]`` over an empty domain is NaN when ``coef`` is inf or NaN, so the rewritten sum keeps its
domain's emptiness as a guard, ``if_then_else(exists k: cond(i, k), coef * [sum], 0)`` (none where no
domain is empty; a where-condition isl cannot represent is not rewritten)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import combinations

from tensorad.ir import dtype as dt
from tensorad.ir.expr import FALSE, TRUE, Expr, Op, ReduceArg, cast, choice, const, var
from tensorad.ir.rewrite import free_vars, reads, replace_reads, rewrite, substitute, tensor_graph, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.poly.affine import decide
from tensorad.poly.domain import IndexSet
from tensorad.poly.nesting import scan_axes

from ..algebra.logic import all_of, conjuncts
from ..algebra.rules import simplify_expr
from ..zeros.polynomial import provably_zero
from .eliminate import equation_for, split_affine

MAX_TERMS = 16  # more additive terms than this: the source is left as it is

Term = tuple[Expr, tuple[Expr, ...]]  # (invariant coefficient, variant factors)
# (free variables, bracket) -> the bracket's read over them, if the table holds it
Lookup = Callable[[Sequence[Expr], Expr], Expr | None]
# (free variables, bracket, a lone bracket, a nested bracket) -> the read of a new tensor
Make = Callable[[Sequence[Expr], Expr, bool, bool], Expr]


class TooManyTerms(Exception):
    pass


def mentions(e: Expr, bound: frozenset) -> bool:
    return any(n in bound for n in walk(e))


def _collapse(e: Expr, bound: frozenset) -> Term:
    """A product kept whole: its invariant factors, divisors and signs are the coefficient (in the order
    :func:`scaled` applies them back), the rest its factors: ``-((X - m) / s) / s`` is ``(-(1/s))/s`` times
    ``X - m``."""
    if e.op is Op.MUL:
        (ca, fa), (cb, fb) = _collapse(e.src[0], bound), _collapse(e.src[1], bound)
        one = const(1, e.dtype)
        return (cb if ca is one else ca if cb is one else ca * cb), fa + fb
    if e.op is Op.DIV and not mentions(e.src[1], bound):
        c, f = _collapse(e.src[0], bound)
        return c / e.src[1], f
    if e.op is Op.NEG:
        c, f = _collapse(e.src[0], bound)
        return -c, f
    return (const(1, e.dtype), (e,)) if mentions(e, bound) else (e, ())


def terms(e: Expr, bound: frozenset, distribute: bool = False) -> list[Term]:
    """``e`` as ``sum(coef * prod(variant factors))``, coefficients free of ``bound``: invariant
    subexpressions are one coefficient, products and quotients by invariants move into it, ``+``, ``-``
    and negation split terms.  A product of two variant sums is distributed only with ``distribute``."""
    memo: dict[Expr, list[Term]] = {}

    def go(n: Expr) -> list[Term]:
        found = memo.get(n)
        if found is not None:
            return found
        one = const(1, n.dtype)
        if not mentions(n, bound):
            out = [(n, ())]
        elif n.op is Op.ADD:
            out = go(n.src[0]) + go(n.src[1])
        elif n.op is Op.SUB:
            out = go(n.src[0]) + [(-c, f) for c, f in go(n.src[1])]
        elif n.op is Op.NEG:
            out = [(-c, f) for c, f in go(n.src[0])]
        elif n.op is Op.MUL:
            a, b = go(n.src[0]), go(n.src[1])
            if not distribute and all(mentions(s, bound) for s in n.src):
                # a variant sum times a variant factor stays one factor (distributed, it cancels badly)
                a, b = (x if len(x) == 1 else [_collapse(s, bound)]
                        for x, s in ((a, n.src[0]), (b, n.src[1])))
            if len(a) * len(b) > MAX_TERMS:
                out = [_collapse(n, bound)]
            else:
                out = [(ca * cb, fa + fb) for ca, fa in a for cb, fb in b]
        elif n.op is Op.DIV and not mentions(n.src[1], bound):
            out = [(c / n.src[1], f) for c, f in go(n.src[0])]
        else:
            out = [(one, (n,))]
        if len(out) > MAX_TERMS:
            raise TooManyTerms
        memo[n] = out
        return out

    return go(e)


def _key(e: Expr) -> tuple:
    """A shallow deterministic order of factors (not by address, nor by a tensor's name)."""
    arg = e.arg
    if e.op is Op.READ:
        op = arg.op
        tid = ("p", op.uid) if hasattr(op, "uid") else ("c", op.provenance.group, arg.shape)
        return (e.op.value, e.dtype, tid, len(e.src))
    if e.op is Op.VAR:
        return (e.op.value, e.dtype, e.name, arg.uid)
    if e.op is Op.CONST:
        return (e.op.value, e.dtype, repr(arg))
    return (e.op.value, e.dtype, len(e.src))


def scaled(coef: Expr, t: Expr) -> Expr:
    """``coef * t`` applied the way ``coef`` was built, innermost operand first: ``(-(1/S))/S``
    times ``t`` is ``-(t/S)/S``, never ``t * (-(1/S)/S)`` -- ``1/S^2`` underflows where ``S``
    is large (a softmax of large logits), while each step of the original stays in range."""
    if coef.op is Op.DIV:
        return Expr(Op.DIV, coef.dtype, (scaled(coef.src[0], t), coef.src[1]))
    if coef.op is Op.NEG:
        return Expr(Op.NEG, coef.dtype, (scaled(coef.src[0], t),))
    if coef.op is Op.MUL:
        return scaled(coef.src[0], scaled(coef.src[1], t))
    return t if coef.op is Op.CONST and coef.arg == 1 else coef * t


def product(factors: Sequence[Expr], dtype: str) -> Expr:
    out: Expr | None = None
    for f in sorted(factors, key=_key):
        out = f if out is None else Expr(Op.MUL, dtype, (out, f))
    return const(1, dtype) if out is None else out


def like_terms(ts: list[Term]) -> dict[tuple, tuple[Expr, tuple[Expr, ...]]]:
    """Terms with equal variant factors (as a multiset) added: ``{key: (coef, factors)}``."""
    out: dict[tuple, tuple[Expr, tuple[Expr, ...]]] = {}
    for c, f in ts:
        key = tuple(sorted(f, key=_key))
        if key in out:
            c = out[key][0] + c
        out[key] = (c, key)
    return out


def _count(red: Expr) -> int | Expr | None:
    """``|box|`` of an unconditioned reduction over ``red``'s variables."""
    if red.src[0] is not TRUE:
        return None
    n = 1
    for r in red.arg.axes:
        if r.lo is None or r.hi is None:
            return None
        n *= r.hi - r.lo if decide(r.hi > r.lo) else 0
    return n


def nonempty_where(axes: Sequence[Expr], red: Expr, ctx=None) -> Expr | None:
    """Where the domain of ``red`` has a point, as a condition on ``axes`` (``TRUE``: everywhere), or
    ``None`` when isl cannot tell; only the variables the condition mentions enter the set (the memo key)."""
    cond = red.src[0]
    if cond is TRUE:
        return TRUE
    rvars, used = tuple(red.arg.axes), {n for n in walk(cond) if n.op is Op.VAR}
    if all(v in used or (v.lo is not None and v.hi is not None and decide(v.hi > v.lo))
           for v in tuple(axes) + rvars):
        axes, rvars = tuple(a for a in axes if a in used), tuple(r for r in rvars if r in used)
    key = (tuple(axes), rvars, cond)
    memo = ctx.nonempty if ctx is not None else {}
    if key in memo:
        return memo[key]
    if ctx is not None:
        ctx.counts["nonempty"] += 1
    variables = list(axes) + list(rvars)
    affine, residual = split_affine(conjuncts(cond), variables, ctx)
    if residual:
        out = None
    else:
        space = None if ctx is None else ctx.space(variables)
        onto = IndexSet.from_conditions(variables, affine, space).project_onto(axes)
        box = IndexSet.box(onto.vars, space=None if ctx is None else ctx.space(onto.vars))
        out = simplify_expr(onto.gist(box).to_cond(), ctx)
    memo[key] = out
    return out


def pointed(f: Expr, r: Expr, n: int) -> Expr | None:
    """``sum_r choice(c, a, b)`` over the ``n`` values of ``r``, ``a`` and ``b`` free of ``r``, ``c`` fixing
    ``r`` by an equation ``r == e`` (a smoothed one-hot: ``sum_q select(q == T[i], 1 - eps, eps/Q)``), as no
    pass: ``a + (n - 1) b`` where ``e`` is in range and ``c`` holds there (at ``e`` alone), else ``n b``."""
    if f.op not in (Op.SELECT, Op.IF_THEN_ELSE) or n < 1 or mentions(f.src[1], frozenset((r,))) \
            or mentions(f.src[2], frozenset((r,))):
        return None
    c, a, b = f.src
    for e in (found[1] for found in (equation_for(eq, (r,)) for eq in conjuncts(c)) if found is not None):
        hit = choice(Op.IF_THEN_ELSE, all_of([e >= r.lo, e < r.hi]), substitute(c, {r: e}), FALSE)
        once = a if n == 1 else a + b * const(float(n - 1), f.dtype)
        return Expr(Op.IF_THEN_ELSE, f.dtype, (hit, once, b * const(float(n), f.dtype)))
    return None


class _Plan:
    """The brackets of one sum: shared tensors, counts, and the terms left for the remainder."""

    def __init__(self) -> None:
        self.out: list[Expr] = []  # coef * bracket, already built
        self.rest: list[Term] = []  # terms of the remainder
        self.changed = False


def counted(red: Expr) -> Expr | None:
    """``sum_{k, r} f(k)`` with ``r`` in neither the source nor the where-condition as ``sum_k |r| f(k)``,
    or ``None`` when every variable is used, none is, or an unused one has an empty range."""
    cond, src = red.src
    rvars = red.arg.axes
    idle = [r for r in rvars if not mentions(src, frozenset((r,))) and not mentions(cond, frozenset((r,)))]
    if not idle or len(idle) == len(rvars) \
            or any(r.lo is None or r.hi is None or not decide(r.hi > r.lo) for r in idle):
        return None
    n = math.prod(r.hi - r.lo for r in idle)
    size = const(float(n), red.dtype) if isinstance(n, int) else cast(red.dtype, n)
    return Expr(Op.REDUCE, red.dtype, (cond, size * src),
                ReduceArg(red.arg.combiner, tuple(r for r in rvars if r not in idle), 0))


def factor_sum(axes: Sequence[Expr], red: Expr, lookup: Lookup, make: Make, ctx=None) -> Expr | None:
    """``red`` (a sum body over ``axes``) with the variables it does not use counted (:func:`counted`)
    and invariant factors moved out of shared brackets, or ``None`` when that would not save a pass
    (see the module docstring)."""
    if red.op is not Op.REDUCE or red.arg.combiner.kind != "sum" or len(red.src) != 2 \
            or not dt.is_float(red.dtype):
        return None
    fewer = counted(red)
    if fewer is None:
        return _factor_sum(axes, red, lookup, make, ctx)
    fewer = simplify_expr(fewer, ctx)
    found = _factor_sum(axes, fewer, lookup, make, ctx) if fewer.op is Op.REDUCE else None
    return fewer if found is None else found


def _factor_sum(axes: Sequence[Expr], red: Expr, lookup: Lookup, make: Make, ctx=None) -> Expr | None:
    cond, src = red.src
    rvars = red.arg.axes
    bound, count = frozenset(rvars), _count(red)
    nonempty = nonempty_where(axes, red, ctx)
    if nonempty is None:
        return None

    def bracket(factors: tuple[Expr, ...]) -> Expr:
        return Expr(Op.REDUCE, red.dtype, (cond, product(factors, red.dtype)),
                    ReduceArg(red.arg.combiner, rvars, 0))

    def used(body: Expr, outer: Sequence[Expr] = ()) -> tuple[Expr, ...]:
        """The axes a bracket depends on (then the ``outer`` sum variables it reads): its tensor's axes."""
        free = set(walk(body))
        ax, dropped = tuple(a for a in axes if a in free), [a for a in axes if a not in free]
        # dropping only unit axes makes no smaller tensor: keep the op's own axes then
        ax = ax if any(decide(a.hi - a.lo > 1) for a in dropped) else tuple(axes)
        return ax + tuple(r for r in outer if r in free)

    def nest(coef: Expr, factors: tuple[Expr, ...]) -> Expr | None:
        """``sum_{O, I} coef a(O) f(O, I)`` as ``sum_O coef a(O) [sum_I f](O)``: factors free of the inner
        variables ``I`` move out of a bracket over the axes and ``O`` (kept only if shared:
        :func:`fold_nested`), or a bracket the table holds."""
        if len(rvars) < 2:
            return None
        seen = [frozenset(r for r in rvars if mentions(f, frozenset((r,)))) for f in factors]
        proper = [v for v in seen if v != bound]
        if proper:
            outer = frozenset().union(*proper)
            tries = [(outer, True)] if outer != bound else []
        else:
            tries = [(frozenset(sub), False) for k in range(1, len(rvars))
                     for sub in combinations(rvars, k)]
        for outer, create in tries:
            split = _nest_split(axes, red, factors, seen, outer, ctx)
            if split is None:
                continue
            inside, ovars, where = split
            free = used(inside, ovars)
            read = lookup(free, inside)
            if read is None:
                if not create:
                    continue
                read = make(free, inside, True, True)
            src = scaled(coef, product([f for f, v in zip(factors, seen) if not v & inside_vars(inside)]
                                        + [read], red.dtype))
            return Expr(Op.REDUCE, red.dtype, (where, src), ReduceArg(red.arg.combiner, ovars, 0))
        return None

    def place(coef: Expr, factors: tuple[Expr, ...], plan: _Plan) -> bool:
        """Put a group that costs no pass into ``plan``; False when it needs the remainder."""
        if not factors:
            if count is None:
                return False
            size = const(float(count), red.dtype) if isinstance(count, int) else cast(red.dtype, count)
            plan.out.append(scaled(coef, size))
            return True
        one = pointed(factors[0], rvars[0], count) if len(factors) == len(rvars) == 1 \
            and isinstance(count, int) else None
        body = bracket(factors)
        found = one if one is not None else lookup(used(body), body)
        if found is not None:
            plan.out.append(scaled(coef, found))
            return True
        return provably_zero(body, ctx)

    try:
        groups = like_terms(terms(src, bound))
    except TooManyTerms:
        return None
    plan = _Plan()
    for coef, factors in groups.values():
        if place(coef, factors, plan):
            plan.changed = True
            continue
        if any(f.op in (Op.ADD, Op.SUB) for f in factors):
            try:
                sub = like_terms(terms(product(factors, red.dtype), bound, distribute=True))
            except TooManyTerms:
                sub = {}
            trial = _Plan()
            if len(sub) > 1 and all(place(coef * c, f, trial) for c, f in sub.values()):
                plan.out += trial.out
                plan.changed = True
                continue
        plan.rest.append((coef, factors))
    if len(plan.rest) > 1:
        plan.rest = _shared_coefficients(plan.rest, plan, place, red.dtype)
    if len(plan.rest) == 1:
        coef, factors = plan.rest[0]
        if not plan.changed:
            nested = nest(coef, factors)
            if nested is not None:
                return Expr(Op.REDUCE, nested.dtype, tuple(simplify_expr(s, ctx) for s in nested.src),
                            nested.arg)
        body = bracket(factors)
        ax = used(body)
        if not plan.changed and ax == tuple(axes) and simplify_expr(coef, ctx).op is Op.CONST:
            return None  # a constant factor: moving it out shares nothing new
        plan.out.append(scaled(coef, make(ax, body, not plan.changed, False)))
    elif plan.rest:
        if not plan.changed:
            return None
        first, *others = [coef * product(factors, red.dtype) for coef, factors in plan.rest]
        body = Expr(Op.REDUCE, red.dtype, (cond, sum(others, first)), ReduceArg(red.arg.combiner, rvars, 0))
        ax = used(body)
        plan.out.append(make(ax, body, False, False))
    if not plan.out:
        return const(0, red.dtype)
    total = sum(plan.out[1:], plan.out[0])
    if nonempty is not TRUE:
        total = Expr(Op.IF_THEN_ELSE, red.dtype, (nonempty, total, const(0, red.dtype)))
    return simplify_expr(total, ctx)


def _shared_coefficients(rest: list[Term], plan: _Plan, place, dtype: str) -> list[Term]:
    """``rest`` with the terms of one coefficient whose variant parts, added, make a bracket that costs no
    pass (``place``) moved into ``plan``: ``sum_k (a X[k] + a R[k])`` is ``a [sum_k (X[k] + R[k])]``, the
    forward's own sum in a residual layer norm.  Not for a constant coefficient."""
    by_coef: dict[Expr, list[Term]] = {}
    for coef, factors in rest:
        by_coef.setdefault(coef, []).append((coef, factors))
    left: list[Term] = []
    for coef, group in by_coef.items():
        if len(group) > 1 and coef.op is not Op.CONST:
            first, *others = [product(factors, dtype) for _, factors in group]
            if place(coef, (sum(others, first),), plan):
                plan.changed = True
                continue
        left.extend(group)
    return left


def is_sum_op(op: object) -> bool:
    """A single-output compute op whose body is a sum reduction."""
    return isinstance(op, ComputeOp) and op.num_outputs == 1 and op.is_reduction \
        and op.body[0].arg.combiner.kind == "sum"


def _folded(node: Expr, brackets: set) -> Expr | None:
    """``coef * T[i]`` (or ``T[i] / coef``, ``-T[i]``) for a bracket ``T`` read once, as
    ``T'[i]`` with ``T' = sum coef' * f`` (the innermost step of :func:`scaled` moves back in).
    A divisor moves in only to a sum of the kernel's inputs alone, which shares the row's loop
    through it; elsewhere it stays out, one division a row instead of one a point."""
    if node.op not in (Op.MUL, Op.DIV, Op.NEG):
        return None
    for k in ((0, 1) if node.op is Op.MUL else (0,)):
        read = node.src[k]
        coef = node.src[1 - k] if node.op is not Op.NEG else const(-1, node.dtype)
        if read.op is not Op.READ or read.arg.op not in brackets:
            continue
        op: ComputeOp = read.arg.op
        idx = read.src
        if any(i.op is not Op.VAR for i in idx) or len(set(idx)) != len(idx) \
                or any(n.op is Op.VAR and n.lo is not None and n not in idx for n in walk(coef)) \
                or any(n.op is Op.REDUCE for n in walk(coef)):
            continue
        red = op.body[0]
        if node.op is Op.DIV and any(not t.is_placeholder for t in reads(red)):
            continue  # divided once a row, not once a point, where the sum shares the row anyway
        moved = substitute(coef, dict(zip(idx, op.axes)))
        if breaks_scan(op.axes, red, moved):
            continue
        src = red.src[1] / moved if node.op is Op.DIV else -red.src[1] if node.op is Op.NEG \
            else moved * red.src[1]
        body = Expr(Op.REDUCE, red.dtype, (red.src[0], src), red.arg)
        new = ComputeOp(op.name, op.tag, op.axes, (body,), op.attrs, op.provenance)
        return Tensor(new, 0)[idx]
    return None


def _renamed(body: Expr, axes: Sequence[Expr], brackets: set) -> Expr:
    """A body that is only a read of a bracket read once, at its own axes in another order
    (``T[c, b, a]``), or that read where a condition holds and 0 elsewhere, as the bracket's sum
    over those axes, the condition joining its where-condition (a sum over no terms is 0): the sum
    written where it is read, not summed in another layout and copied."""
    guard, read = None, body
    if body.op is Op.IF_THEN_ELSE and body.src[2].op is Op.CONST and body.src[2].value == 0:
        guard, read = body.src[0], body.src[1]
    if read.op is not Op.READ or read.arg.op not in brackets or set(read.src) != set(axes) \
            or len(read.src) != len(axes):
        return body
    red, m = read.arg.op.body[0], dict(zip(read.arg.op.axes, read.src))
    cond, *src = (substitute(x, m) for x in red.src)
    if guard is not None:
        cond = guard if cond.op is Op.CONST and cond.value else Expr(Op.AND, cond.dtype, (guard, cond))
    return Expr(Op.REDUCE, red.dtype, (cond, *src), red.arg)


def breaks_scan(axes: Sequence[Expr], red: Expr, coef: Expr) -> bool:
    """Whether ``coef``, moved into the sum ``red`` over ``axes``, reads an axis along which the sum is a
    scan (:func:`tensorad.poly.nesting.scan_axes`): ``[sum_{i >= k} H[i]] / D[k]`` is about ``n`` terms,
    ``sum_{i >= k} H[i] / D[k]`` ``n (n + 1) / 2``."""
    used = set(free_vars(coef))
    return any(a in used for a in scan_axes(axes, red.arg.axes, red.src[0], red.src[1:]))


def fold_unshared(outputs: Sequence[Tensor], brackets: set) -> list[Tensor]:
    """``outputs`` with every bracket read exactly once folded back into its sum, ``coef * [sum_k f]`` as
    ``sum_k coef * f``, unless ``coef`` reads an axis the bracket scans along (:func:`breaks_scan`)."""
    def bodies(op: ComputeOp, once: set, read) -> tuple[Expr, ...]:
        folded: set = set()  # the brackets made here, each read once, by this op

        def fold(node: Expr) -> Expr | None:
            made = _folded(node, once)
            if made is not None:
                folded.add(made.arg.op)
            return made

        table = dict.fromkeys((Op.MUL, Op.DIV, Op.NEG), fold)
        own = op.body if len(op.body) != 1 else (_renamed(op.body[0], op.axes, once),)
        made = tuple(rewrite(replace_reads(b, read), table) for b in own)
        return made if len(made) != 1 else (_renamed(made[0], op.axes, folded),)

    return _fold_read_once(outputs, brackets, bodies)


def _fold_read_once(outputs: Sequence[Tensor], ops: set, bodies) -> list[Tensor]:
    """The graph of ``outputs`` rebuilt by ``bodies(op, once, read)``, producers first: an op's new
    bodies, given ``once`` (the ops read exactly once and not outputs) and ``read`` (the
    :func:`replace_reads` callback).  The walk :func:`fold_unshared` and :func:`fold_nested` share."""
    if not ops:
        return list(outputs)
    graph = tensor_graph(outputs)
    count = _use_counts(graph, ops)
    once = {op for op, c in count.items() if c == 1 and not any(t.op is op for t in outputs)}
    if not once:
        return list(outputs)
    new: dict[Tensor, Tensor] = {}

    def read(node: Expr) -> Expr | None:
        t = new.get(node.arg)
        return None if t is None or t is node.arg else Expr(Op.READ, node.dtype, node.src, t)

    for t in graph:
        op = t.op
        if not isinstance(op, ComputeOp) or t in new:
            continue
        made_bodies = bodies(op, once, read)
        made = op if made_bodies == op.body else ComputeOp(op.name, op.tag, op.axes, made_bodies, op.attrs,
                                                             op.provenance)
        for v in range(op.num_outputs):
            new[Tensor(op, v)] = Tensor(made, v)
    return [new.get(t, t) for t in outputs]


def _linear_in(e: Expr, read: Expr) -> bool:
    """``e`` is ``c * read`` with ``c`` free of ``read``: reached through products, numerators, negations."""
    while e is not read:
        if e.op is Op.NEG:
            e = e.src[0]
        elif e.op in (Op.MUL, Op.DIV):
            inside = [k for k, s in enumerate(e.src) if any(n is read for n in walk(s))]
            if len(inside) != 1 or (e.op is Op.DIV and inside[0] != 0):
                return False
            e = e.src[inside[0]]
        else:
            return False
    return True


def _use_counts(graph: Sequence[Tensor], ops: set) -> dict:
    count: dict = {}
    for t in graph:
        if isinstance(t.op, ComputeOp) and t.value_index == 0:
            for b in t.op.body:
                for r in [b] + [r for n in walk(b) for r in n.src]:  # each use (nodes are shared)
                    if r.op is Op.READ and r.arg.op in ops:
                        count[r.arg.op] = count.get(r.arg.op, 0) + 1
    return count


def _unnested(op: ComputeOp, inner: set) -> Expr | None:
    """``op``'s sum ``sum_O c(O) T[idx(O)]`` with ``T = sum_I f`` in ``inner`` as one sum
    ``sum_{O, I} c(O) f(idx(O), I)``, or ``None`` when the body is not of that form or ``idx`` leaves out
    an axis or a variable of ``O``: the bracket then sums ``I`` once for all of their values, which the
    folded sum would do at each."""
    red = op.body[0]
    if red.op is not Op.REDUCE or red.arg.combiner.kind != "sum" or len(red.src) != 2:
        return None
    found = [n for n in walk(red.src[1]) if n.op is Op.READ and n.arg.op in inner]
    if len(found) != 1 or not _linear_in(red.src[1], found[0]) \
            or any(n.op is Op.READ and n.arg.op in inner for n in walk(red.src[0])):
        return None
    read = found[0]
    if not _reads_everywhere(read, op.axes + red.arg.axes):
        return None
    t_op: ComputeOp = read.arg.op
    t_red = t_op.body[0]
    if t_red.op is not Op.REDUCE or t_red.arg.combiner.kind != "sum" or len(t_red.src) != 2:
        return None
    fresh = {r: var(r.name, r.lo, r.hi, r.dtype) for r in t_red.arg.axes}
    m = dict(zip(t_op.axes, read.src)) | fresh
    cond, inside = substitute(t_red.src[0], m), substitute(t_red.src[1], m)
    src, both = substitute(red.src[1], {read: inside}), all_of(conjuncts(red.src[0]) + conjuncts(cond))
    return Expr(Op.REDUCE, red.dtype, (both, src),
                ReduceArg(red.arg.combiner, red.arg.axes + tuple(fresh[r] for r in t_red.arg.axes), 0))


def _reads_everywhere(read: Expr, variables: Sequence[Expr]) -> bool:
    """Whether the indices of ``read`` mention each of ``variables`` with more than one value."""
    used = {id(v) for i in read.src for v in free_vars(i)}
    return all(id(v) in used for v in variables if not decide(v.hi - v.lo <= 1))


def fold_nested(outputs: Sequence[Tensor], nested: set) -> list[Tensor]:
    """``outputs`` with every nested bracket read exactly once folded back into its sum
    (``sum_O c [sum_I f]`` is ``sum_{O, I} c f``), unless another sum shares it."""
    def bodies(op: ComputeOp, once: set, read) -> tuple[Expr, ...]:
        out = op.body
        if op.num_outputs == 1 and op.is_reduction:
            body = _unnested(op, once)
            if body is not None:
                out = (body,)
        return tuple(replace_reads(b, read) for b in out)

    return _fold_read_once(outputs, nested, bodies)


def one_term(red: Expr) -> tuple[Expr, list[Expr]] | None:
    """``(coef, factors)`` of a sum ``red`` whose summand is one product term (``coef`` free of the
    summed variables), or ``None``."""
    try:
        groups = list(like_terms(terms(red.src[1], frozenset(red.arg.axes))).values())
    except TooManyTerms:
        return None
    return groups[0] if len(groups) == 1 else None


def nested_share(axes: Sequence[Expr], red: Expr, lookup: Lookup, ctx=None) -> Expr | None:
    """``red`` (a sum of one term) as ``sum_O c [sum_I f]`` over a bracket the table holds, or
    ``None``.  For the sums optimized before the bracket was made (:meth:`.program.Optimizer.finish`)."""
    if red.op is not Op.REDUCE or red.arg.combiner.kind != "sum" or len(red.src) != 2 \
            or len(red.arg.axes) < 2 or not dt.is_float(red.dtype):
        return None
    rvars, found = red.arg.axes, one_term(red)
    if found is None or not found[1]:
        return None
    coef, factors = found
    seen = [frozenset(r for r in rvars if mentions(f, frozenset((r,)))) for f in factors]
    for k in range(len(rvars) - 1, 0, -1):
        for sub in combinations(rvars, k):
            split = _nest_split(axes, red, factors, seen, frozenset(sub), ctx)
            if split is None:
                continue
            inside, ovars, where = split
            free = set(walk(inside))
            found = lookup(tuple(a for a in axes if a in free) + tuple(r for r in ovars if r in free),
                           inside)
            if found is None:
                continue
            inner = inside_vars(inside)
            src = scaled(coef, product([f for f, v in zip(factors, seen) if not v & inner] + [found],
                                        red.dtype))
            return Expr(Op.REDUCE, red.dtype, (where, simplify_expr(src, ctx)),
                        ReduceArg(red.arg.combiner, ovars, 0))
    return None


def inside_vars(inside: Expr) -> frozenset:
    """The variables of an inner bracket's sum."""
    return frozenset(inside.arg.axes)


def _nest_split(axes: Sequence[Expr], red: Expr, factors: Sequence[Expr], seen: Sequence[frozenset],
                outer: frozenset, ctx=None) -> tuple[Expr, tuple[Expr, ...], Expr] | None:
    """``(inner bracket, outer variables, outer where)`` of ``red`` nested over ``outer``: the bracket sums
    the factors using an inner variable under every conjunct, the outer sum runs where the inner domain
    has a point; ``None`` when isl cannot tell."""
    rvars = red.arg.axes
    inner, cs = frozenset(r for r in rvars if r not in outer), conjuncts(red.src[0])
    # the bracket keeps the outer conjuncts too: they keep its reads in bounds
    inside = Expr(Op.REDUCE, red.dtype,
                  (all_of(cs),
                   product([f for f, v in zip(factors, seen) if v & inner], red.dtype)),
                  ReduceArg(red.arg.combiner, tuple(r for r in rvars if r in inner), 0))
    ovars = tuple(r for r in rvars if r in outer)
    nonempty = nonempty_where(tuple(axes) + ovars, inside, ctx)
    if nonempty is None:
        return None
    where = all_of([c for c in cs if not mentions(c, inner)]
                   + ([] if nonempty is TRUE else [nonempty]))
    return inside, ovars, where
