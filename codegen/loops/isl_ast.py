"""Polyhedral statements to loop statements through isl's AST builder.

The statements' domains and schedules form one isl union map ``{ S[x] -> [t0, t1, ...] }``, which
``AstBuild.node_from_schedule_map`` scans into an AST with exact bounds; each ``for`` becomes a fresh loop
variable (named after its axis), each user node ``S(e0, e1, ...)`` the statement's body with its variables
replaced.  isl's ``fdiv_q``, ``pdiv_q`` and ``div`` are the IR's floor division; ``pdiv_r``/``zdiv_r``
appear only compared with zero, where floor modulo answers the same."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial, reduce

import islpy as isl

from tensorad.ir.expr import Expr, Op, binary, choice, compare, const, logical, logical_not, unary, var
from tensorad.ir.intrange import index_bounds
from tensorad.ir.rewrite import substituter, walk
from tensorad.poly.affine import IndexSpace
from tensorad.poly.domain import budget_context, budgeted

from ..program import If, Loop, map_stmt
from .ast_check import Instance, guarded_hulls, has_divs, scans_exactly
from .domain import PolyStmt

_E = isl.ast_expr_op_type


class IslAstError(RuntimeError):
    """isl built a loop construct this converter does not expect (an internal error: report it)."""

_BIN = {_E.add: Op.ADD, _E.sub: Op.SUB, _E.mul: Op.MUL, _E.fdiv_q: Op.FLOORDIV,
        _E.pdiv_q: Op.FLOORDIV, _E.div: Op.FLOORDIV, _E.pdiv_r: Op.MOD, _E.zdiv_r: Op.MOD}
_CMP = {_E.eq: Op.EQ, _E.le: Op.LE, _E.lt: Op.LT, _E.ge: Op.GE, _E.gt: Op.GT}
_LOGIC = {_E.and_: Op.AND, _E.and_then: Op.AND, _E.or_: Op.OR, _E.or_else: Op.OR}
_NARY = {_E.max: Op.MAXIMUM, _E.min: Op.MINIMUM}


def _statement_map(s: PolyStmt, ndim: int, name: str | None = None) -> isl.Map:
    """``{ S[x] -> [t0(x), ..., 0] }`` on the statement's domain, each time dimension an isl function of
    its linear form, tagged ``name``, the variables named by position."""
    name = s.name if name is None else name
    space = IndexSpace(s.vars)
    times = [space.aff(t) if isinstance(t, Expr) else space.constant(t) for t in s.schedule]
    times += [space.constant(0)] * (ndim - len(times))
    m = isl.Map.from_domain(space.universe())
    for t in times:
        m = m.flat_range_product(isl.Map.from_pw_aff(t))
    m = m.set_tuple_name(isl.dim_type.in_, name).intersect_domain(s.domain.set_tuple_name(name))
    for k in range(len(s.vars)):  # (named by position: isl's AST never shows these names)
        m = m.set_dim_name(isl.dim_type.in_, k, f"x{k}")
    return m


def schedule_map(stmts: Sequence[PolyStmt], names: Sequence[str] | None = None) -> isl.UnionMap:
    """The statements' schedules as one union map, each tagged with its name (or ``names``)."""
    ndim = max(len(s.schedule) for s in stmts)
    umap = None
    for k, s in enumerate(stmts):
        m = isl.UnionMap.from_map(_statement_map(s, ndim, None if names is None else names[k]))
        umap = m if umap is None else umap.union(m)
    return umap


def _loop_name(s: PolyStmt, d: int) -> str | None:
    """The name statement ``s`` gives a loop over time dimension ``d`` (``None``: none)."""
    t = s.schedule[d] if d < len(s.schedule) else 0
    if isinstance(t, Expr):
        vs = _vars_of(t)
        if vs:
            return vs[0].name if t.op is Op.VAR else f"{vs[0].name}o"  # a strip of it
    return None


def _dim_hints(stmts: Sequence[PolyStmt], umap: isl.UnionMap,
               ranges: list[tuple[int, int]] | None = None) -> list[tuple[str, int, int]]:
    """Per time dimension, a default loop name and the range of its values (``ranges``: those known)."""
    ndim = max(len(s.schedule) for s in stmts)
    ranges = _time_ranges(umap, ndim) if ranges is None else ranges
    return [(next((n for n in (_loop_name(s, d) for s in stmts) if n is not None), "t"), *ranges[d])
            for d in range(ndim)]


def _time_ranges(umap: isl.UnionMap, ndim: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` of the values each of the ``ndim`` time dimensions of ``umap`` takes."""
    if umap.is_empty():
        return [(0, 1)] * ndim
    rng = isl.Set.from_union_set(umap.range())
    out = []
    for d in range(ndim):
        one = rng.project_out(isl.dim_type.set, d + 1, ndim - d - 1).project_out(isl.dim_type.set, 0, d)
        out.append((_coord(one.lexmin()), _coord(one.lexmax()) + 1))
    return out


def _vars_of(e: Expr) -> list[Expr]:
    return [n for n in walk(e) if n.op is Op.VAR]


def _coord(s: isl.Set) -> int:
    return s.sample_point().get_coordinate_val(isl.dim_type.set, 0).to_python()


def _statements_under(n: isl.AstNode) -> set[str]:
    """The names of the statements an isl AST node runs."""
    T = isl.ast_node_type
    t = n.get_type()
    if t == T.user:
        return {n.user_get_expr().op_get_arg(0).id_get_id().get_name()}
    if t == T.block:
        kids = n.block_get_children()
        return set().union(*(_statements_under(kids.get_at(k)) for k in range(kids.n_ast_node())))
    if t == T.for_:
        return _statements_under(n.for_get_body())
    if t == T.if_:
        out = _statements_under(n.if_get_then_node())
        return out | _statements_under(n.if_get_else_node()) if n.if_has_else_node() else out
    return _statements_under(n.mark_get_node()) if t == T.mark else set()


class AstConverter:
    """isl AST nodes and expressions to program statements and IR expressions."""

    def __init__(self, stmts: Sequence[PolyStmt], hints: list[tuple[str, int, int]],
                 names: Sequence[str] | None = None) -> None:
        # (``names``: the tags the AST's user nodes carry instead of the statements' names)
        self.stmts = {s.name if names is None else names[k]: s for k, s in enumerate(stmts)}
        self.hints = hints
        self.offset = 0  # leading time dimensions scanned outside isl (:func:`_peel`)
        # tag -> per leading dimension scanned outside, the position of its variable
        self.peeled: dict[str, tuple[int, ...]] = {}
        self.scope: dict[str, Expr] = {}
        self.frame: list = []  # enclosing loops (var, lo, hi, step) and affine conditions
        self.instances: list[Instance] = []  # every user node, for :func:`.loops.ast_check.scans_exactly`
        # whether isl's loops divide (floor division, modulo, step > 1): points may have been dropped
        self.divides = False

    def _iterator(self, it: str) -> str:
        """The name isl gives the loop of time dimension ``d`` of the whole schedule, for a
        name in an AST built without the first :attr:`offset` dimensions."""
        return f"c{int(it[1:]) + self.offset}" if self.offset and it[1:].isdigit() else it

    def outer(self, box: list[tuple[int, int]], inner) -> tuple:
        """The loops over the leading time dimensions ``box`` (``(lo, hi)`` each) around ``inner()``, the
        conversion of the AST isl built for the other dimensions: a loop per dimension, as :meth:`loop`'s."""
        if not box:
            return inner()
        dim = self.offset - len(box)
        name, lo_r, hi_r = self.hints[dim]
        name = next((x for x in (_loop_name(s, dim) for s in self.stmts.values()) if x is not None), name)
        v = var(name, lo_r, hi_r)
        lo, hi = const(box[0][0], "int32"), const(int(const(box[0][1] - 1, "int32").arg) + 1)
        self.scope[f"c{dim}"] = v
        self.frame.append((v, lo, hi, 1))
        body = self.outer(box[1:], inner)
        self.frame.pop()
        del self.scope[f"c{dim}"]
        return (Loop(v, lo, hi, body, 1, dim=dim),)

    def node(self, n: isl.AstNode) -> tuple:
        t = n.get_type()
        T = isl.ast_node_type
        if t == T.block:
            kids = n.block_get_children()
            out: list = []
            for k in range(kids.n_ast_node()):
                out.extend(self.node(kids.get_at(k)))
            return tuple(out)
        if t == T.for_:
            return (self.loop(n),)
        if t == T.if_:
            cond = self.expr(n.if_get_cond())
            self.frame.append(cond)
            then = self.node(n.if_get_then_node())
            self.frame[-1] = logical_not(cond)
            orelse = self.node(n.if_get_else_node()) if n.if_has_else_node() else ()
            self.frame.pop()
            return (If(cond, then, orelse, affine=True),)
        if t == T.user:
            return self.user(n.user_get_expr())
        if t == T.mark:
            return self.node(n.mark_get_node())
        raise IslAstError(f"unexpected isl AST node of type {t}")

    def loop(self, n: isl.AstNode) -> Loop:
        raw = n.for_get_iterator().id_get_id().get_name()
        it = self._iterator(raw)
        dim = int(it[1:]) if it[1:].isdigit() else 0
        name, lo_r, hi_r = self.hints[dim] if dim < len(self.hints) else ("t", 0, 1)
        # named after a statement this loop runs (not another statement's variable at the same depth)
        inner = _statements_under(n)
        name = next((x for x in (_loop_name(s, dim) for tag, s in self.stmts.items() if tag in inner)
                     if x is not None), name)
        v = var(name, lo_r, hi_r)
        lo = self.expr(n.for_get_init())
        cond = n.for_get_cond()
        step = n.for_get_inc().int_get_val().to_python()
        self.divides |= step != 1
        saved = self.scope.get(it)
        self.scope[it] = v
        kind = cond.op_get_type()
        lhs, rhs = cond.op_get_arg(0), cond.op_get_arg(1)
        if lhs.get_type() != isl.ast_expr_type.id or lhs.id_get_id().get_name() != raw:
            raise IslAstError(f"unexpected isl loop condition {cond.to_C_str()}")
        bound = self.expr(rhs)
        if kind == _E.le:
            hi = binary(Op.ADD, bound, 1) if bound.op is not Op.CONST else const(int(bound.arg) + 1)
        elif kind == _E.lt:
            hi = bound
        else:
            raise IslAstError(f"unexpected isl loop condition {cond.to_C_str()}")
        self.frame.append((v, lo, hi, step))
        body = self.node(n.for_get_body())
        self.frame.pop()
        if saved is None:
            del self.scope[it]
        else:
            self.scope[it] = saved
        return Loop(v, lo, hi, body, step, dim=dim)

    def user(self, e: isl.AstExpr) -> tuple:
        tag = e.op_get_arg(0).id_get_id().get_name()
        s = self.stmts[tag]
        args = [self.expr(e.op_get_arg(k + 1)) for k in range(e.op_get_n_arg() - 1)]
        # (inserted by increasing position, the dimensions in any order)
        for k, d in sorted((k, d) for d, k in enumerate(self.peeled.get(tag, ()))):
            args.insert(k, self.scope[f"c{d}"])
        loops = tuple(f for f in self.frame if isinstance(f, tuple))
        conds = tuple(f for f in self.frame if not isinstance(f, tuple))
        self.instances.append(Instance(s.name, tuple(args), loops, conds))
        mapping = dict(zip(s.vars, map(_loop_value, args)))
        sub = substituter(mapping)
        return tuple(subst_stmt(st, mapping, sub) for st in s.body)

    def expr(self, e: isl.AstExpr) -> Expr:
        t = e.get_type()
        if t == isl.ast_expr_type.id:
            return self.scope[self._iterator(e.id_get_id().get_name())]
        if t == isl.ast_expr_type.int:
            return const(e.int_get_val().to_python(), "int32")
        op = e.op_get_type()
        args = [self.expr(e.op_get_arg(k)) for k in range(e.op_get_n_arg())]
        if op in _BIN:
            self.divides |= _BIN[op] in (Op.FLOORDIV, Op.MOD)
            return binary(_BIN[op], *args)
        if op in _CMP:
            return compare(_CMP[op], *args)
        if op in _LOGIC:  # (isl writes a true operand as the integer 1)
            return logical(_LOGIC[op], *(a if a.dtype == "bool" else compare(Op.NE, a, const(0, a.dtype))
                                         for a in args))
        if op in _NARY:
            return reduce(partial(binary, _NARY[op]), args)
        if op == _E.minus:
            return unary(Op.NEG, args[0])
        if op in (_E.cond, _E.select):
            return choice(Op.SELECT, *args)
        raise IslAstError(f"unexpected isl AST expression {e.to_C_str()}")


def _loop_value(arg: Expr) -> Expr:
    """A statement variable's value in isl's loops, exact: ``int32`` constants isl fixes (``(2 * 1) + 0``),
    which would wrap with the statement's ``int32`` constants in ``i32``, are one ``int64`` constant."""
    bound = index_bounds(arg)
    if bound is not None and bound[0] == bound[1] and not any(n.op is Op.VAR for n in walk(arg)):
        return const(bound[0], "int64")
    return arg


def subst_stmt(st, mapping: dict, sub=None):
    """A program statement with variables replaced (recursively through loops and ifs); ``sub``
    (a :func:`substituter` of ``mapping``) shares the nodes rebuilt between statements."""
    return map_stmt(st, substituter(mapping) if sub is None else sub) if mapping else st


def compact(stmts: Sequence[PolyStmt]) -> list[PolyStmt]:
    """The statements with the time dimensions dropped that are one constant in every schedule."""
    ndim = max(len(s.schedule) for s in stmts)
    padded = [tuple(s.schedule) + (0,) * (ndim - len(s.schedule)) for s in stmts]
    keep = [d for d in range(ndim)
            if not (all(isinstance(t[d], int) for t in padded) and len({t[d] for t in padded}) == 1)]
    if len(keep) == ndim:
        return list(stmts)
    return [PolyStmt(s.name, s.vars, s.domain, s.body, tuple(t[d] for d in keep))
            for s, t in zip(stmts, padded)]


# isl's scan of a domain with nested floors and a ``mod`` can run for hours: a map with more than
# ``AST_DIVISIONS`` divisions in a piece goes to the hulls (:func:`build_loops`) at once, another with
# divisions gets ``AST_OPERATIONS`` operations.
AST_DIVISIONS = 3
AST_OPERATIONS = 320_000


class _AstBudgetSpent(Exception):
    """isl's AST builder spent :data:`AST_OPERATIONS` on a map (kept in the scan memo)."""


def _ast(umap: isl.UnionMap, budget: int | None) -> isl.AstNode | None:
    """isl's AST of ``umap``; with a ``budget``, built on a copy in this thread's
    :func:`~tensorad.poly.domain.budget_context`, ``None`` where isl stops it after that many operations."""
    def scan(ctx: isl.Context, umap: isl.UnionMap) -> isl.AstNode:
        build = isl.AstBuild.from_context(isl.Set.universe(isl.Space.params_alloc(ctx, 0)))
        return build.node_from_schedule_map(umap)

    if budget is None:
        return scan(umap.get_ctx(), umap)
    ctx = budget_context()
    return budgeted(ctx, lambda: scan(ctx, isl.UnionMap.read_from_str(ctx, umap.to_str())), budget)


def _divisions(umap: isl.UnionMap) -> int:
    """The most integer divisions (existential variables) in one basic map of ``umap``."""
    counts = [0]
    umap.foreach_map(lambda m: counts.extend(bm.dim(isl.dim_type.div) for bm in m.get_basic_maps()))
    return max(counts)


def _scan(stmts: Sequence[PolyStmt], scans: dict | None = None,
          budget: int | None = None) -> tuple[tuple, AstConverter | None]:
    """isl's AST of the statements, converted.  Statements are tagged ``S0``, ``S1``, ... by order, so
    those differing in names and bodies only give one map; ``scans`` (one ``lower`` call's) keeps the AST
    per map text.  ``budget``: isl operations (and :data:`AST_DIVISIONS`), or :class:`_AstBudgetSpent`."""
    tags: dict[str, str] = {}
    names = [tags.setdefault(s.name, f"S{len(tags)}") for s in stmts]
    box, inner, peeled = _peel(stmts)
    umap = schedule_map(inner, names)
    key = (umap.to_str(), budget) if scans is not None else None
    found = scans.get(key) if scans is not None else None
    if found is None:
        if umap.is_empty():
            found = (None, None)
        else:
            ndim = max(len(s.schedule) for s in inner)
            node = None if budget is not None and _divisions(umap) > AST_DIVISIONS else _ast(umap, budget)
            found = (_AstBudgetSpent, None) if node is None else (node, _time_ranges(umap, ndim))
        if scans is not None:
            scans[key] = found
    node, ranges = found
    if node is _AstBudgetSpent:
        raise _AstBudgetSpent
    if node is None:
        return (), None
    conv = AstConverter(stmts, _dim_hints(stmts, umap, [(lo, hi) for lo, hi in box] + ranges), names)
    conv.offset = len(box)
    conv.peeled = {tag: positions for tag, positions in zip(names, peeled)}
    return conv.outer(box, lambda: conv.node(node)), conv


PEEL_MIN_TRIPS = 2  # (isl writes a one-trip loop as its value, no loop)


def _peel(stmts: Sequence[PolyStmt]) -> tuple[list[tuple[int, int]], list[PolyStmt], list[tuple[int, ...]]]:
    """The leading time dimensions every statement schedules by one of its own variables over one range
    nothing else mentions (a batch loop around the nest), built as plain loops (:meth:`AstConverter.outer`):
    the ranges, the statements left and the positions of the variables taken out."""
    box: list[tuple[int, int]] = []
    current = list(stmts)
    positions: list[list[int]] = [[] for _ in stmts]
    if any(s.domain.is_empty() for s in current):
        return box, current, [()] * len(stmts)
    while all(len(s.schedule) > 1 for s in current):
        found = [_product_axis(s) for s in current]
        if any(f is None for f in found) or len({f[1] for f in found}) != 1:
            break
        box.append(found[0][1])
        for k, (s, (i, _)) in enumerate(zip(current, found)):
            left = [j for j in range(len(stmts[k].vars)) if j not in positions[k]]
            positions[k].append(left[i])
            current[k] = PolyStmt(s.name, s.vars[:i] + s.vars[i + 1:],
                                  s.domain.project_out(isl.dim_type.set, i, 1), s.body, s.schedule[1:])
    return box, current, [tuple(p) for p in positions]


def _product_axis(s: PolyStmt) -> tuple[int, tuple[int, int]] | None:
    """``(i, (lo, hi))`` when ``s``'s first time dimension is its variable ``i``, in no other, and its
    domain is ``[lo, hi)`` (at least :data:`PEEL_MIN_TRIPS` values) times a set of the others."""
    if not s.schedule or not isinstance(s.schedule[0], Expr) or s.schedule[0].op is not Op.VAR:
        return None
    v = s.schedule[0]
    if v not in s.vars or any(isinstance(t, Expr) and v in _vars_of(t) for t in s.schedule[1:]):
        return None
    if any(bs.dim(isl.dim_type.div) for bs in s.domain.get_basic_sets()):
        # projecting out variables of a domain with divisions can take isl exponential time
        return None
    i = s.vars.index(v)
    n = len(s.vars)
    rng = s.domain.project_out(isl.dim_type.set, i + 1, n - i - 1).project_out(isl.dim_type.set, 0, i)
    lo, hi = rng.dim_min_val(0), rng.dim_max_val(0)
    if not (lo.is_int() and hi.is_int()) or not isl.Set.from_basic_set(rng.polyhedral_hull()).is_equal(rng):
        return None  # (unbounded, or not every value between: a residue class)
    lo, hi = lo.to_python(), hi.to_python() + 1
    if hi - lo < PEEL_MIN_TRIPS:
        return None
    rest = s.domain.project_out(isl.dim_type.set, i, 1).insert_dims(isl.dim_type.set, i, 1)
    interval = rng.insert_dims(isl.dim_type.set, 1, n - i - 1).insert_dims(isl.dim_type.set, 0, i)
    product = rest.intersect(interval.reset_space(rest.get_space()))
    return None if not product.is_subset(s.domain) else (i, (lo, hi))


def build_loops(stmts: Sequence[PolyStmt], scans: dict | None = None) -> tuple:
    """The loop statements that run ``stmts`` over their domains in schedule order.  Loops over divisions
    are checked (:mod:`.loops.ast_check`) and rebuilt over division-free hulls or boxes with the exact test
    inside where wrong or hard for isl (:data:`AST_DIVISIONS`, :data:`AST_OPERATIONS`); ``scans``: a memo."""
    if not stmts:  # (an op computed at no point)
        return ()
    stmts = compact(stmts)
    divs = has_divs(stmts)
    try:
        body, conv = _scan(stmts, scans, AST_OPERATIONS if divs else None)
    except (isl.Error, _AstBudgetSpent):
        # isl's AST builder can fail on divisions, or spend its budget: the division-free hulls below
        if not divs:
            raise
    else:
        if conv is None or not (divs or conv.divides) or scans_exactly(stmts, conv.instances):
            return body
    for boxes in (False, True):  # division-free hulls, then boxes (a hull can keep a stride)
        safe = guarded_hulls(stmts, boxes)
        body, conv = _scan(safe, scans)
        if conv is None or scans_exactly(safe, conv.instances):
            return body
    raise IslAstError("isl built loops that do not scan the statements' domains "
                      f"({', '.join(s.name for s in stmts)}): an internal error, please report it")
