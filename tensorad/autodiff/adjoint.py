"""Adjoint contributions of one consumer op, built directly in head-product form.

For a consumer ``Y[i] = sum_k where c(i, k) of f(i, k)`` (or ``Y[i] = f(i)``) that reads ``X`` at
``X[phi(i, k)]``, one read site contributes to ``adj_X[p, j]`` ::

    sum over (i, k) where c(i, k) && phi(i, k) == j  of  H[p, i] * df/dX[phi](i, k)

with ``H = adj_Y`` and ``i``, ``k`` fresh reduce variables: an equation ``phi == j`` the optimizer solves.

Other combiners:

* ``max``, ``min`` and selecting custom combiners (argmax): a *winner* reduction ``W`` carries
  ``(value..., k)``, ``k`` the flattened winning point, and the head goes to the winner only.  For max/min
  every element tied with the result gets ``H / T``, ``T(i)`` the tie count (PyTorch's ``amax``), all three
  from one pass (:meth:`AdjointBuilder._winner`), or, for a source that recomputes exactly and whose reads
  walk memory along an output axis (:func:`_along_outputs`), ``T`` and the lone winner from one code
  summed over the tied points: in the same pass as the maximum, or beside a maximum that another op
  reads or whose window is padded (:meth:`AdjointBuilder._lone_winner`).  A gradient that reads ``Y``
  reads the winner reduction's value when it compares ``Y``'s own source
  (:meth:`AdjointBuilder.reuse_winners`): no second pass for ``Y``.
  A running max/min, ``k <= i`` or ``k >= i`` (:func:`_running`), scans its winner reduction instead (a
  suffix's over the reversed axis); over a plain prefix or suffix its ties are routed in linear work, by a
  recurrence of the head's shares over runs of equal values (:meth:`AdjointBuilder._tie_adjoint`), nested
  where its ``where`` bounds several axes apart (:meth:`AdjointBuilder._nested`).
* ``prod``: ``dY/dg`` at a point is the product of the other factors.  Over a plain box (a ``where`` reading
  only the reduction axes), from a zero count ``Z`` and the product of the nonzero factors ``P`` (one
  reduction of two outputs): ``P / g`` when ``Z == 0``, ``P`` at the single zero when ``Z == 1``, else 0, one
  fused pass (:meth:`AdjointBuilder._box_others`); ``Z`` is a float whose tangent is the zero factors'
  tangents, so the branches that are 0 keep their derivatives (second order).  A ``where`` that reads an
  output axis or data takes an exclusive prefix times an exclusive suffix product along the box's points
  (:meth:`AdjointBuilder._others`): two scans, no division, finite where ``Y`` overflows or a factor is
  infinite or NaN, with the derivatives of products (second order at zeros).  A running product (a prefix
  ``k <= i`` or ``k < i``, a suffix) takes an exclusive running product and a recurrence of the head, two
  scans (:meth:`AdjointBuilder._line_terms`).
* any other combiner: the generic ``(derivative, value)`` Jacobian contracted with the head, over the
  components of the tuple that the heads need only (:func:`combiners.needed_components`: a running sum
  or max inside a tuple is then a sum or a max).

A reduction whose value is copied along output axes it never reads (an argmax too, and a sum whose read of an
input is a gather or leaves several window points per element with differing terms), or a max, min or product
whose terms repeat along reduction axes they never read, differentiates once per distinct value and term: each
head summed over the copies first (and optimized), a product's scaled by the elementwise power ``n Y'^(n-1)``
(:meth:`AdjointBuilder._uncopied`, :func:`_several_points`).  A built-in max, min or product over one point at
most per output (:func:`_one_point`) is a sum of that one term, and a max or min of a source no point of the
window changes (isl proves each read index constant over it) is its source wherever the window has a point
(the ``where`` projected onto the outputs), elementwise."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial, reduce

from ..ir import dtype as dt
from ..ir.expr import (
    FALSE,
    TRUE,
    Expr,
    Op,
    ReduceArg,
    SizeDecisionError,
    as_expr,
    cast,
    choice,
    compare,
    conjuncts,
    const,
    data_index,
    logical,
    logical_not,
    unary,
    var,
)
from ..ir.intrange import index_bounds
from ..ir.reducer import prod as prod_reducer
from ..ir.reducer import sum as sum_reducer
from ..ir.rewrite import (
    fold_along,
    free_vars,
    rebuild,
    replace_reads,
    rewrite,
    size_values,
    tensor_graph,
    walk,
)
from ..ir.tensor import ComputeOp, Provenance, Role, Tensor, reads_data
from ..lang.tensor_lang import guard_into_domain
from ..poly.affine import IndexSpace, NotAffine, always, decide
from ..poly.domain import IndexSet
from ..poly.nesting import classes_apart, interval_count, plain_prefix, running_order, scan_axes
from . import combiners
from .build import (
    Optimizer,
    adjoint_of,
    all_of,
    axis_vars,
    compute,
    compute_each,
    copy_vars,
    equal_all,
    head_sum,
    rename,
)
from .gathers import landing_equations, unchecked, unguarded_reads
from .jacobian import body_jacobian
from .rules import partial_by_read
from .zero import ZERO, materialize, mul, sum_all, zero_branch

EXACT_FLOAT_OPS = frozenset({Op.READ, Op.CONST, Op.CAST, Op.SELECT, Op.IF_THEN_ELSE, Op.NEG, Op.ABS,
                             Op.MAXIMUM, Op.MINIMUM})
ONE_ROUNDING_OPS = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV})


def recomputes_exactly(expr: Expr, inlined: bool = False) -> bool:
    """Whether every evaluation of ``expr`` gives the same bits however compiled: float values from reads,
    constants, casts, choices, negation, ``abs``, ``max``/``min`` and one ``+ - * /`` at most (nothing to
    contract or fold).  ``inlined``: the elementwise tensors it reads count too."""
    return roundings(expr, inlined) <= 1


def roundings(expr: Expr, inlined: bool = False) -> float:
    """The number of rounding float operations of ``expr``, counted up to 2 (a math function counts 2);
    ``inlined``: with those of the elementwise tensors it reads, each counted once (iteratively)."""
    own, reads = _own_roundings(expr, inlined)
    if not reads:
        return own
    memo: dict[Tensor, float] = {}

    def visit(t: Tensor) -> float:
        n, below = _own_roundings(t.op.body[t.value_index], True)
        return min(2.0, n + sum(memo[r] for r in below))

    for t in reads:
        fold_along(t, lambda r: _own_roundings(r.op.body[r.value_index], True)[1], visit, memo)
    return min(2.0, own + sum(memo[r] for r in reads))


def _own_roundings(expr: Expr, inlined: bool) -> tuple[float, list[Tensor]]:
    """``expr``'s own rounding operations (up to 2) and the inlinable tensors it reads (once per read)."""
    count, reads, sized = 0.0, [], None
    for n in walk(expr):
        if inlined and n.op is Op.READ and _inlinable(n.arg):
            reads.append(n.arg)
        elif not dt.is_float(n.dtype) or n.op in EXACT_FLOAT_OPS or n.op in (Op.DIV, Op.SQRT) and n in (
                sized := size_values(expr) if sized is None else sized):
            continue  # (``1 / n`` of sizes: a constant once bound, and no contraction takes a division)
        elif n.op not in ONE_ROUNDING_OPS:
            return 2.0, []
        else:
            count = min(2.0, count + 1)
    return count, reads


def _inlinable(t: Tensor) -> bool:
    """Whether a reader of ``t`` may see ``t``'s body inlined: an elementwise compute not ``Role.SAVED``."""
    return isinstance(t.op, ComputeOp) and not t.op.is_reduction and t.op.provenance.role is not Role.SAVED


def read_sites(expr: Expr, x: Tensor) -> list[Expr]:
    """The distinct reads of ``x`` under ``expr``, in a deterministic order."""
    return [n for n in walk(expr) if n.op is Op.READ and n.arg == x]


def _partials(source: Expr, x: Tensor):
    """Each read of ``x`` in ``source`` with its partial derivative, those that are zero left out."""
    for site in read_sites(source, x):
        if (d := partial_by_read(source, site)) is not ZERO:
            yield site, d


def _gathers(expr: Expr, x: Tensor) -> bool:
    """Whether ``expr`` reads ``x`` at an index read from data (a gather)."""
    return any(n.op in (Op.READ, Op.DATA_INDEX)
               for site in read_sites(expr, x) for e in site.src for n in walk(e))


def _several_points(op: ComputeOp, x: Tensor) -> bool:
    """Whether a reduction copied along an output axis it never reads has terms of one element of
    ``x``'s adjoint, per output point, that make a sum the optimizer cannot count away: for some read
    of ``x``, two window points ``k != k'`` (where the condition holds) read the same element, and its
    partial derivative reads a window axis other than through that read (the terms differ).  Window
    axes the body does not read are left out (their sum is a factor); conditions isl cannot read are
    dropped (more pairs, never fewer)."""
    body = op.body[0]
    read = list(dict.fromkeys(v for e in body.src for v in free_vars(e)))
    raxes = [k for k in body.arg.axes if k in read]
    if not raxes or all(a in read for a in op.axes):
        return False
    other = copy_vars(raxes)
    space = IndexSpace([v for v in read if v not in raxes] + raxes + list(other.values()))
    cond = [c for c in conjuncts(body.src[0]) if space.is_affine(c)]
    apart = space.cond(reduce(partial(logical, Op.OR), [compare(Op.NE, k, other[k]) for k in raxes]))
    for site, d in _partials(body.src[1], x):
        rest = replace_reads(d, lambda r, s=site: const(0, r.dtype) if r is s else None)
        if not set(free_vars(rest)) & set(raxes):
            continue
        both = all_of([*cond, *(rename(c, other) for c in cond),
                       *(compare(Op.EQ, e, rename(e, other)) for e in site.src)])
        try:
            if not space.box().intersect(space.cond(both)).intersect(apart).is_empty():
                return True
        except NotAffine:
            continue
    return False


def _inverse_map(axes: Sequence[Expr], site: Expr, x: Tensor) -> dict[Expr, int] | None:
    """For a read ``X[phi(i)]`` that is a bijection of the consumer's domain onto ``X``'s (each index a
    distinct axis with ``0 <= i_a < X.shape[k]`` exactly), ``{axis: k}`` -- ``i_a = j_k`` is the only
    point with ``phi(i) == j`` -- else ``None``: such a term needs no reduction."""
    if len(site.src) != len(axes) or len(axes) != len(x.shape):
        return None
    inverse: dict[Expr, int] = {}
    for k, (e, size) in enumerate(zip(site.src, x.shape)):
        if e.op is not Op.VAR or e in inverse or e not in axes or e.lo != 0 or e.hi != size:
            return None
        inverse[e] = k
    return inverse


def _along_outputs(source: Expr, outputs: Sequence[Expr]) -> bool:
    """Whether every read of ``source`` (of a tensor with axes) indexes its last (contiguous) dimension by
    an output axis."""
    reads = [r for r in walk(source) if r.op is Op.READ and r.src]
    return bool(reads) and all(set(free_vars(r.src[-1])) & set(outputs) for r in reads)


def _unflatten(flat: Expr, axes: Sequence[Expr]) -> list[Expr]:
    """The point of ``axes`` whose row-major flattening (:func:`combiners.flat_index`) is
    ``flat``: ``k_a = lo_a + (flat // stride_a) % extent_a``."""
    out = []
    for n, a in enumerate(axes):
        stride = combiners.box_size(axes[n + 1:])
        digit = flat // as_expr(stride, dt.INDEX) if stride != 1 else flat
        if n:
            digit = digit % as_expr(a.extent, dt.INDEX)
        out.append(digit + as_expr(a.lo, dt.INDEX) if a.lo != 0 else digit)
    return out


def _digit(flat: Expr, shape: Sequence[int], dims: Sequence[int], k: int) -> Expr:
    """Axis ``k``'s index in the row-major offset ``flat`` over the axes ``dims`` of
    ``shape``: ``(flat // stride) % extent`` (no ``//`` on the last, no ``%`` on the first)."""
    n = list(dims).index(k)
    stride = math.prod([shape[q] for q in dims[n + 1:]])
    digit = flat // const(stride, dt.INDEX) if stride != 1 else flat
    return digit % const(shape[k], dt.INDEX) if n else digit


def _holds(c: Expr) -> bool:
    """Whether the integer comparison ``c`` holds over its operands' interval bounds (a padding guard)."""
    if c.op is Op.CONST:
        return bool(c.arg)
    if c.op not in (Op.LT, Op.LE, Op.GE, Op.GT) or not dt.is_int(c.src[0].dtype):
        return False
    b = index_bounds(c.src[0] - c.src[1])
    if b is None:
        return False
    lo, hi = b
    return {Op.LT: hi < 0, Op.LE: hi <= 0, Op.GT: lo > 0, Op.GE: lo >= 0}[c.op]


def _linear_bound(c: Expr, window: set) -> bool:
    """Whether the conjunct ``c`` bounds the window points ``window`` by the outputs linearly: an
    inequality of sums and multiples of variables (no mod, no division, no data) that reads both."""
    used = set(free_vars(c))
    return (c.op in (Op.LT, Op.LE, Op.GT, Op.GE) and bool(used & window) and not used <= window
            and all(n.op in _LINEAR for n in walk(c.src[0])) and all(n.op in _LINEAR for n in walk(c.src[1])))


_LINEAR = frozenset({Op.VAR, Op.CONST, Op.ADD, Op.SUB, Op.MUL, Op.NEG, Op.CAST})


def _running(op: ComputeOp) -> int | None:
    """The order of ``op``'s running reduction (:func:`~tensorad.poly.nesting.running_order`):
    ``1`` for ``Y[i] = max_{k <= i} X[k]``, ``-1`` for ``max_{k >= i}`` (its winner reduction runs
    over the reversed axis: a max/min's winner is the same in any order, a custom combiner's is the
    first in the loop's), ``None`` for another domain."""
    body = op.body[0]
    order = running_order(op.axes, body.arg.axes, body.src[0], body.src[1:])
    return None if order == -1 and combiners.classify(body.arg.combiner)[0] not in ("max", "min") else order


def _window_met(axes: Sequence[Expr], raxes: Sequence[Expr], cond: Expr) -> Expr | None:
    """Where ``reduce_{raxes where cond}`` over ``axes`` has a point: the conjuncts of ``cond`` that do not
    read ``raxes``, and the projection onto ``axes`` of those that do; ``None`` when one of those reads
    data (no affine projection)."""
    inner = [c for c in conjuncts(cond) if set(free_vars(c)) & set(raxes)]
    outer = [c for c in conjuncts(cond) if not set(free_vars(c)) & set(raxes)]
    try:
        window = IndexSet.from_conditions(list(axes) + list(raxes), inner).project_onto(axes)
    except NotAffine:
        return None
    return all_of(outer + [window.gist(IndexSet.box(window.vars)).to_cond()])


def _read_at(source: Expr, axes: Sequence[Expr], point: dict[Expr, Expr], inline: bool = False) -> Expr:
    """``source`` with each read index written at ``point``'s value of each variable it does not change
    along over the box of ``axes`` and ``point`` (isl proves it): ``X[(3 * k) % 1]`` is ``X[0]``;
    ``inline``: each elementwise tensor it reads (:func:`_inlinable`) replaced by its body first."""
    space = IndexSpace(list(dict.fromkeys([*axes, *point])))

    def at(e: Expr) -> Expr:
        for k in [k for k in point if k in free_vars(e)]:
            try:
                if space.box().intersect(space.cond(compare(Op.NE, e, rename(e, {k: point[k]})))).is_empty():
                    e = rename(e, {k: point[k]})
            except NotAffine:
                return e
        return e

    return replace_reads(source, lambda r: rename(r.arg.op.body[r.arg.value_index], dict(zip(
        r.arg.op.axes, r.src))) if inline and _inlinable(r.arg) else r.replace(src=tuple(map(at, r.src))))


def _one_point(axes: Sequence[Expr], raxes: Sequence[Expr], cond: Expr) -> bool:
    """Whether ``cond`` holds at one point of ``raxes``' box at most per point of ``axes`` (isl proves it)."""
    other = copy_vars(raxes)
    space = IndexSpace(list(axes) + list(raxes) + [other[k] for k in raxes])
    both = space.box()
    for c in conjuncts(cond):  # (one that reads data or is not affine left out: a superset of the points)
        try:
            both = both.intersect(space.cond(c)).intersect(space.cond(rename(c, other)))
        except NotAffine:
            continue
    return all(both.intersect(space.cond(compare(Op.NE, k, other[k]))).is_empty() for k in raxes)


def _where_linked(op: ComputeOp) -> bool:
    """Whether a reduction's condition ties its box to the outputs or to data: a conjunct reading an
    output axis or a tensor (a prefix ``k < j``, ``k != j``, a data mask).  A product that is not
    differentiates from a zero count (:meth:`AdjointBuilder._box_others`), else from exclusive scans
    (:meth:`AdjointBuilder._others`)."""
    return any(set(free_vars(c)) & set(op.axes) or reads_data(c) for c in conjuncts(op.body[0].src[0]))


def _component_groups(comb, read: dict[int, int]) -> list[tuple[tuple[int, ...], list[int]]]:
    """The heads ``read`` (output -> component of ``comb``) grouped so that no two groups need a
    common component (:func:`combiners.needed_components`): ``(components, outputs)`` each."""
    groups: list[tuple[set[int], list[int]]] = []
    for v, c in read.items():
        need, outs = set(combiners.needed_components(comb, [c])), [v]
        for g in [g for g in groups if g[0] & need]:
            groups.remove(g)
            need |= g[0]
            outs += g[1]
        groups.append((need, outs))
    return [(tuple(sorted(need)), outs) for need, outs in groups]


def _lifted_at_first(op: ComputeOp, n: Expr) -> Expr | None:
    """A read ``R[i, j]`` in ``op``'s body of a reduction the language lifted out of it (``Role.LIFTED``, of
    ``op``'s group) as ``R[i, 0]`` where ``R``'s value is a copy along ``j`` (its body never reads it):
    the same value, and ``op``'s body no longer reads ``j`` (:meth:`AdjointBuilder._uncopied`)."""
    lifted = n.arg.op if n.op is Op.READ else None
    if not isinstance(lifted, ComputeOp) or lifted.provenance.role is not Role.LIFTED \
            or lifted.provenance.group != op.provenance.group:
        return None
    used = {v for b in lifted.body for v in free_vars(b)}
    index = tuple(e if a in used or e.op is Op.CONST else const(0, e.dtype)
                  for a, e in zip(lifted.axes, n.src))
    return None if index == tuple(n.src) else n.arg[index]


def _factor(cond: Expr, source: Expr) -> Expr:
    """``source`` where ``cond`` holds, 1 elsewhere (a product's term that the condition drops)."""
    return source if cond is TRUE else choice(Op.IF_THEN_ELSE, cond, source, const(1, source.dtype))


class AdjointBuilder:
    """Builds contributions for one reverse pass; caches per-op helper tensors (winners...)."""

    def __init__(self, exact: bool = False, optimizer: Optimizer | None = None,
                 read: frozenset[Tensor] = frozenset()) -> None:
        self.exact = exact  # choices on sizes as at every static size, else raise (an optimized derivative)
        self.optimizer = optimizer  # (for the heads it sums: an adjoint's optimizer reads them only)
        self.read = read  # the tensors the program's ops read (:meth:`_lone_winner`)
        self.holds = decide if exact else always  # a condition on sizes
        self._winners: dict[ComputeOp, tuple] = {}
        self._quotients: dict[ComputeOp, tuple[list[Expr], Expr]] = {}  # see _lone_winner
        self._prods: dict[ComputeOp, tuple] = {}  # see _others
        self._boxes: dict[ComputeOp, tuple[Tensor, Tensor]] = {}  # see _prod
        self._lines: dict[tuple[ComputeOp, Tensor], list[Tensor]] = {}
        self._unpaddeds: dict[ComputeOp, tuple[ComputeOp, Expr] | None] = {}
        self._saved_values: dict[ComputeOp, tuple[Tensor, list[Expr]] | None] = {}
        self._destinations: dict[tuple[ComputeOp, Expr], tuple | None] = {}
        self._exact_sources: dict[ComputeOp, Expr] = {}
        self._copies: dict[Tensor, Tensor] = {}
        self._counts: dict[ComputeOp, Tensor] = {}  # see _points
        self._normals: dict[ComputeOp, ComputeOp] = {}
        self._jacobians: dict[tuple[ComputeOp, Tensor], dict[int, Tensor]] = {}
        self._narrowed: dict[tuple, tuple[ComputeOp, dict[int, Tensor]] | None] = {}
        self._nests: dict[tuple, tuple[ComputeOp, dict[int, Tensor]] | None] = {}

    def contributions(self, op: ComputeOp, heads: dict[int, Tensor], x: Tensor,
                      p: Sequence[Expr], j: Sequence[Expr], sole: bool = False) -> list[Expr]:
        """Terms (expressions over ``p + j``, dtype ``x.dtype``) of ``adj_x`` from ``op``;
        ``sole``: ``op`` is ``x``'s only consumer (:meth:`_winner_scatter_terms`)."""
        if not op.is_reduction:
            return [t for v, h in heads.items()
                    for t in self._site_terms(op.axes, (), TRUE, op.body[v], h, x, p, j)]
        comb = op.body[0].arg.combiner
        read = {v: op.body[v].arg.value_index for v in heads}  # (an output is one component)
        groups = _component_groups(comb, read)
        apart = len(groups) > 1 or bool(groups) and len(groups[0][0]) < comb.arity
        if apart and len(set(read.values())) == len(read) and combiners.classify(comb)[0] == "generic":
            # a generic tuple reduction whose heads read some components only, or components apart
            # (a zero count beside a product): each group may form a sum, a product or a max, whose
            # adjoints need no Jacobian of the tuple
            terms = []
            for kept, vs in groups:
                sub = compute(op.name, op.axes, [combiners.project(op.body[0], kept, c) for c in kept],
                              op.provenance)[0].op
                terms += self.contributions(sub, {kept.index(read[v]): heads[v] for v in vs}, x, p, j, sole)
            return terms
        body = op.body[0]
        ra: ReduceArg = body.arg
        if any(self.holds(k.extent <= 0) for k in ra.axes):
            # An empty box: the reduction is its identity, a constant.
            return []
        kind, _ = combiners.classify(ra.combiner)
        # (a sum whose read of x fixes the window point per output and element, or whose terms there
        # differ only through that read, is one the optimizer solves per copy as cheaply as the head's
        # sum over the copies; a gathered read, or several points with differing terms, repeat per copy)
        several = kind != "sum" or _gathers(body.src[1], x) or _several_points(op, x)
        narrow = self._uncopied(op, heads, kind) if several else None
        if narrow is not None:
            return self.contributions(*narrow, x, p, j, sole)
        cond, point = body.src[0], {k: const(k.lo, k.dtype) for k in ra.axes}
        if ra.combiner.kind in ("max", "min", "prod") and _one_point(op.axes, ra.axes, cond):
            # one point at most per output: the value is its source there, a sum of one term (the identity
            # where ``cond`` fails; a built-in identity is neutral, a custom one may win against the source)
            return self._site_terms(op.axes, ra.axes, cond, body.src[1], heads[0], x, p, j)
        fixed = _read_at(body.src[1], op.axes, point) if ra.combiner.kind in ("max", "min") else None
        single = {} if fixed is None else {k: v for k, v in point.items() if self.holds(k.extent == 1)}
        met = None if fixed is None or set(free_vars(fixed)) & set(ra.axes) else \
            _window_met(op.axes, ra.axes, rename(cond, single))
        if met is not None:
            # a max/min of a source no point changes: every point of the window ties, and the head split
            # evenly sums back whole: the value is its source wherever the window has a point
            return self._site_terms(op.axes, (), met, fixed, heads[0], x, p, j)
        if fixed is not None and not set(free_vars(_read_at(fixed, op.axes, point, True))) & set(ra.axes):
            # its value repeats over the window through elementwise tensors (a broadcast): every point
            # ties, and each takes the head over the window's count of points
            n, one = self._points(op), const(1, body.src[1].dtype)
            return self._site_terms(op.axes, ra.axes, cond, body.src[1], heads[0], x, p, j,
                                    lambda m, iv, kv: ([], one / n[tuple(iv)]))
        if kind == "sum":
            return self._site_terms(op.axes, ra.axes, cond, body.src[1], heads[0], x, p, j)
        if (ra.combiner.kind in ("max", "min") or kind == "prod") and self._normal(op) is not op:
            return self.contributions(self._normal(op), heads, x, p, j, sole)
        nested = self._nested(op, heads) if ra.combiner.kind in ("max", "min") else None
        if nested is not None:
            return self.contributions(*nested, x, p, j, sole)
        if kind in ("max", "min", "prod", "recurrence"):
            if (moved := self._reranged(op, heads, kind)) is not None:
                return self.contributions(*moved[:2], x, p, j, sole)
            bare = self._unpadded(op) if kind in ("max", "min") else None
            moved = None if bare is None or set(free_vars(body.src[0])) & set(op.axes) else \
                self._reranged(bare[0], heads, kind)
            line = self._line_terms(op, heads, x, p, j, kind) if bare is None else \
                self._line_terms(bare[0], heads, x, p, j, kind, bare[1]) if moved is None else \
                self._line_terms(*moved[:2], x, p, j, kind, moved[2](bare[1]))
            if line is not None:
                return line
        if kind in ("max", "min", "select"):
            best, winner, ties = self._winner(op)

            def at_winner(m: dict, iv: list, kv: list, v: int) -> tuple[list[Expr], Expr | None]:
                flat = combiners.flat_index(kv, self.holds) if len(winner) == 1 else None
                keys = [flat] if flat is not None else combiners.digits(kv)
                first = equal_all(keys, [w[tuple(iv)] for w in winner])
                if ties is None:
                    return [first], None
                # max/min: the first winner by index always gets head / ties, other tied ones by value.
                count, source = ties[tuple(iv)], self._compared_source(op, m)
                tied = logical(Op.AND, compare(Op.GT, count, const(1, count.dtype)),
                               combiners.ties_result(source, best[tuple(iv)]))
                return [logical(Op.OR, first, tied)], const(1, source.dtype) / cast(source.dtype, count)

            if len(winner) == 1 and ra.axes:
                return self._winner_scatter_terms(op, heads, x, p, j, winner[0], best, ties, sole)
            return [t for v, h in heads.items()
                    for t in self._site_terms(op.axes, ra.axes, cond, body.src[1 + v], h, x, p, j,
                                              lambda m, iv, kv, v=v: at_winner(m, iv, kv, v))]
        if kind == "prod":
            others = self._others(op) if _where_linked(op) else self._box_others(op)
            if others is not None:
                return self._site_terms(op.axes, ra.axes, cond, body.src[1], heads[0], x, p, j, others)
        return self._generic_terms(op, heads, x, p, j)

    def _uncopied(self, op: ComputeOp, heads: dict[int, Tensor],
                  kind: str) -> tuple[ComputeOp, dict[int, Tensor]] | None:
        """A reduction whose value repeats, as one over the distinct values, with heads to match
        (``None`` when nothing repeats):

        * output axes ``c`` it never reads (its value is copied along them) are dropped and each
          head summed over them first: ``sum_{i, c} H[i, c] dY[i]/dX = sum_i (sum_c H[i, c]) dY[i]/dX``;
        * for a max, min or product, reduction axes ``u`` of ``n`` points in all that its terms never
          read shrink to one point: ``max_{k, u} f(k) = max_k f(k)``, each of the ``n`` copies of a
          tied term getting ``H / (n T)``, ``H / T`` in all; ``prod_{k, u} f(k) = Y'^n`` with
          ``Y' = prod_k f(k)``, whose head is ``H n Y'^(n-1)``;
        * conjuncts of the ``where`` that read neither the window nor data (``i != 0``) mask the head
          summed over the copies (where one fails the value is the identity, of derivative 0), when
          without them more output axes are copies and a read moves with the window.

        The winner, tie and product passes then run once per distinct value."""
        key = (op, tuple(sorted(heads.items(), key=lambda vh: vh[0])))
        if key in self._narrowed:
            return self._narrowed[key]
        raxes = op.body[0].arg.axes

        def repeats(bodies: Sequence[Expr]) -> tuple[list[Expr], list[Expr]]:
            read = {v for b in bodies for e in b.src for v in free_vars(e)}
            # (a copy of one element sums nothing; over an empty one the head is empty, and the plain
            # terms are proven zero)
            return ([a for a in op.axes if a not in read and self.holds(a.extent >= 2)],
                    [k for k in raxes if kind in ("max", "min", "prod") and k not in read
                     and self.holds(k.extent >= 2)])

        bodies = list(op.body)
        copied, unread = repeats(bodies)
        pinned = [rewrite(b, lambda n: _lifted_at_first(op, n)) for b in bodies]
        if pinned != bodies and sum(map(len, repeats(pinned))) > len(copied) + len(unread):
            bodies = pinned  # (only where it shows more copies: the reads keep their routing elsewhere)
            copied, unread = repeats(bodies)
        outer = [c for c in conjuncts(bodies[0].src[0])
                 if not set(free_vars(c)) & set(raxes) and not reads_data(c)]
        mask, first = all_of(outer), {k: const(k.lo, k.dtype) for k in raxes}
        if outer and kind in ("max", "min", "prod", "select") \
                and all(b.src[0] is bodies[0].src[0] for b in bodies) \
                and set(free_vars(_read_at(bodies[0].src[1], op.axes, first))) & set(raxes):
            # (passes over the window to share: a source no window point changes is elementwise)
            rest = all_of([c for c in conjuncts(bodies[0].src[0]) if c not in outer])
            bare = [Expr(b.op, b.dtype, (rest,) + tuple(b.src[1:]), b.arg) for b in bodies]
            if len(repeats(bare)[0]) > len(copied):
                bodies = bare
                copied, unread = repeats(bodies)
            else:
                mask = TRUE
        found = None
        if copied or unread:
            kept = [a for a in op.axes if a not in copied]
            m = {**copy_vars([*kept, *raxes]), **{k: var(k.name, k.lo, k.lo + 1) for k in unread}}
            sub = compute(op.name, [m[a] for a in kept], [rename(b, m) for b in bodies], op.provenance)[0].op
            narrowed = {}
            for v, h in heads.items():
                out, prefix = copy_vars(op.axes), axis_vars(h.shape[:h.ndim - len(op.axes)])
                dtype = dt.compute_dtype(op.body[v].dtype)  # (summed at the precision its terms take)
                if copied:
                    value = cast(dtype, h[tuple(prefix) + tuple(out[a] for a in op.axes)])
                    total = head_sum(value, [out[a] for a in copied], rename(mask, out))
                    h = compute(f"{h.name}.summed", prefix + [out[a] for a in kept], [total],
                                Provenance(Role.ADJOINT, source=Tensor(sub, v)))[0]
                    h = h if self.optimizer is None else self.optimizer(h)  # (a head nonzero at few copies)
                if kind == "prod" and unread:  # H n Y'^(n-1), the power elementwise
                    axes = prefix + [out[a] for a in kept]
                    y = cast(dtype, Tensor(sub, v)[tuple(out[a] for a in kept)])
                    n = math.prod(k.extent for k in unread)
                    value = cast(dtype, h[tuple(axes)]) * cast(dtype, n) * y ** cast(dtype, n - 1)
                    h = compute(f"{h.name}.scaled", axes, [value],
                                Provenance(Role.ADJOINT, source=Tensor(sub, v)))[0]
                narrowed[v] = h
            found = sub, narrowed
        self._narrowed[key] = found
        return found

    def _normal(self, op: ComputeOp) -> ComputeOp:
        """``op`` with each variable of 2 points or more read only where isl proves it changes nothing read
        at its first value (``X[(2 * s + k) % 2]`` is ``X[k % 2]``: ``op`` repeats along ``s``), and a product
        padded with its identity (a custom one too) over the padding's affine part as its ``where``
        (:func:`~tensorad.lang.tensor_lang.guard_into_domain`: a running product's form), or ``op``."""
        if op not in self._normals:
            red = op.body[0]
            bare = guard_into_domain(red) if combiners.classify(red.arg.combiner)[0] == "prod" else red
            (cond, src), m = bare.src, copy_vars(op.axes + op.reduce_axes)
            first = {v: const(v.lo, v.dtype) for v in m if self.holds(v.extent >= 2)}
            kept = {*free_vars(_read_at(src, list(m), first)), *free_vars(cond)}
            gone = {v: first[v] for v in free_vars(src) if v in first and v not in kept}
            body = rename(bare.replace(src=(cond, _read_at(src, list(m), gone))), m)
            self._normals[op] = compute(op.name, [m[a] for a in op.axes], [body], op.provenance)[0].op \
                if gone or bare is not red else op
        return self._normals[op]

    def _points(self, op: ComputeOp) -> Tensor:  # (the count of each output's window points)
        if op not in self._counts:
            (cond, src), m = op.body[0].src, copy_vars(op.axes + op.reduce_axes)
            count = rename(head_sum(const(1, src.dtype), op.reduce_axes, cond), m)
            self._counts[op] = compute(f"{op.name}.points", [m[a] for a in op.axes], [count])[0]
        return self._counts[op]

    def _nested(self, op: ComputeOp, heads: dict[int, Tensor]) -> tuple[ComputeOp, dict[int, Tensor]] | None:
        """A max/min over axes its ``where`` bounds apart, each running along an output axis, as its inner
        running max with its head (else ``None``): ``Y[i, j] = max_{a <= i} T[a, j]``, ``T[a, j] = max_{b <=
        j} X[a, b]``.  ``T``'s head is ``C1`` times the outer adjoint of ``H C2 / W`` (``C1``, ``C2``: ``T``'s
        and ``Y``'s tie counts, ``W``: ``C1`` summed over the tied ``T``): ties split over the whole window.
        (A product's zero factor of another row would be a zero adjoint there: NaN by an infinite one.)"""
        key, body = (op, heads[0]), op.body[0]
        if key not in self._nests:
            self._nests[key] = next((n for inner in classes_apart(body.arg.axes, conjuncts(body.src[0]))
                                     if (n := self._nest(op, heads[0], inner)) is not None), None)
        return self._nests[key]

    def _nest(self, op: ComputeOp, h: Tensor, inner: set) -> tuple[ComputeOp, dict[int, Tensor]] | None:
        body = op.body[0]
        (cond, src), raxes, comb = body.src, body.arg.axes, body.arg.combiner
        nested, rest = tuple(r for r in raxes if r in inner), tuple(r for r in raxes if r not in inner)
        c_in = all_of([t for t in conjuncts(cond) if set(free_vars(t)) & inner])
        c_out = all_of([t for t in conjuncts(cond) if not set(free_vars(t)) & inner])
        free = [v for v in (*op.axes, *rest) if v in {*free_vars(src), *free_vars(c_in)}]
        if any(v.lo != 0 for v in free) or not scan_axes(free, nested, c_in, [src]) \
                or not scan_axes(op.axes, rest, c_out, free):
            return None
        m, o = copy_vars([*free, *inner]), copy_vars([*op.axes, *rest])
        t_red = Expr(Op.REDUCE, body.dtype, (c_in, src), ReduceArg(comb, nested, 0))
        t = compute(f"{op.name}.inner", [m[v] for v in free], [rename(t_red, m)], op.provenance)[0]
        y_red = rename(Expr(Op.REDUCE, body.dtype, (c_out, t[tuple(free)]), ReduceArg(comb, rest, 0)), o)
        outer = compute(op.name, [o[a] for a in op.axes], [y_red], op.provenance)[0].op
        (c1, c2), none = (self._winner(t.op)[2], self._winner(outer)[2]), const(0, dt.INDEX)
        tc = combiners.tie_code_reducer(comb)  # (the sum of C1 over the tied points, beside the max)
        src, ya = (*y_red.src, c1[tuple(o[v] for v in free)]), y_red.arg.axes
        w = compute(f"{op.name}.window_ties", [o[a] for a in op.axes],
                    [Expr(Op.REDUCE, x.dtype, src, ReduceArg(tc, ya, v)) for v, x in enumerate(tc.lhs)])[1]
        pv = axis_vars(h.shape[:h.ndim - len(op.axes)])
        d, yv, tv = dt.compute_dtype(h.dtype), axis_vars(op.shape, start=len(pv)), axis_vars(t.shape, len(pv))
        share = cast(d, h[tuple(pv + yv)]) * cast(d, c2[tuple(yv)]) / cast(d, w[tuple(yv)])
        h = compute(f"{h.name}.shares", pv + yv, [choice(Op.SELECT, compare(Op.GT, w[tuple(yv)], none), share,
                                                         const(0, d))], Provenance(Role.ADJOINT, source=t))[0]
        total, ties = sum_all(self.contributions(outer, {0: h}, t, pv, tv)), c1[tuple(tv[len(pv):])]
        if total is ZERO:
            return None
        total = choice(Op.SELECT, compare(Op.GT, ties, none), materialize(total, d) * cast(d, ties),
                       const(0, d))  # (a row of an empty window has no point to route to)
        head = compute(f"{t.name}.grad", pv + tv, [cast(t.dtype, total)], Provenance(Role.ADJOINT, source=t))
        return t.op, {0: head[0] if self.optimizer is None else self.optimizer(head[0])}

    # ---- one term per read site ---------------------------------------------------------
    def _site_terms(self, axes: Sequence[Expr], raxes: Sequence[Expr], cond: Expr, source: Expr,
                    head: Tensor, x: Tensor, p: Sequence[Expr], j: Sequence[Expr],
                    extra: Callable | None = None) -> list[Expr]:
        terms = []
        for site, d in _partials(source, x):
            inverse = None if raxes or cond is not TRUE or extra is not None else _inverse_map(axes, site, x)
            if inverse is not None:  # phi is a bijection: the sum has the one term i = phi^-1(j)
                m = {a: j[k] for a, k in inverse.items()}
                h = cast(source.dtype, head[tuple(p) + tuple(m[a] for a in axes)])
                terms.append(cast(dt.compute_dtype(x.dtype), materialize(mul(h, rename(d, m)), source.dtype)))
                continue
            m = copy_vars(tuple(axes) + tuple(raxes))
            iv, kv = [m[a] for a in axes], [m[k] for k in raxes]
            conds, factor = extra(m, iv, kv) if extra is not None else ([], None)
            index = [rename(e, m) for e in site.src]
            lands = equal_all(index, j) if cond is TRUE and site in unguarded_reads(source) else \
                all_of(landing_equations(index, j, x.shape, iv + kv))
            where = all_of([rename(cond, m), *conds, lands])
            h = cast(source.dtype, head[tuple(p) + tuple(iv)])
            value = mul(h if factor is None else mul(h, factor), rename(d, m))
            value = cast(dt.compute_dtype(x.dtype), materialize(value, source.dtype))
            terms.append(head_sum(value, iv + kv, where))
        return terms

    def _winner_scatter_terms(self, op: ComputeOp, heads: dict[int, Tensor], x: Tensor,
                              p: Sequence[Expr], j: Sequence[Expr], index: Tensor, best: Tensor,
                              ties: Tensor | None, sole: bool = False) -> list[Expr]:
        """The terms of a selecting reduction whose winner is one flattened index ``W(i)``.

        The winner's point ``k* = unflatten(W(i))`` is data (``DATA_INDEX`` digits, clipped), so the main
        term ``sum_i where c(i, k*) && phi(i, k*) == j of H[i] * df/dX(i, k*) [/ T(i)]`` is a sum over
        ``i`` alone: a scatter-add of one element per output.  For ``max``/``min`` the other tied points
        get ``H / T`` from a second term guarded by ``T(i) > 1`` (:meth:`_point_term`); a sentinel winner
        adds nothing.

        When ``op`` is ``x``'s only consumer and reads it once, over no more outputs than ``x`` has
        elements, the winner's indices the window does not move are opaque too (``sole``): not solved for."""
        body = op.body[0]
        terms: list[Expr] = []
        sites = [(v, site) for v in heads for site in read_sites(body.src[1 + v], x)]
        opaque = sole and len(sites) == 1 and self.holds(combiners.box_size(op.axes) <= math.prod(x.shape))
        for v, h in heads.items():
            source = body.src[1 + v]
            for site, d in _partials(source, x):
                terms.append(self._point_term(op, source, site, d, h, x, p, j, index, ties, None, opaque))
                if ties is not None:
                    terms.append(self._point_term(op, source, site, d, h, x, p, j, index, ties, best))
        return terms

    def _point_term(self, op: ComputeOp, source: Expr, site: Expr, d: Expr, h: Tensor, x: Tensor,
                    p: Sequence[Expr], j: Sequence[Expr], index: Tensor, ties: Tensor | None,
                    best: Tensor | None, opaque: bool = False) -> Expr:
        """One read site's term at the winner (``best is None``, under ``W(i) != SENTINEL``) or at the
        other tied points: a sum over the outputs and an opaque window point ``t`` (the term stays a
        scatter) under ``T(i) > 1 && t != W(i) && f(i, t) == best(i)``."""
        body = op.body[0]
        ra: ReduceArg = body.arg
        size, m = combiners.box_size(ra.axes), copy_vars(tuple(op.axes))
        iv = [m[a] for a in op.axes]
        conds: list[Expr] = []
        axes = iv
        found = None if best is not None else self._destination(op, source, site)
        if found is not None:  # where the winner's read landed, saved by the forward: no digits
            landed, dims, rest, guards = found
            e = landed[tuple(iv)]
            flat = data_index(e, math.prod([x.shape[k] for k in dims]), "clip", landed.name)
            fixed = {v for k, t in enumerate(site.src) if k not in dims for v in free_vars(t)}
            opaque = opaque and set(op.axes) <= fixed  # (else the outputs stay a scatter anyway)
            at = [_digit(flat, x.shape, dims, k) if k in dims
                  else data_index(unchecked(rename(t, m)), x.shape[k], "clip", landed.name, k) if opaque
                  else unchecked(rename(t, m)) for k, t in enumerate(site.src)]
            # The read's guards over the output axes: E(i) >= 0 implies them, but only they prove the
            # reads in ``rest`` in bounds; a guard that moves with the window (padding) stays in E.
            window = set(ra.axes)
            kept = [rename(g, m) for g in guards if not window & set(free_vars(g))]
            where = all_of([*kept, compare(Op.GE, e, const(0, e.dtype)), equal_all(at, j)])
            value = mul(cast(source.dtype, h[tuple(p) + tuple(iv)]), rename(rest, m))
            return head_sum(cast(dt.compute_dtype(x.dtype), materialize(value, source.dtype)), iv, where)
        first = index[tuple(iv)]
        count = None if ties is None else ties[tuple(iv)]
        tied = None if count is None else compare(Op.GT, count, const(1, count.dtype))
        coded = best is not None and ties is not None and self._destination(op, source, site) is not None
        if coded:  # a tied window (code < -1) and its count decoded from the destination
            e = self._destination(op, source, site)[0][tuple(iv)]
            count, tied = const(-1, dt.INDEX) - e, compare(Op.LT, e, const(-1, dt.INDEX))
        if best is None:
            point = data_index(first, size, "clip", index.name)
            conds = [compare(Op.NE, first, const(combiners.INDEX_SENTINEL, first.dtype))]
        else:
            t = var("t", 0, size)
            axes, point = iv + [t], data_index(t, size, "clip", index.name)
        for k, digit in zip(ra.axes, _unflatten(point, ra.axes)):
            m[k] = digit
        # A window point ``t``'s digits are opaque (the term stays a scatter from the outputs: solved for
        # them, it would visit every window of every element), except in the conjuncts of the reduction's
        # own condition that read the window alone, or bound it linearly by the outputs (a prefix
        # ``k < i``, a band): those read ``t``'s own digits (the same values: ``t`` is in the box), so the
        # scatter visits only the points they keep.  (Another conjunct coupling the window with the
        # outputs, a mod of ``k + i``, stays opaque: the optimizer would re-express the outputs through
        # ``t`` and bring the rare tie test into ``t``'s loop.)
        own = {**m, **dict(zip(ra.axes, _unflatten(t, ra.axes)))} if best is not None else m
        window = set(ra.axes)
        # (a bound also at the opaque digits the reads take, for the proof that they are in bounds)
        inside = all_of([e for c in conjuncts(body.src[0]) for e in
                         ([rename(c, own)] if set(free_vars(c)) <= window else
                          [rename(c, own), rename(c, m)] if _linear_bound(c, window) else [rename(c, m)])])
        if best is not None and tied is not None:  # the tied points (all of them when coded:
            # the tie value has the bits the winner compared, see :meth:`_compared_source`)
            same = combiners.ties_result(self._compared_source(op, m), best[tuple(iv)])
            if inside is not TRUE:  # (lazy: the source may read out of bounds where the
                same = choice(Op.IF_THEN_ELSE, inside, same, FALSE)  # condition is false)
            conds = [tied, same if coded else logical(Op.AND, compare(Op.NE, axes[-1], first), same)]
        idx = tuple(unchecked(e) for e in site.src)
        where = all_of([inside, *conds, equal_all([rename(e, m) for e in idx], j)])
        value = cast(source.dtype, h[tuple(p) + tuple(iv)])
        if count is not None:
            value = mul(value, const(1, source.dtype) / cast(source.dtype, count))
        return head_sum(cast(dt.compute_dtype(x.dtype), materialize(mul(value, rename(d, m)), source.dtype)),
                        axes, where)

    def reuse_winners(self, tensors: Sequence[Tensor]) -> list[Tensor]:
        """``tensors`` reading each max/min ``Y`` as the value of its winner reduction where that one
        compares ``Y``'s own source (the same bits): the pass that finds the winner and its ties gives the
        value too, not a second pass over the window for ``Y``."""
        values = {Tensor(op, 0): best for op, (best, _, ties) in self._winners.items()
                  if ties is not None and best.op is not op and self._saved_values.get(op) is None
                  and self._exact_sources.get(op) is op.body[0].src[1]}
        if not values:
            return list(tensors)

        def read(n: Expr) -> Expr | None:
            best = values.get(n.arg)
            return None if best is None else Expr(Op.READ, n.dtype, n.src, best)
        ops = dict.fromkeys(t.op for t in tensor_graph(tensors) if isinstance(t.op, ComputeOp))
        bodies = {op: tuple(replace_reads(b, read) for b in op.body) for op in ops}
        return rebuild(tensors, {op: b for op, b in bodies.items() if b != op.body})

    # ---- helper tensors -----------------------------------------------------------------
    def _destination(self, op: ComputeOp, source: Expr,
                     site: Expr) -> tuple[Tensor, tuple[int, ...], Expr, list[Expr]] | None:
        """``(E, dims, rest, guards)``: where a lone winner's head lands, computed once per output by a
        tensor the forward saves (``Role.SAVED``).  ``E(i)`` is the row-major offset, within the axes
        ``dims`` of ``x`` the window moves along, of the read ``x[phi(i, k*)]`` at the winner
        ``k* = unflatten(W(i))``; or -1 where the ``where`` or the read's guard fails at ``k*``, and
        (max/min) ``-1 - T(i)`` where ``T(i) > 1`` (the tie term decodes the count and finds the tied
        points by value).  The backward then reads neither ``W`` nor ``T``; the scatter tests
        ``E(i) >= 0`` and adds at ``E(i)``'s digits.  ``rest``: the read's derivative under its
        ``guards``.  ``None`` when :meth:`_landing` declines the form, and for a running reduction
        (:func:`_running`), whose scan stores ``W`` and ``T`` at every output: the scatter reads them."""
        key = (op, site)
        if key in self._destinations:
            return self._destinations[key]
        self._destinations[key] = None
        body = op.body[0]
        landing = self._landing(op, site) if source is body.src[1] and _running(op) is None else None
        _, winner, ties = self._winner(op)
        if landing is None or len(winner) != 1:
            return None
        dims, guards, rest = landing
        ra: ReduceArg = body.arg
        m = copy_vars(tuple(op.axes))
        iv = [m[a] for a in op.axes]
        if op in self._quotients:  # a lone winner's point, read where T == 1 (below) alone
            jv, quotient = self._quotients[op]  # (clipped like a winner's index: a data index
            point = data_index(rename(quotient, dict(zip(jv, iv))), combiners.box_size(ra.axes),  # the
                               "clip", f"{op.name}.hits")  # where-condition and guards read at the point)
        else:
            point = data_index(winner[0][tuple(iv)], combiners.box_size(ra.axes), "clip", winner[0].name)
        m.update(zip(ra.axes, _unflatten(point, ra.axes)))
        conds = [c for g in [rename(body.src[0], m)] + [unchecked(rename(g, m)) for g in guards]
                 for c in conjuncts(g) if not _holds(c)]
        none = const(-1, dt.INDEX)
        if ties is not None:
            count = ties[tuple(iv)]
            conds.append(compare(Op.EQ, count, const(1, count.dtype)))
            none = choice(Op.SELECT, compare(Op.GT, count, const(1, count.dtype)), none - count, none)
        flat: Expr | None = None
        for k in dims:
            e = unchecked(rename(site.src[k], m))
            flat = e if flat is None else flat * const(site.arg.shape[k], dt.INDEX) + e
        assert flat is not None
        (offsets,) = compute(f"{op.name}.dest", iv, [choice(Op.SELECT, all_of(conds), flat, none)],
                             provenance=Provenance(Role.SAVED))
        found = self._destinations[key] = (offsets, dims, rest, guards)
        return found

    def _landing(self, op: ComputeOp, site: Expr) -> tuple[tuple[int, ...], list[Expr], Expr] | None:
        """``(dims, guards, rest)``: the axes of the read ``site`` that move with the window, its guards
        (the zero branches of its derivative) and its derivative under them, when those do not depend on
        the window point and ``x``'s moving axes hold fewer than 2**31 elements; else ``None``."""
        body = op.body[0]
        window = set(body.arg.axes)
        dims = tuple(k for k, e in enumerate(site.src) if window & set(free_vars(e)))
        rest = partial_by_read(body.src[1], site) if any(site is n for n in walk(body.src[1])) else ZERO
        guards = []
        while rest is not ZERO and zero_branch(rest) == 2:
            guards.append(rest.src[0])
            rest = rest.src[1]
        if not dims or rest is ZERO or window & set(free_vars(rest)):
            return None
        if any(n.op is Op.READ for e in (*guards, *(site.src[k] for k in dims)) for n in walk(e)):
            return None  # (a read the forward would make at every output point, unguarded)
        if not self.holds(math.prod([site.arg.shape[k] for k in dims]) < dt.max_value("int32")):
            return None
        return dims, guards, rest

    def _compared_source(self, op: ComputeOp, m: dict) -> Expr:
        """The source of a max/min/prod ``op`` at the point ``m``, for the tie test and a box product's
        zero test and the reductions they compare with: the source itself where it recomputes exactly
        (inexact elementwise reads replaced by saved copies), else a read of ``op.tie`` (:meth:`_saved`)."""
        saved = self._saved(op)
        if saved is None:
            return rename(self._exact_sources[op], m)
        tensor, axes = saved
        ra = op.body[0].arg
        return tensor[tuple(m[a] for a in axes) + tuple(m[k] - k.lo if k.lo else m[k] for k in ra.axes)]

    def _saved(self, op: ComputeOp) -> tuple[Tensor, list[Expr]] | None:
        """Values stored once (``Role.SAVED``) so that a max/min's winner and tie test, or a box product's
        zero test and zero count, compare the same bits, or ``None`` when the source recomputes exactly:
        each elementwise tensor it reads copied (``C.tie``), or a source still rounding twice stored over
        the domain (``Y.tie``) with the output axes it stores along: those the source reads, where the
        ``where`` projects onto them (a running max's terms once, not once per output)."""
        if op in self._saved_values:
            return self._saved_values[op]
        body = op.body[0]
        source, found = body.src[1], None
        if not recomputes_exactly(source, inlined=True):
            # Keyed by tensor: ``rewrite`` rebuilds bottom-up, so a read of a copy is a new node by then.
            copied = {n.arg for n in walk(source) if n.op is Op.READ and _inlinable(n.arg)
                      and roundings(n.arg.op.body[n.arg.value_index], True)}
            source = rewrite(source, lambda n: self._copy(n.arg)[tuple(n.src)]
                             if n.op is Op.READ and n.arg in copied else None)
        if not recomputes_exactly(source):
            source, ra = body.src[1], body.arg
            axes, where = list(op.axes), body.src[0]
            read = [a for a in axes if a in free_vars(source)]
            met = _window_met([*read, *ra.axes], [a for a in axes if a not in read], where) \
                if len(read) < len(axes) else None
            if met is not None:
                axes, where = read, met
            m, kz = copy_vars(axes), {k: var(k.name, 0, k.extent) for k in ra.axes}
            m.update({k: z + const(k.lo, z.dtype) if k.lo else z for k, z in kz.items()})
            cond, value = rename(where, m), rename(source, m)
            if cond is not TRUE:  # out of the domain the source may read out of bounds; what is
                # stored there is never read (each reader reduces where ``cond`` holds): a zero, so
                # that the copy runs on the domain only
                value = choice(Op.IF_THEN_ELSE, cond, value, const(0, value.dtype))
            (tensor,) = compute(f"{op.name}.tie", [m[a] for a in axes] + list(kz.values()), [value],
                                provenance=Provenance(Role.SAVED))
            found = tensor, axes
        self._saved_values[op] = found
        self._exact_sources[op] = source
        return found

    def _copy(self, t: Tensor) -> Tensor:
        """``t`` stored once (``Role.SAVED``) for the tie tests that read it (one per tensor)."""
        found = self._copies.get(t)
        if found is None:
            axes = axis_vars(t.shape)
            (found,) = compute(f"{t.name}.tie", axes, [t[tuple(axes)]], provenance=Provenance(Role.SAVED))
            self._copies[t] = found
        return found

    def _winner(self, op: ComputeOp) -> tuple[Tensor, tuple[Tensor, ...], Tensor | None]:
        """``(value, index, ties)`` of the op's winner reduction (built once): its first value, the
        flattened winning point (:func:`combiners.flat_index`, or its :func:`combiners.digits` when the
        box may not fit an int32: of one axis, the flattening alike) and, for ``max``/``min``, the tie
        count (else ``None``)."""
        found = self._winners.get(op)
        if found is not None:
            return found
        body = op.body[0]
        ra = body.arg
        m = copy_vars(op.axes + ra.axes)
        kv = tuple(m[k] for k in ra.axes)
        flat = combiners.flat_index(kv, self.holds)
        keys = (flat,) if flat is not None else tuple(combiners.digits(kv))
        order = _running(op)
        if order == -1:  # a suffix: over the reversed axis, scanned in the plain loop's order
            rev = copy_vars(kv)
            back = {k: const(k.lo + k.hi - 1, k.dtype) - rev[k] for k in kv}
            keys = tuple(rename(e, back) for e in keys)
            m.update({a: back[m[a]] for a in ra.axes})
            kv = tuple(rev[k] for k in kv)
        red = combiners.winner_reducer(ra.combiner, len(keys))
        sources = tuple(rename(s, m) for s in body.src[1:])
        tied = combiners.classify(ra.combiner)[0] in ("max", "min")
        lone = (self._lone_winner(op) if tied and flat is not None and ra.combiner.arity == 1
                and order is None and recomputes_exactly(body.src[1], inlined=True)
                and _along_outputs(body.src[1], op.axes) else None)
        if lone is not None:  # (the maximum and the sum compute the source alike: the same bits)
            self._winners[op] = lone
            return lone
        if tied:
            sources = (self._compared_source(op, m),)
        src = (rename(body.src[0], m),) + sources + keys
        src += (const(1, red.lhs[-1].dtype),) * (len(red.lhs) - len(src) + 1)  # each point counts 1
        bodies = [Expr(Op.REDUCE, lhs.dtype, src, ReduceArg(red, kv, t)) for t, lhs in enumerate(red.lhs)]
        iv = [m[a] for a in op.axes]
        used = [v for v in iv if not tied or any(v in free_vars(e) for e in src)]  # (others: one winner)
        outs = compute(f"{op.name}.winner", used, bodies)
        if len(used) < len(iv):
            jv = axis_vars(op.shape)
            at = tuple(j for v, j in zip(iv, jv) if v in used)
            outs = [compute(f"{t.name}.all", jv, [t[at]])[0] for t in outs]
        arity = ra.combiner.arity
        idx = outs[arity:arity + len(keys)]
        ties = outs[arity + len(keys)] if len(outs) > arity + len(keys) else None
        found = self._winners[op] = (outs[0], idx, ties)
        return found

    def _lone_winner(self, op: ComputeOp) -> tuple[Tensor, tuple[Tensor], Tensor] | None:
        """``(value, (index,), ties)`` of a max/min whose source recomputes exactly, from the code
        ``A(i) = sum over k of [s(i, k) == Y(i)] (1 + K k)``, ``K`` a power of two above the box's size,
        which holds the ties ``T = A % K`` and, when ``T == 1``, the lone winner ``A // K`` (else the
        sentinel).  The value and ``A`` come from one pass over the window
        (:func:`combiners.tie_code_reducer`), unless another op of the program reads ``Y`` (the gradient
        computes it anyway) or the source is ``if_then_else(g, e, c)`` whose guard reads no data (a padded
        window): then the value is ``Y`` itself and ``A`` a sum beside it, of ``e`` where ``g`` holds and
        ``c`` elsewhere, so that neither pass tests the guard.  ``None`` if ``A`` may pass int32."""
        body = op.body[0]
        size = combiners.box_size(body.arg.axes)
        if isinstance(size, Expr):  # (``K`` is a power of two above the size: a static choice)
            if self.exact:
                raise SizeDecisionError(f"{op.name}: a lone winner's code depends on the window size {size}")
            return None
        scale = 1 << size.bit_length()
        if size + scale * size * (size - 1) // 2 >= dt.max_value("int32"):
            return None
        value = Tensor(op, 0)
        cond, s = body.src
        jv = axis_vars(op.shape)
        a: Expr | None = None
        parts = [(cond, s)] if value in self.read else []
        if s.op is Op.IF_THEN_ELSE and not reads_data(g := s.src[0]):
            parts = [(all_of([cond, Expr(Op.NOT, dt.BOOL, (g,))]), s.src[2]), (all_of([cond, g]), s.src[1])]
        elif not parts:
            m = copy_vars(op.axes + body.arg.axes)
            kv = tuple(m[k] for k in body.arg.axes)
            weight = const(1, dt.INDEX) + const(scale, dt.INDEX) * combiners.flat_index(kv, self.holds)
            red = combiners.tie_code_reducer(body.arg.combiner)
            src = (rename(cond, m), rename(s, m), weight)
            bodies = [Expr(Op.REDUCE, lhs.dtype, src, ReduceArg(red, kv, t)) for t, lhs in enumerate(red.lhs)]
            value, acc = compute(f"{op.name}.hits", [m[v] for v in op.axes], bodies)
            a = acc[tuple(jv)]
        for where, e in parts:
            m = copy_vars(op.axes + body.arg.axes)
            iv, kv = [m[v] for v in op.axes], [m[k] for k in body.arg.axes]
            flat = combiners.flat_index(kv, self.holds)
            assert flat is not None
            weight = const(1, dt.INDEX) + const(scale, dt.INDEX) * flat
            same, where = combiners.ties_result(rename(e, m), value[tuple(iv)]), rename(where, m)
            if e.op is Op.CONST:  # the sum of the weights, over the axes the points depend on
                used = [k for k, v in enumerate(iv) if v in free_vars(where)]
                (acc,) = compute(f"{op.name}.hits", [iv[k] for k in used], [sum_reducer(weight, kv, where)])
                at = rename(same, dict(zip(iv, jv)))
                term = choice(Op.SELECT, at, acc[tuple(jv[k] for k in used)], const(0, dt.INDEX))
            else:
                hit = choice(Op.SELECT, same, weight, const(0, dt.INDEX))
                where = None if where is TRUE else where
                (acc,) = compute(f"{op.name}.hits", iv, [sum_reducer(hit, kv, where)])
                term = acc[tuple(jv)]
            a = term if a is None else a + term
        assert a is not None
        ties, quotient = a % const(scale, dt.INDEX), a // const(scale, dt.INDEX)
        self._quotients[op] = (jv, quotient)
        lone = choice(Op.SELECT, compare(Op.EQ, ties, const(1, dt.INDEX)), quotient,
                      const(combiners.INDEX_SENTINEL, dt.INDEX))
        kv = axis_vars(op.shape)  # (each compute over variables of its own)
        return (value, compute(f"{op.name}.first", jv, [lone]),
                compute(f"{op.name}.ties", kv, [rename(ties, dict(zip(jv, kv)))])[0])

    def _box_others(self, op: ComputeOp) -> Callable:
        """For a product over a box (:func:`_where_linked` false), the product of the other factors at
        each point, as an ``extra`` of :meth:`_site_terms`: from the zero count ``Z`` and the product of
        the nonzero factors ``P`` (:meth:`_prod`), ``P / g`` when ``Z == 0``, ``P`` at the single zero
        when ``Z == 1``, else 0, one fused pass over the box.  ``Z`` is a float whose tangent is the zero
        factors' tangents, so the branches that are 0 keep their derivatives (second order)."""
        zeros, nonzero = self._prod(op)

        def others(m: dict, iv: list, kv: list) -> tuple[list[Expr], Expr]:
            g = self._compared_source(op, m)  # the bits Z and P were counted from
            counted, pr = zeros[tuple(iv)], nonzero[tuple(iv)]
            is0 = compare(Op.EQ, g, const(0, g.dtype))
            q, zero = pr / choice(Op.SELECT, is0, const(1, g.dtype), g), const(0, g.dtype)
            z = cast(dt.INDEX, counted)  # (the count, without the zeros' tangents ``counted`` carries)
            zs = counted - cast(counted.dtype, z)  # 0, whose tangent is the zero factors' tangents

            def vanishing(scale: Expr, carrier: Expr) -> Expr:  # (0 where ``P`` overflowed)
                finite = compare(Op.LT, unary(Op.ABS, pr), const(math.inf, pr.dtype))
                return choice(Op.SELECT, finite, scale * cast(scale.dtype, carrier), zero)
            # Each branch's value is the product of the other factors, and so is its derivative: one
            # zero elsewhere gives 0 whose tangent is q times that zero's; two zeros, one here, give 0
            # whose tangent is P times the other's (what forward mode over this gradient reads).
            one = choice(Op.SELECT, is0, pr, vanishing(q, zs))
            two = choice(Op.SELECT, logical(Op.AND, compare(Op.EQ, z, const(2, z.dtype)), is0),
                         vanishing(pr, zs - cast(zs.dtype, g)), zero)
            return [], choice(Op.SELECT, compare(Op.EQ, z, const(0, z.dtype)), q,
                              choice(Op.SELECT, compare(Op.EQ, z, const(1, z.dtype)), one, two))

        return others

    def _prod(self, op: ComputeOp) -> tuple[Tensor, Tensor]:
        """``(Z, P)``: the number of zero factors of a box product (a float: each zero adds ``1 + g``,
        whose tangent is g's) and the product of the nonzero ones, one reduction over the box
        (:data:`combiners.ZEROS_AND_PRODUCT`), from the factors' bits that :meth:`_box_others`' zero
        test reads too."""
        found = self._boxes.get(op)
        if found is not None:
            return found
        body = op.body[0]
        m = copy_vars(op.axes + body.arg.axes)
        cond, g = rename(body.src[0], m), self._compared_source(op, m)
        is0, cd = compare(Op.EQ, g, const(0, g.dtype)), dt.compute_dtype(g.dtype)
        sources = (choice(Op.SELECT, is0, const(1, cd) + cast(cd, g), const(0, cd)),
                   choice(Op.SELECT, is0, const(1, g.dtype), g))
        where = None if cond is TRUE else cond
        reds = combiners.ZEROS_AND_PRODUCT(sources, [m[k] for k in body.arg.axes], where)
        zeros, nonzero = compute(f"{op.name}.zeros_prod", [m[a] for a in op.axes], list(reds))
        found = self._boxes[op] = (zeros, nonzero)
        return found

    def _others(self, op: ComputeOp) -> Callable | None:
        """For a product whose ``where`` reads an output axis or data (:func:`_where_linked`), the
        product of the other factors at each point ``k``: ``E S``, with
        ``E`` the exclusive prefix and ``S`` the exclusive suffix product of the factors (1 where the
        condition fails) along the box's points in row-major order (:meth:`_before`), two scans that
        read no division.  As an ``extra`` of :meth:`_site_terms`; ``None`` for a box whose points may
        not fit an int32."""
        found = self._prods.get(op)
        if found is None:
            body = op.body[0]
            raxes = body.arg.axes
            flat = combiners.flat_index(raxes, self.holds)
            if flat is None:
                return None
            # (a conjunct of the condition that reads no point of the box keeps or drops the whole
            # product: the terms' routing tests it, the factors need not)
            cond = all_of([c for c in conjuncts(body.src[0]) if set(free_vars(c)) & set(raxes)])
            factor = _factor(cond, body.src[1])
            used = [a for a in op.axes if a in free_vars(factor)]
            axes = [*used, var("t", 0, combiners.box_size(raxes))]
            found = self._prods[op] = (used, flat, [
                self._before(f"{op.name}.{side}", axes, len(used),
                             lambda e: rename(factor, dict(zip(raxes, _unflatten(e, raxes)))), step)
                for side, step in (("before", 1), ("after", -1))])
        used, flat, sides = found

        def others(m: dict, iv: list, kv: list) -> tuple[list[Expr], Expr]:
            at = rename(flat, m)
            e, s = (rename(side, {**dict(zip(used, (m[a] for a in used))), side_t: at})
                    for side, side_t in sides)
            return [], combiners.strong_product(e, s, both=True)

        return others

    def _before(self, name: str, axes: list[Expr], pos: int, factor: Callable[[Expr], Expr],
                step: int) -> tuple[Expr, Expr]:
        """``(value, t)``: the product of the factors ``factor(w)`` strictly before ``t = axes[pos]``
        (``step = 1``) or after it (``step = -1``), read at ``t``: an exclusive prefix, a scan, whose
        factors combine as :func:`combiners.strong_product` (a zero factor gives 0 beside an infinite
        one); a suffix is the prefix over the mirrored axis, read back mirrored."""
        t = axes[pos]
        lo, hi = t.lo, t.hi
        w = var("w", lo, hi)
        real = w if step > 0 else const(lo + hi - 1, w.dtype) - w
        d = factor(real).dtype
        exclusive = combiners.strong_product_reducer(prod_reducer.instantiate((d,)))
        (prefix,) = compute(name, axes, [Expr(Op.REDUCE, d, (compare(Op.LT, w, t), factor(real)),
                                               ReduceArg(exclusive, (w,), 0))])
        mirrored = t if step > 0 else const(lo + hi - 1, t.dtype) - t
        return prefix[tuple(axes[:pos]) + (mirrored,) + tuple(axes[pos + 1:])], t

    def _reranged(self, op: ComputeOp, heads: dict[int, Tensor], kind: str) -> tuple | None:
        """A plain prefix or suffix (:func:`~tensorad.poly.nesting.plain_prefix`) along an output axis ``j``
        whose range is not its window axis ``k``'s, beside one-point axes, or whose window reaches past ``j``
        (``shift < 0``), as ``(P, heads, at)``: with ``[lo, hi)`` the points of ``k`` some window holds,
        ``P[q] = reduce_{lo <= k <= lo + q}`` (a suffix ``k >= lo + q``) and ``Y[j] = P[clamp(j - shift -
        lo)]`` where the window has a point, so ``P``'s head at ``q`` is ``H[q + lo + shift]`` and, at the
        end, every ``H[j]`` past it; ``at`` moves an expression over ``Y``'s axes to ``P``'s (its value at
        the output that reads ``P[q]``, 0 where none does): a padded window's count of padded points
        (:meth:`_unpadded`), the same for every output past the end when the padding's box does not move
        with ``j``."""
        body, key = op.body[0], (op, tuple(heads.items()))
        units = {a: const(a.lo, a.dtype) for a in body.arg.axes if a.extent == 1}  # (points a copy left)
        ks, srcs = [a for a in body.arg.axes if a not in units], [rename(e, units) for e in body.src]
        found = None if kind == "recurrence" and set(heads) != {1} or len(ks) != 1 else \
            plain_prefix(op.axes, ks, srcs[0], srcs[1:])
        if found is None:
            return None
        (pos, step, rest, shift), (k,), jax = found, ks, op.axes[found[0]]
        k_hi, least = k.hi, index_bounds(k.hi) if isinstance(k.hi, Expr) else None
        if step > 0 and least is not None and type(jax.hi) is int and least[0] >= jax.hi - shift:
            k_hi = jax.hi - shift  # (an end in sizes that no window reaches: the windows' end)
        if any(type(b) is not int for b in (jax.hi, k.lo, k_hi)) or jax.lo \
                or (0, jax.hi) == k.dom and not units and shift >= 0:
            return None
        lo, hi = max(k.lo, shift) if step < 0 else k.lo, min(k_hi, jax.hi - shift) if step > 0 else k_hi
        if key not in self._nests and hi > lo:
            ix, w = partial(const, dtype=jax.dtype), var(k.name, 0, hi - lo, k.dtype)
            q, t = var(jax.name, 0, hi - lo, jax.dtype), var("t", 0, jax.hi, jax.dtype)
            m, c = {**copy_vars(op.axes), jax: q, k: w + const(lo, k.dtype)}, lo + step * shift
            side = compare(Op.LE if step > 0 else Op.GE, k, jax)
            cond = rename(all_of([*rest, side]), {**m, jax: q + ix(lo)})
            sub = compute(op.name, [m[a] for a in op.axes], [Expr(Op.REDUCE, b.dtype, (cond, *(
                rename(e, m) for e in srcs[1:])), ReduceArg(b.arg.combiner, (w,), b.arg.value_index))
                for b in op.body], op.provenance)[0].op
            moved, av = {}, [m[a] for a in op.axes]
            past = t > ix(hi - 1 + shift) if step > 0 else t < ix(lo - shift)  # (P's last point)
            e = q + ix(c)
            here = all_of([e >= ix(0), e < ix(jax.hi)])  # (lazy: ``H`` is read in its bounds only)
            for v, h in heads.items():
                pv = axis_vars(h.shape[:h.ndim - len(op.axes)], prefix="p")

                def read(e: Expr, h: Tensor = h, pv: list = pv) -> Expr:
                    return cast(dt.compute_dtype(h.dtype), h[(*pv, *av[:pos], e, *av[pos + 1:])])

                end = compare(Op.EQ, q, ix(hi - lo - 1 if step > 0 else 0))
                total = choice(Op.IF_THEN_ELSE, here, read(e), const(0, read(e).dtype)) + \
                    head_sum(head_sum(read(t), [t], past), (), end)
                g = compute(f"{h.name}.ranged", pv + av, [cast(h.dtype, total)], adjoint_of(Tensor(sub, v)))
                moved[v] = g[0] if self.optimizer is None else self.optimizer(g[0])
            self._nests[key] = sub, moved, lambda f: choice(Op.SELECT, here, rename(f, {**m, jax: e}),
                                                              const(0, f.dtype))
        return self._nests.get(key)

    def _unpadded(self, op: ComputeOp) -> tuple[ComputeOp, Expr] | None:
        """A max/min that pads its one reduction axis with its identity, ``max_k if_then_else(c, e, -inf)``
        with ``c`` affine in the indices, as ``(op', P)``: ``op'`` the reduction over the points where ``c``
        holds (:func:`~tensorad.lang.tensor_lang.guard_into_domain`) and ``P`` the count of padded points
        per output (:func:`~tensorad.poly.nesting.interval_count`).  The padding ties the result only where
        it is the identity, so ``op``'s adjoint is ``op'``'s with ``P`` more ties there; ``None`` where
        the guard moves nothing or the count is not an interval's."""
        if op not in self._unpaddeds:
            body, found = op.body[0], None
            bare = guard_into_domain(body)
            if bare is not body and len(body.arg.axes) == 1:
                pads = interval_count(op.axes, body.arg.axes[0],
                                      logical(Op.AND, body.src[0], logical_not(bare.src[0])))
                if pads is not None:
                    found = (compute(op.name, op.axes, [bare], op.provenance)[0].op, pads)
            self._unpaddeds[op] = found
        return self._unpaddeds[op]

    def _line_terms(self, op: ComputeOp, heads: dict[int, Tensor], x: Tensor, p: Sequence[Expr],
                    j: Sequence[Expr], kind: str, pads: Expr | None = None) -> list[Expr] | None:
        """The terms of a product or a linear recurrence (:func:`combiners.recurrence_reducer`) that runs
        along a line: a plain prefix or suffix (:func:`~tensorad.poly.nesting.plain_prefix`; the other
        output axes ride along), each term ``k`` entering at ``j = k`` or a constant shift away (``k < j``).
        The adjoint of each source at its term is a tensor over the output axes (:meth:`_line_adjoints`),
        read at each site as an elementwise op's head.  ``None`` for another domain, or a recurrence
        whose running product has a head.  ``pads``: a max's or min's padded points per output
        (:meth:`_unpadded`), tied with it where it is the identity."""
        body = op.body[0]
        found = plain_prefix(op.axes, body.arg.axes, body.src[0], body.src[1:])
        if found is None or found[3] < 0 or op.axes[found[0]].dom != body.arg.axes[0].dom \
                or kind == "recurrence" and (set(heads) != {1} or found[3]):
            return None  # (another range, or a window past its output: :meth:`_reranged`)
        (pos, step, rest, shift), m = found, {body.arg.axes[0]: op.axes[found[0]]}
        cond, sources = rename(all_of(rest), m), [rename(e, m) for e in body.src[1:]]
        if (key := (op, heads[max(heads)])) not in self._lines:
            self._lines[key] = self._tie_adjoint(op, heads[0], len(p), pos, step, shift, pads) \
                if kind in ("max", "min") else \
                self._line_adjoints(op, heads[max(heads)], len(p), pos, step, shift, cond, sources)
        return [t for src, adj in zip(sources, self._lines[key])
                for t in self._site_terms(op.axes, (), cond, src, adj, x, p, j)]

    def _line_adjoints(self, op: ComputeOp, head: Tensor, n_prefix: int, pos: int, step: int, shift: int,
                       cond: Expr, sources: Sequence[Expr]) -> list[Tensor]:
        """The adjoint of each source at its term, over the head's prefix and ``op``'s axes.
        Division-free, for a prefix (a suffix mirrored); ``g`` the factor (the source of a
        product, the multiplier ``a`` of a recurrence), 1 where ``c(k)`` fails::

            product     Y[j] = prod_{k <= j} g(k):   G[k] = E[k] S[k],  E[k] = prod_{i < k} g(i)
            recurrence  B[j] = a(j) B[j - 1] + b(j): G_b[k] = S[k],     G_a[k] = B[k - 1] S[k]

        with ``S[k] = sum_{j >= k} H[j] prod_{k < i <= j} g(i) = H[k] + g(k + 1) S[k + 1]``
        (:meth:`_suffix_recurrence`) and ``B[lo - 1] = 0``: the adjoint of a recurrence is a
        recurrence again, so every order of derivative stays a few scans.  Every product is
        strong in its zero factors ``g`` (:func:`combiners.strong_product`), so a term with a
        zero factor is 0 whatever the other factors are: no NaN of ``0 * inf``.  A term ``k``
        that enters the output ``k + shift`` (``k < j``: 1) reads the head there."""
        d, lo, hi = sources[0].dtype, op.axes[pos].lo, op.axes[pos].hi
        pv, m, g = axis_vars(head.shape[:n_prefix], prefix="p"), copy_vars(op.axes), _factor(cond, sources[0])
        av = [m[a] for a in op.axes]
        t = av[pos]
        after = self._suffix_recurrence(op, lambda e: head[tuple(pv) + tuple(e)], pv, m, pos, step, shift, g)
        g_after = after[tuple(pv) + tuple(av)]
        if len(sources) == 2:  # a recurrence: its sum before the term
            first = compare(Op.EQ, t, const(lo if step > 0 else hi - 1, t.dtype))
            carried = Tensor(op, 1)[(*av[:pos], t - const(step, t.dtype), *av[pos + 1:])]
            before = choice(Op.IF_THEN_ELSE, first, const(0, d), carried)
            values = [before * g_after, g_after]
        else:
            before, _ = self._before(f"{op.name}.before", av, pos,
                                     lambda e: rename(g, {**m, op.axes[pos]: e}), step)
            values = [combiners.strong_product(before, g_after)]
        return [compute(f"{op.name}.adjoint", pv + av, [v])[0] for v in values]

    def _tie_adjoint(self, op: ComputeOp, head: Tensor, n_prefix: int, pos: int, step: int,
                     shift: int, pads: Expr | None = None) -> list[Tensor]:
        """The adjoint of a running max/min's source at its term ``k``, over the head's prefix and
        ``op``'s axes, linear in the worst case.  For a prefix ``Y[j] = max_{k <= j - shift} A[k]``
        (a suffix mirrored) with ``T[j]`` the tie count of the winner scan (:meth:`_winner`), a term
        ``k`` that ties ``Y`` at the first output that reads it, ``e = k + shift``, ties every later
        output while ``Y`` keeps its value (``Y`` is monotone) and no other, so::

            G[k] = [A[k] ~ Y[e]] S[e],   S[j] = H[j] / T[j] + [Y[j + 1] ~ Y[j]] S[j + 1]

        ``S`` a suffix recurrence (:meth:`_suffix_recurrence`) whose 0 links hold back an infinite or
        NaN head of another run, ``~`` the tie test (equal, or both NaN).  ``pads`` (over ``op``'s axes):
        the points a guard padded with the identity, counted in ``T`` where ``Y`` is the identity."""
        (best, _, ties), body = self._winner(op), op.body[0]
        (k,), jax, d = body.arg.axes, op.axes[pos], body.src[1].dtype
        pv, m = axis_vars(head.shape[:n_prefix], prefix="p"), copy_vars(op.axes)
        av = [m[a] for a in op.axes]

        def at(axes: Sequence[Expr], e: Expr) -> tuple[Expr, ...]:
            return (*axes[:pos], e, *axes[pos + 1:])

        back = at(op.axes, jax - const(step, jax.dtype))
        link = choice(Op.SELECT, combiners.ties_result(best[back], best[tuple(op.axes)]), const(1, d),
                      const(0, d))

        def share(e: list[Expr]) -> Expr:
            count = cast(d, ties[tuple(e)])
            if pads is not None:
                padded = compare(Op.EQ, best[tuple(e)], body.arg.combiner.identity[0])
                count = count + choice(Op.SELECT, padded, cast(d, rename(pads, dict(zip(op.axes, e)))),
                                       const(0, d))
            return cast(d, head[tuple(pv) + tuple(e)]) / count

        after, t = self._suffix_recurrence(op, share, pv, m, pos, step, 0, link), av[pos]
        e = t + const(step * shift, t.dtype) if shift else t
        source = self._compared_source(op, {**m, jax: e, k: t})
        value = choice(Op.IF_THEN_ELSE, combiners.ties_result(source, best[at(av, e)]),
                       after[tuple(pv) + at(av, e)], const(0, d))
        if shift:  # (a term no output reads: past the end)
            inside = e < const(jax.hi, e.dtype) if step > 0 else e >= const(jax.lo, e.dtype)
            value = choice(Op.IF_THEN_ELSE, inside, value, const(0, d))
        return [compute(f"{op.name}.adjoint", pv + av, [value])[0]]

    def _suffix_recurrence(self, op: ComputeOp, head: Callable[[list[Expr]], Expr], pv: list[Expr], m: dict,
                           pos: int, step: int, shift: int, factor: Expr) -> Tensor:
        """``S[k] = sum_{j >= k} H[j] prod_{k < i <= j} g(i)`` over ``pv`` and ``op``'s axes (the
        copies ``m``), ``H[j]`` the expression ``head`` at the output index ``j`` (without the
        prefix), ``g`` the expression ``factor`` at the scanned axis: the fold of the
        recurrence's pairs ``(g(j + 1), H[j])`` from the end (:func:`combiners.recurrence_reducer`),
        an ordered prefix over a mirrored index that a scan carries, then read back in place.
        A suffix (``step = -1``) mirrored: ``S[k] = sum_{j <= k} H[j] prod_{j <= i < k} g(i)``."""
        jax, av, d = op.axes[pos], [m[a] for a in op.axes], factor.dtype
        lo, hi, t, u = jax.lo, jax.hi, av[pos], var("u", jax.lo, jax.hi)

        def at(e: Expr) -> list[Expr]:
            return av[:pos] + [e] + av[pos + 1:]

        # u runs over the positions from the end: rev(u) = lo + hi - 1 - u for a prefix, u for a suffix
        nxt, here = ((const(lo + hi, u.dtype) - u, const(lo + hi - 1, u.dtype) - u) if step > 0
                     else (u - const(1, u.dtype), u))
        a = choice(Op.IF_THEN_ELSE, compare(Op.EQ, u, const(lo, u.dtype)), const(1, d),
                   rename(factor, {**m, jax: nxt}))
        b = cast(d, head(at(here + const(step * shift, u.dtype) if shift else here)))
        if shift:  # (the term ``k`` enters the output ``k + step * shift``, 0 past the ends)
            inside = all_of([compare(Op.GE, here, const(lo - step * shift, u.dtype)),
                             compare(Op.LT, here, const(hi - step * shift, u.dtype))])
            b = choice(Op.IF_THEN_ELSE, inside, b, const(0, d))
        rec, src = combiners.recurrence_reducer(prod_reducer.instantiate((d,))), (compare(Op.LE, u, t), a, b)
        fold = compute(f"{op.name}.after", pv + av,
                       [Expr(Op.REDUCE, d, src, ReduceArg(rec, (u,), v)) for v in (0, 1)])
        back = const(lo + hi - 1, t.dtype) - t if step > 0 else t
        return compute(f"{op.name}.suffix", pv + av, [fold[1][tuple(pv) + tuple(at(back))]])[0]

    def _generic_terms(self, op: ComputeOp, heads: dict[int, Tensor], x: Tensor,
                       p: Sequence[Expr], j: Sequence[Expr]) -> list[Expr]:
        """``sum_i H[p, i] * J[i, j]`` with ``J`` the (der, value) Jacobian of the op by ``x``."""
        key = (op, x)
        if key not in self._jacobians:
            m, jv = copy_vars(op.axes + op.reduce_axes), axis_vars(x.shape, prefix="jac_i")
            ders = [body_jacobian(b, x, jv) for b in op.body]
            live = [v for v, d in enumerate(ders) if d is not ZERO]
            made = compute_each(f"{op.name}.jacobian", [m[a] for a in op.axes] + jv,
                                [rename(ders[v], m) for v in live]) if live else ()
            self._jacobians[key] = dict(zip(live, made))
        jac, terms = self._jacobians[key], []
        for v, h in heads.items():
            if v not in jac:
                continue
            iv = list(copy_vars(op.axes).values())
            value = cast(op.body[v].dtype, h[tuple(p) + tuple(iv)]) * jac[v][tuple(iv) + tuple(j)]
            terms.append(head_sum(cast(dt.compute_dtype(x.dtype), value), iv, TRUE))
        return terms
