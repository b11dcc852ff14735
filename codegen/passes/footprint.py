"""Shrink a materialized tensor to the points its readers read.

When every reader reads only part of a materialized tensor (causal attention's ``scores[i, j]``, read at
``j <= i``), the rest is wasted work.  :func:`shrink_to_footprints` asks isl, consumers first, for the
*footprint* of each materialized tensor that is not an output (each output of a multi-output reduction
alike): the union over its reads of the reader's points under the read's index map, narrowed by the
guards on the way (a superset; an index taken from data is any point of its range).  A footprint that
needs divisions is taken as its bounding box, one of more than :data:`MAX_PIECES` convex pieces as their
hull.  A footprint at most :data:`MAX_FRACTION` of the box becomes a guard: a sum's ``where`` gains it,
another body becomes ``if_then_else(footprint, body, 0)``.  Values outside are never read."""

from __future__ import annotations

import math
from collections.abc import Sequence

import islpy as isl
from tensorad.simplify.algebra.logic import all_of, conjuncts
from tensorad.simplify.algebra.rules import is_zero, simplify_expr
from tensorad.simplify.zeros.nonzero import NZ_RULES, read_nonzero

from tensorad.ir.expr import TRUE, Expr, Op, ReduceArg, choice, const, logical, var
from tensorad.ir.rewrite import fold, free_vars, substitute, substituter, walk
from tensorad.ir.tensor import ComputeOp
from tensorad.lang.tensor_lang import guard_into_domain
from tensorad.poly.affine import IndexSpace, NotAffine
from tensorad.poly.to_expr import set_to_cond

MAX_FRACTION = 0.9  # shrink only when the footprint is at most this part of the box
MAX_VISITS = 20000  # (node, guards) pairs walked per body before giving up (no shrinking)
MAX_PIECES = 2  # a footprint of more convex pieces than this is taken as their convex hull


class _GiveUp(Exception):
    pass


def _guarded_reads(body: Expr, targets: set) -> list[tuple[Expr, tuple[Expr, ...]]]:
    """Each read of a ``targets`` op in ``body`` with the guards that hold where it runs."""
    out: list[tuple[Expr, tuple[Expr, ...]]] = []
    seen: set = set()
    stack: list[tuple[Expr, tuple[Expr, ...]]] = [(body, ())]
    while stack:
        node, guards = stack.pop()
        key = (id(node), guards)
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > MAX_VISITS:
            raise _GiveUp
        if node.op is Op.READ and node.arg.op in targets:
            out.append((node, guards))
        if node.op is Op.IF_THEN_ELSE:  # (a guard already held is not added again: a long
            c, a, b = node.src          # gradient nests one mask hundreds of times)
            stack += [(c, guards), (a, guards if c in guards else guards + (c,)), (b, guards)]
        elif node.op is Op.REDUCE:
            c = node.src[0]
            stack.append((c, guards))
            inner = guards if c is TRUE or c in guards else guards + (c,)
            stack += [(s, inner) for s in node.src[1:]]
        else:
            stack += [(s, guards) for s in node.src]
    return out


def _bounded_vars(body: Expr) -> list[Expr]:
    """The variables with a range under ``body`` (its axes and reduction variables)."""
    return [n for n in walk(body) if n.op is Op.VAR and n.lo is not None and n.hi is not None]


class _Call:
    """What one :func:`shrink_to_footprints` call shares between its reads and tensors: points are
    described over *canonical* axes, one variable per (position, range), so tensors of one shape share an
    isl space, guarded boxes and footprint conditions."""

    def __init__(self) -> None:
        self.axes: dict[tuple, Expr] = {}
        self.spaces: dict[tuple, IndexSpace] = {}
        self.sets: dict = {}  # (guards, variables) -> the box under the guards; images (_image)
        self.guards: dict[tuple, Expr | None] = {}  # (axes, footprint text) -> its condition
        self.held: dict[tuple, tuple] = {}  # (axes, id(footprint)) -> (it, its condition)
        self.unions: dict[tuple, tuple] = {}  # (id(a), id(b)) -> (a, b, their union)

    def union(self, a: isl.Set, b: isl.Set) -> isl.Set:
        """``a | b``, one set object per pair of set objects, so that tensors sharing a footprint convert
        it to a guard once (``held``)."""
        found = self.unions.get((id(a), id(b)))
        if found is None:
            found = self.unions[(id(a), id(b))] = (a, b, a.union(b))  # (a, b kept: ids not reused)
        return found[2]

    def canonical(self, op: ComputeOp) -> tuple[Expr, ...]:
        out = []
        for d, a in enumerate(op.axes):
            key = (d, a.lo, a.hi, a.dtype)
            if key not in self.axes:
                self.axes[key] = var(f"fp{d}", a.lo, a.hi, a.dtype)
            out.append(self.axes[key])
        return tuple(out)

    def renaming(self, free: list[Expr]) -> dict[Expr, Expr]:
        """A body's variables to canonical ones (one per position and range), so that bodies
        alike up to their variables' names share boxes, guards and images."""
        out = {}
        for k, v in enumerate(free):
            key = ("free", k, v.lo, v.hi, v.dtype)
            if key not in self.axes:
                self.axes[key] = var(f"fv{k}", v.lo, v.hi, v.dtype)
            out[v] = self.axes[key]
        return out

    def space(self, names: tuple) -> IndexSpace:
        found = self.spaces.get(names)
        if found is None:
            found = self.spaces[names] = IndexSpace(list(names))
        return found


def _image(read: Expr, guards: tuple[Expr, ...], free: list[Expr], call: _Call,
           body: dict | None = None) -> isl.Set | None:
    """The points of the read tensor that ``read`` reads (a set over its canonical axes), or ``None`` when
    an index is not affine (the whole box); ``free``: the body's :func:`_bounded_vars`, renamed
    canonically; ``body``: what the reads of one body share (the renaming and its guards)."""
    axes = call.canonical(read.arg.op)
    body = {} if body is None else body
    if "rename" not in body:
        body["rename"] = call.renaming(free)
        body["sub"] = substituter(body["rename"])
    rename, sub = body["rename"], body["sub"]
    index = tuple(sub(e) for e in read.src)
    # (an index read from data is some point of its range: a variable over it, projected out with the rest)
    gathered = tuple(dict.fromkeys(n for e in index for n in walk(e)
                                   if n.op is Op.DATA_INDEX and type(n.arg.extent) is int))
    names = axes + tuple(rename.values()) + gathered
    space = call.space(names)
    sets = call.sets
    found = body.get(guards)
    if found is None:
        found = body[guards] = tuple(dict.fromkeys(sub(g) for g in guards))
    guards = found
    key = ("image", guards, index, names)
    if key in sets:
        return sets[key]
    try:
        # the box under the guards (each once: a long body repeats them), memoized per prefix
        k = len(guards)
        while k and (guards[:k], names) not in sets:
            k -= 1
        s = sets.get((guards[:k], names))
        if s is None:
            s = sets[((), names)] = space.box()
        for j in range(k, len(guards)):
            s = sets[(guards[:j + 1], names)] = s.intersect(space.cond(guards[j], exact=False))
        for a, e in zip(axes, index):
            s = s.intersect(space.aff(a).eq_set(space.aff(e)))
    except NotAffine:
        s = sets[key] = None
        return None
    s = sets[key] = s.project_out(isl.dim_type.set, len(axes), len(space.vars) - len(axes))
    return s


def _covers_box(read: Expr, guards: Sequence[Expr], free: list[Expr]) -> bool:
    """Whether ``read`` reads its tensor's whole box, decided without isl: no guard, each index a distinct
    variable whose range contains its axis's, every variable of the body with a non-empty range."""
    if guards or len(set(read.src)) != len(read.src):
        return False
    for a, e in zip(read.arg.op.axes, read.src):
        if e.op is not Op.VAR or e.lo is None or e.hi is None or e.lo > a.lo or e.hi < a.hi:
            return False
    return all(v.hi > v.lo for v in free)


def bounding_box(s: isl.Set) -> tuple[isl.Set, list[int], list[int]]:
    """The least box holding the bounded, non-empty set ``s``, and its lower and upper bounds."""
    n = s.dim(isl.dim_type.set)
    lo = [s.dim_min_val(d).to_python() for d in range(n)]
    hi = [s.dim_max_val(d).to_python() for d in range(n)]
    hull = isl.Set.universe(s.space)
    for d in range(n):
        hull = hull.lower_bound_val(isl.dim_type.set, d, lo[d])
        hull = hull.upper_bound_val(isl.dim_type.set, d, hi[d])
    return hull, lo, hi


def count_points(s: isl.Set) -> int:
    """The number of points of a bounded set: the product of its extents when it is a box, else isl's
    count (which walks the points)."""
    if s.n_basic_set() == 1 and not s.get_basic_sets()[0].dim(isl.dim_type.div):
        hull, lo, hi = bounding_box(s)
        if hull.is_equal(s):
            return math.prod(max(0, b - a + 1) for a, b in zip(lo, hi))
    return s.count_val().to_python()


def _guard(op: ComputeOp, fp: isl.Set, call: _Call) -> Expr | None:
    """The footprint (over ``op``'s canonical axes) as a condition over ``op``'s axes, when
    it is worth using."""
    axes = call.canonical(op)
    held = call.held.get((axes, id(fp)))  # (one image read by one reader: the set already seen)
    if held is not None and held[0] is fp:
        cond = held[1]
    else:
        key = (axes, str(fp))
        if key not in call.guards:
            call.guards[key] = _canonical_guard(call.space(axes), fp)
        cond = call.guards[key]
        call.held[(axes, id(fp))] = (fp, cond)  # (the set kept: its id is not reused)
    return None if cond is None else substitute(cond, dict(zip(axes, op.axes)))


def _canonical_guard(space: IndexSpace, fp: isl.Set) -> Expr | None:
    """The footprint ``fp`` as a condition over ``space``'s variables, or None where it is not used: the
    whole box or more than :data:`MAX_FRACTION` of it.  A footprint with divisions (a strided or wrapped
    read) is taken as its bounding box (first, as isl's ``is_equal`` and ``count_val`` are slow on those),
    one of more than :data:`MAX_PIECES` pieces as their convex hull: supersets."""
    box = space.box()
    fp = fp.intersect(box).coalesce()
    pieces = fp.get_basic_sets()
    if any(p.dim(isl.dim_type.div) for p in pieces) and not fp.is_empty():
        fp = bounding_box(fp)[0]
    elif len(pieces) > MAX_PIECES:
        fp = fp.convex_hull()
        fp = isl.Set.from_basic_set(fp) if isinstance(fp, isl.BasicSet) else fp
    if fp.is_equal(box):
        return None
    if fp.is_empty():
        size = 0
    else:
        try:
            size = count_points(fp)
        except Exception:  # (a count isl cannot give: not worth the risk)
            return None
    if size > MAX_FRACTION * count_points(box):
        return None
    cond = set_to_cond(fp.gist(box), space.vars)
    return None if any(n.op in (Op.FLOORDIV, Op.MOD) for n in walk(cond)) else cond


def _restricted(op: ComputeOp, bodies: tuple[Expr, ...], cond: Expr) -> tuple[Expr, ...]:
    if bodies[0].op is Op.REDUCE:  # (each output of a multi-output reduction alike)
        where = cond if bodies[0].src[0] is TRUE else logical(Op.AND, bodies[0].src[0], cond)
        return tuple(Expr(Op.REDUCE, b.dtype, (where,) + b.src[1:],
                          ReduceArg(b.arg.combiner, b.arg.axes, b.arg.value_index)) for b in bodies)
    (body,) = bodies
    return (Expr(Op.IF_THEN_ELSE, body.dtype, (cond, body, const(0, body.dtype))),)


def shrink_to_footprints(ops: Sequence[ComputeOp], bodies: dict, outputs: set) -> dict:
    """``bodies`` (op -> its inlined bodies, ops producers first) with every materialized op
    that no output is made of restricted to its footprint (see the module docstring)."""
    targets = {op for op in ops if op not in outputs
               and (op.num_outputs == 1 or all(b.op is Op.REDUCE for b in bodies[op]))}
    if not targets:
        return bodies
    bodies = dict(bodies)
    fps: dict[ComputeOp, isl.Set | None] = {}
    full: set[ComputeOp] = set()  # ops some read reads whole: no footprint to find
    call = _Call()
    for op in reversed(ops):  # readers before what they read
        if op in targets and op in fps and fps[op] is not None and op not in full:
            cond = _guard(op, fps[op], call)
            if cond is not None:
                bodies[op] = _restricted(op, bodies[op], cond)
        for body in bodies[op]:
            try:
                found = _guarded_reads(body, targets)
            except _GiveUp:
                found = [(n, ()) for n in walk(body) if n.op is Op.READ and n.arg.op in targets]
                for n, _ in found:
                    fps[n.arg.op] = None
                continue
            free = _bounded_vars(body) if found else []  # (once per body: a long body has many reads)
            shared: dict = {}  # (the body's renaming, for _image)
            for read, guards in found:
                t = read.arg.op
                if t in full or (t in fps and fps[t] is None):
                    continue
                if _covers_box(read, guards, free):
                    full.add(t)
                    fps.setdefault(t, None)
                    continue
                img = _image(read, guards, free, call, shared)
                fps[t] = None if img is None else img if t not in fps else call.union(fps[t], img)
    return bodies


def _holds_on_box(c: Expr) -> bool:
    """``c`` holds at every point of its variables' ranges (or is not an affine index condition)."""
    space = IndexSpace(free_vars(c))
    try:
        return space.box().is_subset(space.cond(c))
    except (NotAffine, ValueError, TypeError):
        return True


def zero_terms_into_domain(ops: Sequence[ComputeOp], bodies: dict) -> dict:
    """``bodies`` with each sum's ``where`` narrowed to the affine index conditions outside which its
    term is zero, found through the materialized elementwise tensors it reads (a guard of ``-inf`` made
    zero by ``exp`` included, :func:`~tensorad.simplify.zeros.nonzero.finite_guard`; the term's own
    guards and the explicit ones of what it reads are left to the strategies), under the
    optimizer's strong reading (``0 * x`` is ``0``).  A softmax of scores masked with
    ``if_then_else(j <= i, s, -inf)`` then runs its sums, and its product with ``V``, over ``j <= i``
    as ``ta.topi``'s masked spelling does, and :func:`shrink_to_footprints` narrows their producers."""
    materialized = set(ops)
    guards: dict = {}  # tensor -> its nonzero condition on its axes: this call's
    stated_guards: dict = {}  # (:func:`~tensorad.simplify.zeros.nonzero.tensor_guard`'s, shared by the reads)

    def read(n: Expr, *idx: Expr) -> Expr:
        t = n.arg
        if t.op not in materialized or len(bodies[t.op]) != 1 or bodies[t.op][0].op is Op.REDUCE:
            return read_nonzero(n, stated_guards)
        if t not in guards:
            guards[t] = TRUE  # (a cycle reads True)
            guards[t] = simplify_expr(fold(bodies[t.op][0], rules))
        return TRUE if guards[t] is TRUE else substitute(guards[t], dict(zip(t.op.axes, n.src)))

    def stated_read(n: Expr, *idx: Expr) -> Expr:
        """The guard a read's tensor states: a sum's ``where``, or ``c`` of its body ``select(c, e, 0)``."""
        t = n.arg
        body = t.op.body[t.value_index] if isinstance(t.op, ComputeOp) else None
        if body is None or body.op is Op.REDUCE:
            return read_nonzero(n, stated_guards)
        if body.op not in (Op.SELECT, Op.IF_THEN_ELSE) or not is_zero(body.src[2]):
            return TRUE
        cs = [c for c in conjuncts(body.src[0]) if not any(m.op in (Op.READ, Op.REDUCE) for m in walk(c))]
        return substitute(all_of(cs), dict(zip(t.op.axes, n.src)))

    rules = {**NZ_RULES, Op.READ: read}
    stated = {**NZ_RULES, Op.READ: stated_read}
    out = dict(bodies)
    for op in ops:
        red = bodies[op][0]
        if len(bodies[op]) != 1 or red.op is not Op.REDUCE or red.arg.combiner.kind != "sum":
            continue
        local = set(conjuncts(simplify_expr(fold(red.src[1], stated))))  # (left to the strategies)
        for c in (c for c in conjuncts(simplify_expr(fold(red.src[1], rules))) if c not in local):
            if _holds_on_box(c):
                continue
            zero = const(0, red.dtype)
            moved = guard_into_domain(Expr(Op.REDUCE, red.dtype, (red.src[0], choice(Op.IF_THEN_ELSE, c,
                                           red.src[1], zero)), red.arg), ("sum",))
            if moved.src[1] is red.src[1]:
                red = moved
        out[op] = (red,)
    return out
