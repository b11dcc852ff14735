"""What autodiff knows about reduction combiners: their kind, their derivative, their winner.

* :func:`classify` sorts a :class:`CommReducer` into ``sum``, ``prod``, ``max``, ``min``, ``recurrence``,
  ``select`` (a custom combiner that picks one side under one common condition, as argmax) or
  ``generic``; a custom ``x + y`` or ``x * y`` is recognised structurally.
* :func:`reduce_tangent` is the forward-mode rule of a ``REDUCE``: a sum of tangents for sums, otherwise a
  reduction over pairs ``(der, value)`` with the combiner differentiated (for ``max``, the first winner's
  tangent, as ``ta.Jacobian``); ``ta.jvp`` takes the mean of the tied points' tangents
  (:func:`mean_tie_reducer`), the transpose of reverse mode's even split of a tie.
* :func:`at_least`, :func:`beats` and :func:`ties_result`: the one order by which every max/min winner is
  found, NaN included (the section "the order of a max/min" below).
* :func:`winner_reducer` is the combiner of reverse mode's *winner* reduction: the original values and the
  row-major flattened reduce point (int32).  For ``max``/``min`` the lhs wins when it :func:`beats` the
  rhs, or ties with a smaller-or-equal index: the first winner in loop order wins (as PyTorch's
  ``max(dim)``) whatever the evaluation order.  The index identity is the largest int32.
* :func:`tie_code_reducer`: a ``max``/``min`` beside the sum of a code over the points tied with it, one
  pass (reverse mode's lone winner).
* :func:`recurrence_reducer`: the maps ``s -> a s + b`` composed in order, reverse mode's combiner for a
  running product; :func:`strong_product_reducer` a product whose zero factors are strong.
* :func:`needed_components` and :func:`project`: a tuple combiner restricted to the components that
  the wanted ones read (a generic tuple's running sum is a sum)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ..ir import dtype as dt
from ..ir.expr import (
    Expr,
    Op,
    ReduceArg,
    as_expr,
    binary,
    cast,
    choice,
    compare,
    const,
    logical,
    logical_not,
    unary,
    var,
)
from ..ir.reducer import CommReducer, Reducer
from ..ir.reducer import prod as prod_reducer
from ..ir.reducer import sum as sum_reducer
from ..ir.rewrite import substitute, walk
from ..poly.affine import always
from .emptiness import empty_where
from .zero import ZERO, Tangent, materialize

#: ``tangent(expr, leaf)``: the tangent of an expression given its leaves' (:func:`.rules.tangent`)
TangentRule = Callable[[Expr, Callable[[Expr], Tangent]], Tangent]

INDEX_SENTINEL = dt.max_value("int32")

#: ``(Z, P)`` in one pass: a sum (a product's zero count) beside a product (of its nonzero factors);
#: each component reads only itself (:func:`needed_components`), so each differentiates alone
ZEROS_AND_PRODUCT = Reducer(lambda x, y: (x[0] + y[0], x[1] * y[1]),
                            lambda z, p: (const(0, z), const(1, p)), "zeros_prod")


# ---- the order of a max/min -----------------------------------------------------------------
# A max/min reduction computes IEEE 754-2019's maximum/minimum: a NaN in the window makes the result NaN.
# Every winner test ranks a NaN above every number for max (below for min) and all NaNs equal:
#
#     at_least(x, y)   =  x >= y  |  isnan(x)          (max; x <= y | isnan(x) for min)
#     beats(x, y)      =  !at_least(y, x)
#     ties(x, y)       =  at_least(x, y) & at_least(y, x)  =  x == y  |  (isnan(x) & isnan(y))
#
# a total preorder, so "the first point that no point beats" is commutative and associative, and the
# result is NaN exactly where the winner is.  A NaN window's winner is its first NaN and its NaNs tie
# (docs/conventions.md).  Since a NaN point makes ``Y`` NaN, ``ties(s, Y)`` is ``s == Y | isnan(s)``
# (:func:`ties_result`).  ``isnan(x)`` is ``x != x``, which no build option makes false (codegen sets no
# ``nnan``).


def _isnan(x: Expr) -> Expr:
    return compare(Op.NE, x, x)


def at_least(kind: str, x: Expr, y: Expr) -> Expr:
    """Whether ``x`` is as good as ``y`` or better for ``max`` (``min``): ``x >= y`` (``<=``) or NaN."""
    plain = compare(Op.GE if kind == "max" else Op.LE, x, y)
    return logical(Op.OR, plain, _isnan(x)) if dt.is_float(x.dtype) else plain


def beats(kind: str, x: Expr, y: Expr) -> Expr:
    """Whether ``x`` is strictly better than ``y``: larger (smaller), or a NaN against a number."""
    return logical_not(at_least(kind, y, x))


def ties_result(s: Expr, y: Expr) -> Expr:
    """Whether the point value ``s`` ties with ``y``, the max/min of a window that holds ``s``
    (so a NaN ``s`` means a NaN ``y``): ``s == y``, or both NaN."""
    same = compare(Op.EQ, s, y)
    return logical(Op.OR, same, _isnan(s)) if dt.is_float(s.dtype) else same


def _is_const(e: Expr, value: float) -> bool:
    return e.op is Op.CONST and e.arg == value


def _sides(e: Expr, x: Expr, y: Expr) -> bool:
    return (e.src[0] is x and e.src[1] is y) or (e.src[0] is y and e.src[1] is x)


def classify(comb: CommReducer) -> tuple[str, Expr | None]:
    """``(kind, lhs_wins)``: the kind of ``comb`` and, for selecting kinds, the condition
    (over ``comb.lhs``/``comb.rhs``) under which the left operand is the result."""
    if comb.kind in ("sum", "prod", "max", "min"):
        return comb.kind, None
    derived = _derived_from_prod(comb)
    if derived is not None:
        return derived, None
    if comb.arity == 1:
        r, x, y = comb.result[0], comb.lhs[0], comb.rhs[0]
        ident = comb.identity[0]
        if r.op is Op.ADD and _sides(r, x, y) and _is_const(ident, 0):
            return "sum", None
        if r.op is Op.MUL and _sides(r, x, y) and _is_const(ident, 1):
            return "prod", None
        if r.op is Op.MAXIMUM and _sides(r, x, y):
            return "max", None
        if r.op is Op.MINIMUM and _sides(r, x, y):
            return "min", None
    cond = _common_selection(comb)
    return ("select", cond) if cond is not None else ("generic", None)


def _derived_from_prod(comb: CommReducer) -> str | None:
    """``"prod"`` for :func:`strong_product_reducer` of a built-in product, ``"recurrence"`` for its
    :func:`recurrence_reducer`; else ``None``.  Compared up to variable names (disk-cache copies)."""
    if comb.arity > 2 or any(d != comb.dtypes[0] for d in comb.dtypes) or not dt.is_float(comb.dtypes[0]):
        return None
    base = prod_reducer.instantiate(comb.dtypes[:1])
    for made, kind in ((strong_product_reducer(base), "prod"), (recurrence_reducer(base), "recurrence")):
        if made.arity == comb.arity and made.identity == comb.identity and _same_results(made, comb):
            return kind
    return None


def _same_results(a: CommReducer, b: CommReducer) -> bool:
    """Whether ``b``'s results are ``a``'s with ``a``'s operands renamed to ``b``'s."""
    renamed = dict(zip(a.lhs + a.rhs, b.lhs + b.rhs))
    return all(substitute(r, renamed) is q for r, q in zip(a.result, b.result))


def _common_selection(comb: CommReducer) -> Expr | None:
    """The common ``lhs wins`` condition of a selecting combiner, or ``None``."""
    found: Expr | None = None
    for r, x, y in zip(comb.result, comb.lhs, comb.rhs):
        if r.op is Op.SELECT and r.src[1] is x and r.src[2] is y:
            cond = r.src[0]
        elif r.op is Op.SELECT and r.src[1] is y and r.src[2] is x:
            cond = logical_not(r.src[0])
        elif r.op in (Op.MAXIMUM, Op.MINIMUM) and _sides(r, x, y):
            continue  # a max/min element agrees with any choice up to ties of its value
        else:
            return None
        if found is None:
            found = cond
        elif found is not cond:
            return None
    return found


# ---- components ------------------------------------------------------------------------------

def needed_components(comb: CommReducer, wanted: Sequence[int]) -> tuple[int, ...]:
    """The components of ``comb`` that its components ``wanted`` depend on, closed: component ``c``
    needs ``d`` when ``result[c]`` reads ``lhs[d]`` or ``rhs[d]`` (``triple``'s running sum needs
    only itself; ``argmax``'s index needs its value too)."""
    reads = [{d for d in range(comb.arity) if comb.lhs[d] in used or comb.rhs[d] in used}
             for used in ({n for n in walk(r) if n.op is Op.VAR} for r in comb.result)]
    kept, todo = set(wanted), list(wanted)
    while todo:
        for d in reads[todo.pop()] - kept:
            kept.add(d)
            todo.append(d)
    return tuple(sorted(kept))


def project(node: Expr, kept: Sequence[int], value: int) -> Expr:
    """The ``REDUCE`` ``node``'s tuple over the components ``kept`` of its combiner only (closed under
    :func:`needed_components`), giving component ``value`` (one of them): its value in the whole
    tuple, since no kept component's combine reads a dropped one.  A lone ``x + y`` or
    ``max(x, y)`` left is then a sum or a max to :func:`classify`, whose derivative needs no
    Jacobian of the whole tuple."""
    ra: ReduceArg = node.arg
    comb, kept = ra.combiner, tuple(kept)
    red = comb.derived.get(("project", kept))
    if red is None:
        red = comb.derived[("project", kept)] = CommReducer(
            f"{comb.name}.{'_'.join(map(str, kept))}", "custom", tuple(comb.lhs[c] for c in kept),
            tuple(comb.rhs[c] for c in kept), tuple(comb.result[c] for c in kept),
            tuple(comb.identity[c] for c in kept), comb.order_free)
    src = (node.src[0],) + tuple(node.src[1 + c] for c in kept)
    return Expr(Op.REDUCE, comb.lhs[value].dtype, src, ReduceArg(red, ra.axes, kept.index(value)))


# ---- forward mode ---------------------------------------------------------------------------

def pair_reducer(comb: CommReducer, tangent: TangentRule) -> CommReducer:
    """The derivative combiner over ``(x.der..., x...)``: ``(d combine, combine)``, with the
    tangent of the combine from ``tangent`` (:func:`.rules.tangent`)."""
    found = comb.derived.get("pair")
    if found is not None:
        return found
    xd = tuple(var(f"{v.name}.der", dtype=v.dtype) for v in comb.lhs)
    yd = tuple(var(f"{v.name}.der", dtype=v.dtype) for v in comb.rhs)
    leaves = dict(zip(comb.lhs + comb.rhs, xd + yd))
    kind, _ = classify(comb)
    if kind in ("max", "min") and comb.arity == 1:
        # Not ``maximum``'s tie rule (not associative over three ties): the first winner's tangent.
        x, y = comb.lhs[0], comb.rhs[0]
        ders = (choice(Op.SELECT, at_least(kind, x, y), xd[0], yd[0]),)
    else:
        ders = tuple(materialize(tangent(r, lambda n: leaves.get(n, ZERO)), r.dtype) for r in comb.result)
    ident = tuple(const(0, v.dtype) for v in comb.lhs)
    pair = CommReducer(f"{comb.name}.der", "custom", xd + comb.lhs, yd + comb.rhs,
                       ders + comb.result, ident + comb.identity)
    comb.derived["pair"] = pair
    return pair


def tie_sum(kind: str, x: Expr, y: Expr, a: Expr, b: Expr) -> Expr:
    """``a`` where ``x`` beats ``y`` (:func:`beats`), ``b`` where ``y`` beats ``x``, ``a + b`` at a tie."""
    return choice(Op.SELECT, beats(kind, x, y), a, choice(Op.SELECT, beats(kind, y, x), b, a + b))


def mean_tie_reducer(comb: CommReducer) -> CommReducer:
    """Forward mode's combiner of a ``max``/``min`` over ``(tangent, value, count)``: the side that
    :func:`beats` the other keeps its tangent sum and count, tied sides add theirs (quotient: the mean)."""
    found = comb.derived.get("mean")
    if found is not None:
        return found
    kind, _ = classify(comb)
    x, y = comb.lhs[0], comb.rhs[0]
    xd, yd = var(f"{x.name}.der", dtype=x.dtype), var(f"{y.name}.der", dtype=y.dtype)
    cx, cy = var("ties.x", dtype=dt.INDEX), var("ties.y", dtype=dt.INDEX)
    der, count = tie_sum(kind, x, y, xd, yd), tie_sum(kind, x, y, cx, cy)
    red = CommReducer(f"{comb.name}.der", "custom", (xd, x, cx), (yd, y, cy), (der, comb.result[0], count),
                      (const(0, x.dtype), comb.identity[0], const(0, dt.INDEX)))
    comb.derived["mean"] = red
    return red


def reduce_tangent(node: Expr, dsrc: Sequence[Tangent], tangent: TangentRule, ties: str = "first") -> Tangent:
    """Forward-mode tangent of a ``REDUCE`` node from its sources' tangents (``tangent`` differentiates a
    custom combine, :func:`.rules.tangent`); ``ties``: ``"first"``, the first winner's tangent
    (:func:`pair_reducer`), or ``"mean"`` (:func:`mean_tie_reducer`, forward mode's)."""
    ra: ReduceArg = node.arg
    cond, srcs = node.src[0], node.src[1:]
    if all(d is ZERO for d in dsrc):
        return ZERO
    kept = needed_components(ra.combiner, [ra.value_index])
    if len(kept) < ra.combiner.arity:  # (the components this one reads: a sum beside a product is a sum)
        return reduce_tangent(project(node, kept, ra.value_index), [dsrc[c] for c in kept], tangent, ties)
    kind, _ = classify(ra.combiner)
    if kind == "sum":
        d = sum_reducer(dsrc[0], list(ra.axes), where=cond)
    elif ties == "mean" and kind in ("max", "min") and ra.combiner.arity == 1:
        red = mean_tie_reducer(ra.combiner)
        src = (cond, materialize(dsrc[0], srcs[0].dtype), srcs[0], const(1, dt.INDEX))
        total = Expr(Op.REDUCE, node.dtype, src, ReduceArg(red, ra.axes, 0))
        count = Expr(Op.REDUCE, dt.INDEX, src, ReduceArg(red, ra.axes, 2))
        # (an empty window counts 0 and sums 0: 0 / 1)
        d = total / cast(node.dtype, binary(Op.MAXIMUM, count, const(1, dt.INDEX)))
    else:
        pair = pair_reducer(ra.combiner, tangent)
        ders = tuple(materialize(d, s.dtype) for d, s in zip(dsrc, srcs))
        d = Expr(Op.REDUCE, node.dtype, (cond,) + ders + tuple(srcs),
                 ReduceArg(pair, ra.axes, ra.value_index))
    empty = empty_where(node)  # a strong zero where it reduces over nothing (.emptiness)
    return d if empty is None else choice(Op.SELECT, empty, const(0, d.dtype), d)


# ---- reverse mode: winners ------------------------------------------------------------------

def lex_le(a: Sequence[Expr], b: Sequence[Expr]) -> Expr:
    """``a <= b`` in lexicographic order (first index most significant)."""
    out = compare(Op.LE, a[-1], b[-1])
    for x, y in zip(reversed(a[:-1]), reversed(b[:-1])):
        out = logical(Op.OR, compare(Op.LT, x, y), logical(Op.AND, compare(Op.EQ, x, y), out))
    return out


def box_size(axes: Sequence[Expr]) -> int | Expr:
    """The points of the box of ``axes``, each counted as at least one (an expression in sizes)."""
    return math.prod(a.extent if always(a.extent >= 1) else max(a.extent, 1) if isinstance(a.extent, int)
                     else binary(Op.MAXIMUM, a.extent, 1) for a in axes)


def flat_index(axes: Sequence[Expr], holds: Callable[[Expr | bool], bool] = always) -> Expr | None:
    """The row-major flattening of a point of ``axes`` (0 for the first), or ``None`` past an int32 (at
    some admissible size, ``holds`` deciding for sizes)."""
    if not holds(box_size(axes) < INDEX_SENTINEL):
        return None
    out: Expr | None = None
    for a, digit in zip(axes, digits(axes)):
        out = digit if out is None else out * as_expr(a.extent, dt.INDEX) + digit
    return const(0, dt.INDEX) if out is None else out


def digits(axes: Sequence[Expr]) -> list[Expr]:
    """Each axis's offset from its first point: the winner's index per axis where no flattening fits
    (of one axis, the flattening itself)."""
    return [a if not a.lo else a - const(a.lo, dt.INDEX) for a in axes]


def winner_reducer(comb: CommReducer, n_index: int = 1) -> CommReducer:
    """Combiner over ``(values..., k0, ..., k{n-1})`` also tracking the winning index (``n_index == 1``:
    flattened; more: one per axis (:func:`digits`), lexicographic); for ``max``/``min`` a last value
    counts the ties (``cx + cy`` at a tie, else the better side's)."""
    key = ("winner", n_index)
    found = comb.derived.get(key)
    if found is not None:
        return found
    kind, lhs_wins = classify(comb)
    kl = tuple(var(f"k{t}.x", dtype=dt.INDEX) for t in range(n_index))
    kr = tuple(var(f"k{t}.y", dtype=dt.INDEX) for t in range(n_index))
    counts: tuple[tuple, tuple, tuple, tuple] = ((), (), (), ())
    if kind in ("max", "min"):
        x, y = comb.lhs[0], comb.rhs[0]
        lhs_wins = logical(Op.OR, beats(kind, x, y), logical(Op.AND, at_least(kind, x, y), lex_le(kl, kr)))
        cx, cy = var("ties.x", dtype=dt.INDEX), var("ties.y", dtype=dt.INDEX)
        tied = tie_sum(kind, x, y, cx, cy)
        counts = ((cx,), (cy,), (tied,), (const(0, dt.INDEX),))
    elif kind != "select":
        raise ValueError(f"combiner {comb.name!r} does not select one operand")
    idx = tuple(choice(Op.SELECT, lhs_wins, a, b) for a, b in zip(kl, kr))
    ident = tuple(const(INDEX_SENTINEL, dt.INDEX) for _ in range(n_index))
    red = CommReducer(f"{comb.name}.winner", "custom", comb.lhs + kl + counts[0], comb.rhs + kr + counts[1],
                      comb.result + idx + counts[2], comb.identity + ident + counts[3],
                      order_free=kind in ("max", "min"))
    comb.derived[key] = red
    return red


def tie_code_reducer(comb: CommReducer) -> CommReducer:
    """Combiner of a ``max``/``min`` over ``(value, code)``: the value combined as ``comb`` does, and the
    codes of the tied sides summed (:func:`tie_sum`), the better side's kept: one pass gives the result
    and the sum of the codes of the points that tie with it."""
    found = comb.derived.get("tie_code")
    if found is None:
        kind, _ = classify(comb)
        x, y = comb.lhs[0], comb.rhs[0]
        cx, cy = var("code.x", dtype=dt.INDEX), var("code.y", dtype=dt.INDEX)
        code = tie_sum(kind, x, y, cx, cy)
        found = comb.derived["tie_code"] = CommReducer(
            f"{comb.name}.tie_code", "custom", (x, cx), (y, cy), (comb.result[0], code),
            (comb.identity[0], const(0, dt.INDEX)), order_free=True)
    return found


# ---- reverse mode: running products -------------------------------------------------------

def strong_product(a: Expr, b: Expr, both: bool = False) -> Expr:
    """``a * b``, but 0 where the factor ``a`` is 0 (``both``: either factor) and the other is infinite
    or NaN (``0 * inf = 0``): a term of a product with a zero factor is a zero of calculus, as a
    product's gradient counts it (PyTorch's too).  Where the other is finite it is ``a * b``, so its
    derivative keeps both factors' tangents at a zero (second order).  A zero adjoint ``b`` meeting an
    infinite factor stays NaN."""
    def lost(z: Expr, other: Expr) -> Expr:  # z is 0 and other is infinite or NaN
        finite = compare(Op.LT, unary(Op.ABS, other), const(math.inf, other.dtype))
        return logical(Op.AND, compare(Op.EQ, z, const(0, z.dtype)), logical_not(finite))

    cond = logical(Op.OR, lost(a, b), lost(b, a)) if both else lost(a, b)
    return choice(Op.SELECT, cond, const(0, a.dtype), a * b)


def strong_product_reducer(comb: CommReducer) -> CommReducer:
    """``comb`` (a product) with :func:`strong_product` in both factors as its combine."""
    found = comb.derived.get("strong")
    if found is None:
        (x,), (y,) = comb.lhs, comb.rhs
        found = comb.derived["strong"] = CommReducer(f"{comb.name}.strong", "custom", (x,), (y,),
                                                     (strong_product(x, y, both=True),), comb.identity)
    return found


def recurrence_reducer(comb: CommReducer) -> CommReducer:
    """The combiner over pairs ``(a, b)`` of ``comb``'s dtype that composes the affine maps ``s -> a s + b``
    in order: ``(a1, b1) o (a2, b2) = (a1 a2, a2 b1 + b2)``, identity ``(1, 0)``, each product a
    :func:`strong_product` in its factor ``a2``.  A fold of ``(a_0, b_0) ... (a_m, b_m)`` holds in its
    second value the recurrence ``s_m = a_m s_{m-1} + b_m`` from ``s_{-1} = 0``.  It is associative (in
    exact arithmetic), not commutative: a reduction over it folds in index order, as every custom
    combiner does (a scan of it carries the plain loop's left fold, whose sum reads no ``a1``)."""
    found = comb.derived.get("recurrence")
    if found is not None:
        return found
    (d,) = comb.dtypes
    xa, xb, ya, yb = (var(name, dtype=d) for name in ("a.x", "b.x", "a.y", "b.y"))
    red = CommReducer(f"{comb.name}.recurrence", "custom", (xa, xb), (ya, yb),
                      (strong_product(ya, xa, both=True), strong_product(ya, xb) + yb),
                      (const(1, d), const(0, d)))
    comb.derived["recurrence"] = red
    return red
