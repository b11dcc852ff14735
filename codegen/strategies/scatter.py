"""Scatter-add: a sum whose output axis is fixed by a gather index, lowered to N*J adds.

The adjoint of a gather ``Y[i, j] = E[I[i], j]`` is ``dE[v, j] = sum_i if_then_else(data_index(I[i]) == v,
H[i, j], 0)``: ``V*N*J`` work.  The condition fixes ``v``, so it is the scatter-add ``dE = 0; for i, j:
dE[data_index(I[i]), j] += H[i, j]`` (``N*J``). :func:`match_scatter` finds every output axis ``v`` with a
conjunct ``v == d``, ``d`` a gather index expression free of ``v`` (:func:`isolate`) or an integer read from
data (a histogram's ``seg[k] == v``: clipped into the axis under its range tests); :func:`lower_scatter`
zero-fills the output and emits ``out[x/v := d] += src`` over the remaining axes, the rest of the condition as
its guard.  The adds into each element run in the order of the reduce axes, as ``ta.evaluate``'s sum.  A
body that is no sum, ``if_then_else(data_index(I[i]) == v, H[i], 0)`` (a one-hot's adjoint), is one over no
reduce axes: the fill, then one store per point ``i`` instead of a pass over every ``(i, v)``.

The same form serves a max/min/argmax gradient from its saved winner: a data-dependent test of outer
variables only is hoisted out of the inner loops (:func:`_hoist`), a leading output axis may run in
parallel, and a sum of scatter-adds read at shifted points scatters straight into its own buffer
(:func:`shifted`, the ``scatter-sum`` strategy).

A reduction by another combiner, ``max over k where seg[k] == q`` (a segment max, or a max with its tie
count, or an argmax), is the same scatter with a combine in place of the add (:func:`match_reducer_scatter`,
the same strategy): each output filled with the combiner's identity, then each point combined
into the element its index fixes, every value of a tuple stored in a :func:`.loops.schedule.store_order`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tensorad.simplify.algebra.logic import conjuncts

from tensorad.ir import dtype as dt
from tensorad.ir.expr import FALSE, TRUE, Expr, Op, choice, const, data_index
from tensorad.ir.intrange import index_bounds
from tensorad.ir.rewrite import chain, free_vars, substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor, reads_data
from tensorad.poly.affine import IndexSpace
from tensorad.poly.domain import count_bound
from tensorad.poly.linear import from_linear, solve_for, to_linear

from ..loops.domain import PolyStmt, split_condition
from ..loops.isl_ast import build_loops
from ..loops.schedule import mark_parallel, store_order
from ..loops.work import count_work
from ..program import Buffer, Fill, If, Loop, Nest, NestAttrs, Store, walk_stmts
from ..program import stores as stores_in
from ..target import parse_target
from .cost import vector_lanes
from .registry import Candidate, Plan, ScatterNest
from .zero_masks import all_of, may_fault, peel_masks


@dataclass(frozen=True, eq=False)
class ScatterSpec:
    """``out[target] += value`` over ``loop_vars`` where ``cond`` holds."""

    target: tuple[Expr, ...]  # one index per output axis (a gather expression or the axis)
    loop_vars: tuple[Expr, ...]  # reduce axes, then the output axes not fixed by a gather
    value: Expr
    cond: Expr
    guard: Expr = TRUE  # tested after ``cond``, at the point the add lands on (a ReLU's mask)
    store: bool = False  # one value per point (a body that is no sum): stored, so a -0.0 stays -0.0
    combiner: object = None  # another reduction's than a sum: ``out[target] = combine(out[target], sources)``
    sources: tuple[Expr, ...] = ()  # (the combiner's terms, one per output)


def _gathers(e: Expr) -> bool:
    return any(n.op is Op.DATA_INDEX for n in walk(e))


def isolate(a: Expr, lhs: Expr, rhs: Expr) -> Expr | None:
    """``d`` free of ``a`` with ``lhs == rhs`` exactly when ``a == d``, when ``a``'s coefficient in
    ``lhs - rhs`` is +-1 and no other atom mentions it; else ``None``."""
    if not dt.is_int(lhs.dtype):
        return None
    g = solve_for(to_linear(lhs) - to_linear(rhs), a)
    return None if g is None else from_linear(g, lhs.dtype)


def match_scatter(op: ComputeOp, bodies: tuple[Expr, ...]) -> ScatterSpec | None:
    """The scatter-add form of a one-output sum or other body, when a gather index fixes an output axis."""
    red = bodies[0] if len(bodies) == 1 else None  # (a body that is no sum: one over no axes, a one-hot's)
    if red is None or red.op is Op.REDUCE and (red.arg.combiner.kind != "sum" or len(red.src) != 2):
        return None
    where, src, raxes = (red.src[0], red.src[1], red.arg.axes) if red.op is Op.REDUCE else (TRUE, red, ())
    guards, value = peel_masks(src)  # (a conjunct under a lazy guard stays lazy)
    found = _solve(op, conjuncts(where) + guards, (value,), raxes)
    if found is None:
        return None
    target, loop_vars, (value,), cond = found
    return ScatterSpec(target, loop_vars, value, cond, store=red.op is not Op.REDUCE)


def match_reducer_scatter(op: ComputeOp, bodies: tuple[Expr, ...]) -> ScatterSpec | None:
    """The scatter form of a reduction by another combiner than a sum (a max, a winner with its tie count):
    each point combined into the element a data-given index fixes (``q = seg[k]``), the elements first
    filled with the identity; every value of the combiner in an output of its own."""
    red = bodies[0]
    if red.op is not Op.REDUCE or red.arg.combiner.kind == "sum" or len(bodies) != red.arg.combiner.arity \
            or store_order(red.arg.combiner) is None:
        return None
    for b in bodies:  # (one reduction: the same terms, axes and combiner, each value an output)
        if b.op is not Op.REDUCE or len(b.src) != len(red.src) or b.arg.axes != red.arg.axes \
                or b.arg.combiner is not red.arg.combiner or any(x is not y for x, y in zip(b.src, red.src)):
            return None
    found = _solve(op, conjuncts(red.src[0]), red.src[1:], red.arg.axes)
    if found is None:
        return None
    target, loop_vars, sources, cond = found
    return ScatterSpec(target, loop_vars, sources[0], cond, combiner=red.arg.combiner, sources=sources)


def _solve(op: ComputeOp, terms: list[Expr], values: tuple[Expr, ...], raxes: tuple[Expr, ...]):
    """``(target, loop variables, values, condition)`` with the output axes that an equation among ``terms``
    fixes to a gather index (or an integer read from data) solved, or ``None``."""
    solved: dict[Expr, Expr] = {}
    used: set[Expr] = set()
    for t in terms:
        if t.op is not Op.EQ or not _gathers(t) and not reads_data(t):
            continue
        for a in op.axes:
            if a in solved:
                continue
            d = isolate(a, t.src[0], t.src[1])
            # (a target must be an address: an integer read from data, ``seg[k] == q``, is clipped into
            # the axis where its range tests below hold)
            if d is not None and (_gathers(d) or reads_data(d)) \
                    and not any(s in free_vars(d) for s in solved):
                solved[a] = d
                used.add(t)
                break
    if not solved:
        return None
    # later solutions may mention earlier axes: substitute until no solved axis is left
    for a in list(solved):
        solved = {b: substitute(d, {a: solved[a]}) if b is not a else d for b, d in solved.items()}
    # the gather's range may exceed the axis: keep it in [0, extent)
    ranges = [test for a, d in solved.items() for test in _range_tests(d, a.hi)]
    solved = {a: data_index(d, a.hi, "clip") if reads_data(d) else d for a, d in solved.items()}
    rest = []
    for t in terms:
        if t in used:  # (true by construction once the axis is solved)
            continue
        u = substitute(t, solved)
        if u.op is Op.EQ and u.src[0] is u.src[1] and not dt.is_float(u.src[0].dtype):
            continue  # (``x == x`` is false for a float NaN: that test stays)
        if ranges and may_fault(u):  # a read at the solved axis, ``W[v] > 0``: only in range
            u = choice(Op.IF_THEN_ELSE, all_of(ranges), u, FALSE)
        rest.append(u)
    rest += ranges
    cond = all_of(rest)
    values = tuple(substitute(v, solved) for v in values)
    # output axes before every solved one run outermost; each element's adds keep the reduce axes' order
    first = min(op.axes.index(a) for a in solved)
    free = [a for a in op.axes if a not in solved]
    loop_vars = tuple(a for a in free if op.axes.index(a) < first) + tuple(raxes) \
        + tuple(a for a in free if op.axes.index(a) > first)
    if not loop_vars or any(a in free_vars(v) for v in values + (cond,) for a in solved):
        return None
    return tuple(solved.get(a, a) for a in op.axes), loop_vars, values, cond


def shifted(spec: ScatterSpec, offsets: tuple[int, ...], shape: tuple[int, ...]) -> ScatterSpec:
    """``spec`` adding into a tensor that reads the scattered one at ``[j + offsets]``: targets moved by
    ``-offsets``, only those inside ``shape`` kept."""
    target = tuple(t - c if c else t for t, c in zip(spec.target, offsets))
    cond = all_of([spec.cond] + [test for t, n in zip(target, shape) for test in _range_tests(t, n)])
    return ScatterSpec(target, spec.loop_vars, spec.value, cond, spec.guard)


def _range_tests(t: Expr, n: int) -> list[Expr]:
    """The tests ``t >= 0`` and ``t < n`` that the bounds of index ``t`` do not prove."""
    lo, hi = index_bounds(t) or (None, None)
    return ([t >= 0] if lo is None or lo < 0 else []) + ([t < n] if hi is None or hi >= n else [])


def _hoist(loop_vars: tuple[Expr, ...], cond: Expr) -> tuple[int, Expr, Expr, Expr, Expr] | None:
    """``(p, outer affine, outer test, inner affine, inner rest)``: the first split of ``loop_vars`` after
    ``p`` outer variables where a data-dependent conjunct reads only the outer ones (tested once per outer
    point), every affine conjunct on one side; else ``None``."""
    parts = conjuncts(cond)
    for p in range(1, len(loop_vars)):
        outer = set(loop_vars[:p])
        space_o, space_i = IndexSpace(loop_vars[:p]), IndexSpace(loop_vars[p:])
        sides: list[list[Expr]] = [[], [], [], []]
        ok, test = True, False
        for c in parts:
            used = set(free_vars(c))
            if used <= outer:
                affine = space_o.is_affine(c)
                sides[0 if affine else 1].append(c)
                test = test or not affine
            elif not used & outer:
                sides[2 if space_i.is_affine(c) else 3].append(c)
            elif not IndexSpace(loop_vars).is_affine(c):
                sides[3].append(c)  # (a data-dependent test of both: inside)
            else:
                ok = False  # an affine bound coupling both sides: no split here
                break
        if ok and test:
            return (p,) + tuple(all_of(s) for s in sides)  # type: ignore[return-value]
    return None


def _hoisting_order(spec: ScatterSpec) -> tuple[tuple[Expr, ...], tuple | None]:
    """The spec's loop order and its :func:`_hoist` split; when that hoists no test reading data, an order
    that does: the kept output axes such a test reads moved just after the last reduce axis it reads
    (tested once per output).  Each element's adds keep their order."""
    split = _hoist(spec.loop_vars, spec.cond)
    if split is not None and reads_data(split[2]):
        return spec.loop_vars, split
    kept = {a for a in spec.target if a.op is Op.VAR and a in spec.loop_vars}
    for c in conjuncts(spec.cond):
        read = set(free_vars(c))
        if not read <= set(spec.loop_vars) or not reads_data(c):
            continue
        reduce_read = [k for k, v in enumerate(spec.loop_vars) if v in read and v not in kept]
        last = reduce_read[-1] if reduce_read else -1
        head = spec.loop_vars[:last + 1]
        moved = tuple(v for v in spec.loop_vars[last + 1:] if v in read)
        order = head + moved + tuple(v for v in spec.loop_vars[last + 1:] if v not in read)
        moved_split = _hoist(order, spec.cond) if order != spec.loop_vars else None
        if moved_split is not None and reads_data(moved_split[2]):
            return order, moved_split
    return spec.loop_vars, split


def _guarded_stmt(name: str, variables: tuple[Expr, ...], cond: Expr, body: tuple) -> PolyStmt:
    """``body`` over the box of ``variables`` where ``cond`` holds (its affine part as the domain)."""
    space = IndexSpace(variables)
    aff, rest = split_condition(space, cond)
    if rest is not TRUE:
        body = (If(rest, body, (), affine=False),)
    return PolyStmt(name, variables, space.box().intersect(aff), body, variables)


def lower_scatter(op: ComputeOp, specs, out: Buffer | list, opts=None) -> list:
    """Zero-fill ``out``, then the nest of ``out[target] += value`` for the specs (one for all when they
    share outer loops, :func:`_fused`): serial, except over a leading axis every spec keeps, or a gather's
    columns (:func:`split_columns`); each element's adds in one order at any thread count.  A combiner's
    spec fills each of the buffers ``out`` with its identity and combines into all of them."""
    if isinstance(specs, ScatterSpec):
        specs = (specs,)
    if specs[0].combiner is not None:
        fills = [Fill(b, e) for b, e in zip(out, specs[0].combiner.identity)]
        return fills + [_scatter_nest(op, specs, [_statement(specs[0], out, "S0")], tuple(out), opts)]
    stmts = [_statement(s, out, f"S{k}") for k, s in enumerate(specs)]
    fused = _fused(stmts) if len(stmts) > 1 else None
    groups = [(specs, fused)] if fused is not None else [((s,), [st]) for s, st in zip(specs, stmts)]
    return [Fill(out, const(0, out.dtype))] + [_scatter_nest(op, ss, sts, (out,), opts) for ss, sts in groups]


def _statement(spec: ScatterSpec, out: Buffer | list, name: str) -> PolyStmt:
    """``out[target] += value`` over the spec's loops (a combiner's: each of the buffers ``out`` stored, in a
    :func:`store_order`); a data-dependent test of the outer loops only is hoisted out of the inner ones
    (:func:`_hoist`), which then form its body."""
    if spec.combiner is not None:
        comb = spec.combiner
        here = tuple(Expr(Op.READ, b.dtype, spec.target, b.tensor) for b in out)
        mapping = {**dict(zip(comb.lhs, here)), **dict(zip(comb.rhs, spec.sources))}
        body: tuple = tuple(Store(out[c], spec.target, substitute(comb.result[c], mapping))
                            for c in store_order(comb))
    else:
        here = Expr(Op.READ, out.dtype, spec.target, out.tensor)
        body = (Store(out, spec.target, spec.value if spec.store else here + spec.value),)
    if spec.guard is not TRUE:  # (inside ``cond``'s tests: it may read at the target)
        body = (If(spec.guard, body, (), affine=False),)
    variables, cond = spec.loop_vars, spec.cond
    order, split = _hoisting_order(spec)
    if split is not None:
        p, outer_aff, test, inner_aff, inner_rest = split
        inner = build_loops([_guarded_stmt("S", order[p:], all_of([inner_aff, inner_rest]), body)])
        variables, cond, body = order[:p], outer_aff, (If(test, inner, (), affine=False),)
    return _guarded_stmt(name, variables, cond, body)


def _fused(stmts: list[PolyStmt]) -> list[PolyStmt] | None:
    """The statements scheduled to share their first ``c >= 1`` loops (equal ranges in all), statement
    ``k`` after ``k - 1`` inside; ``None`` when they share none."""
    c = 0
    while all(len(st.vars) > c for st in stmts) and len({(v.arg.lo, v.arg.hi) for v in
                                                         (st.vars[c] for st in stmts)}) == 1:
        c += 1
    if c == 0:
        return None
    return [PolyStmt(st.name, st.vars, st.domain, st.body, st.vars[:c] + (k,) + st.vars[c:])
            for k, st in enumerate(stmts)]


def _scatter_nest(op: ComputeOp, specs: tuple, stmts: list[PolyStmt], outs: tuple, opts) -> Nest:
    body = build_loops(stmts)
    axes = " + ".join(", ".join(a.name for a in s.loop_vars) for s in specs)
    work = count_work(body)
    attrs = NestAttrs()
    note = f"scatter-{'add' if specs[0].combiner is None else specs[0].combiner.kind} over {axes}"
    # (each spec's first loop scans an output axis kept as is)
    if opts is not None and all(any(t is s.loop_vars[0] for t in s.target) for s in specs):
        body, marked = mark_parallel(body, NestAttrs(parallel_dim=0), opts, work)
        attrs = NestAttrs(range=marked.range)
    if attrs.range is None and opts is not None and len(specs) == 1:
        split = split_columns(body, specs[0], outs[0], opts, work)
        if split is not None:
            body, attrs, column = split
            note += f", columns of {column.name} shared among threads"
    return Nest(op.name, body, outs, work, note, parallel=attrs.range is not None, attrs=attrs)


def split_columns(body: tuple, spec: ScatterSpec, out: Buffer, opts, work: int
                  ) -> tuple[tuple, NestAttrs, Expr] | None:
    """The nest with the loop over an output axis no gather fixes (``j`` of ``dE[d(i), j] += H[i, j]``)
    shared among threads by whole cache lines (``grain``), each adding into its own columns only: the
    serial result bit for bit; its attributes, and the index of that axis.  ``None`` when too small, or
    no such axis has one constant-bounded loop."""
    if not opts.parallel or work < opts.parallel_min_work:
        return None
    target = opts.target or parse_target()
    strides = out.strides
    size = 1 if out.dtype == "bool" else int(out.dtype[-2:]) // 8
    stores = stores_in(body)
    for d, t in enumerate(spec.target):
        if t.op is not Op.VAR or not stores:
            continue
        v = stores[0].index[d]  # (isl's loops scan fresh variables)
        if v.op is not Op.VAR or any(st.index[d] is not v for st in stores):
            continue
        loops = [s for s in walk_stmts(body) if isinstance(s, Loop) and s.var is v]
        if len(loops) != 1:
            continue
        loop = loops[0]
        if loop.lo.op is not Op.CONST or loop.hi.op is not Op.CONST or loop.step != 1:
            continue
        trips = int(loop.hi.arg) - int(loop.lo.arg)
        grain = max(1, -(-target.line // (size * strides[d])))
        if trips < 2 * grain:
            continue
        body = _replace_loop(body, loop, Loop(loop.var, loop.lo, loop.hi, loop.body, 1, "parallel", loop.dim))
        return body, NestAttrs(range=(int(loop.lo.arg), int(loop.hi.arg), 1), grain=grain), t
    return None


def _replace_loop(stmts: tuple, old: Loop, new: Loop) -> tuple:
    def go(s):
        if isinstance(s, If):
            return replace(s, then=tuple(map(go, s.then)), orelse=tuple(map(go, s.orelse)))
        return new if s is old else replace(s, body=tuple(map(go, s.body))) if isinstance(s, Loop) else s
    return tuple(map(go, stmts))


class Scatter:
    """A sum (or another reduction) whose output axis a gather index fixes, as a scatter-add (or combine)
    (:mod:`.strategies.scatter`)."""

    name = "scatter"

    def match(self, op, bodies, ctx):
        spec = match_scatter(op, bodies) or match_reducer_scatter(op, bodies)
        return [] if spec is None else [Candidate(self, op, bodies, spec)]

    def cost(self, cand, ctx):  # one add per point, no vectors (the zero fill: see :func:`fill_cost`)
        return float(scatter_points(cand.data))

    def lower(self, cand, ctx):
        return Plan([ScatterNest(cand.op, cand.bodies, (cand.data,))])


def scatter_points(spec: ScatterSpec) -> int:
    """The points ``spec`` visits where the affine part of its condition holds (its loops' box if a bound
    is a size)."""
    if any(type(b) is not int for v in spec.loop_vars for b in v.dom):
        return math.prod(v.extent for v in spec.loop_vars)
    space = IndexSpace(spec.loop_vars)
    return count_bound(split_condition(space, spec.cond)[0].intersect(space.box()))


def fill_cost(op: ComputeOp, ctx) -> float:
    """The price of zero-filling ``op``'s output, in vectors.  A scatter's own price leaves it out: with it,
    a scatter into rows shorter than a vector (a one-hot's gradient over 7 classes) loses to loops that
    the cost model prices by the element, not by the whole vectors they store."""
    return math.prod(op.shape) / vector_lanes(ctx, op.body[0].dtype)


def _shifted_read(e: Expr, op: ComputeOp) -> tuple[Tensor, tuple[int, ...]] | None:
    """``(T, c)`` when ``e`` reads ``T[axes + c]`` (each of ``op``'s axes in order, plus a
    constant), else ``None``."""
    if e.op is Op.CAST and e.src[0].dtype == e.dtype:
        e = e.src[0]
    if e.op is not Op.READ or len(e.src) != len(op.axes):
        return None
    offsets = []
    for i, a in zip(e.src, op.axes):
        f = to_linear(i)
        if f.terms != ((a, 1),):
            return None
        offsets.append(f.const)
    return e.arg, tuple(offsets)


class ScatterSum:
    """A sum of scatter-adds read at shifted points (``X.grad[j] = R1[j + 1] + R2[j + 1]``) as
    scatter-adds straight into the sum's buffer: one fill, no temporaries."""

    name = "scatter-sum"

    def match(self, op, bodies, ctx):
        if op.is_reduction or len(bodies) != 1 or not op.axes:
            return []
        body = bodies[0]
        if body.op is Op.CAST and body.src[0].dtype == body.dtype:
            body = body.src[0]
        guards, body = peel_masks(body, negated=True)
        guard = all_of(guards)
        specs, absorbed = [], []
        for term in chain(body, Op.ADD):
            found = _shifted_read(term, op)
            if found is None:
                return []
            t, offsets = found
            r = t.op
            chosen = ctx.chosen.get(r)
            if chosen is None or not isinstance(chosen.strategy, Scatter) or r in absorbed \
                    or chosen.data.combiner is not None or ctx.readers.get(r) != [op] or t in ctx.outputs \
                    or r.num_outputs != 1 or t.dtype != op.body[0].dtype:
                return []
            spec = shifted(chosen.data, offsets, op.shape)
            if guard is not TRUE:  # (the mask at the point each add lands on)
                spec = replace(spec, guard=substitute(guard, dict(zip(op.axes, spec.target))))
            specs.append(spec)
            absorbed.append(r)
        return [] if not absorbed else [Candidate(self, op, bodies, tuple(specs), absorbs=tuple(absorbed))]

    def cost(self, cand, ctx):
        return fill_cost(cand.op, ctx) + sum(ctx.costs[r] for r in cand.absorbs)

    def lower(self, cand, ctx):
        reads = tuple(b for r in cand.absorbs for b in ctx.bodies[r])  # (what the nests read)
        return Plan([ScatterNest(cand.op, reads, cand.data)], absorbs=cand.absorbs)
