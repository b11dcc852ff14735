"""Parity decomposition: a strided convolution's input gradient as stride-1 convolutions.

A stride-2 convolution's input gradient sums over the taps that land on each input point, which depend on
its parity.  Fixing the residue of every such axis (``y = 2 q + r``) makes each index affine, so each of
the ``2 x 2`` residue classes is a stride-1 convolution, a matrix product, over a quarter of the output::

    P_rs[n, c, q, p] = sum_{f, i, j} H[n, f, q + i + .., p + j + ..] * W[f, c, 2 - 2 i - .., ..]
    dX[n, c, y, x]   = P_{y % 2, x % 2}[n, c, y // 2, x // 2]

The second line is a copy (:mod:`.loops.stripmine`).  Each element sums the same terms in the same order:
exact.  Used only when every piece is a matrix product (:func:`decompose`'s test); the classes that read the
head past its edges read one zero-padded copy of it (:func:`shared_padding`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import product
from math import lcm

from tensorad.ir.expr import Expr, Op, ReduceArg, choice, compare, const, copies, var
from tensorad.ir.rewrite import substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.poly.affine import IndexSpace
from tensorad.poly.domain import pw_aff_range
from tensorad.poly.linear import var_coefficients

from ..gemm.padding import MAX_GROWTH, Padding, plan_padding
from ..loops.stripmine import simplify_index
from ..passes.strided_sums import unstride

MAX_MODULUS = 4   # strides up to 4
MAX_PIECES = 16   # residue classes over all split axes


def residue_moduli(op: ComputeOp, body: Expr) -> dict[Expr, int]:
    """For each output axis ``a`` read as ``(a + e) // m`` or ``(a + e) % m`` (``e`` an integer
    combination of reduction axes and a constant, ``m > 1``), the lcm of its moduli; empty when there are
    none or the pieces would be too many or too small."""
    axes = set(op.axes)
    reduced = set(body.arg.axes) if body.op is Op.REDUCE else set()
    found: dict[Expr, int] = {}
    for n in walk(body):
        if n.op not in (Op.FLOORDIV, Op.MOD) or n.src[1].op is not Op.CONST:
            continue
        m = int(n.src[1].arg)
        co = var_coefficients(n.src[0])
        if m <= 1 or co is None:
            continue
        terms = {v: c for v, c in co.items() if v is not None and c and v not in reduced}
        if len(terms) != 1:
            continue
        (v, c), = terms.items()
        if v in axes and c == 1:
            found[v] = lcm(found.get(v, 1), m)
    pieces = 1
    for ax, m in found.items():
        if m > MAX_MODULUS or ax.lo != 0 or ax.extent < 2 * m:
            return {}
        pieces *= m
    return found if pieces <= MAX_PIECES else {}


def decompose(op: ComputeOp, body: Expr, is_product: Callable[[ComputeOp], object], memo: dict | None = None
              ) -> tuple[list[ComputeOp], list, ComputeOp] | None:
    """``(pieces, their product specs, gather)`` for a reduction ``op`` whose residue classes are all
    matrix products (``is_product(piece)``: the spec or ``None``); ``None`` otherwise.  ``memo`` (owned by
    one planning call) keeps the pieces and gathers made for ``op``."""
    if not op.is_reduction or body.op is not Op.REDUCE:
        return None
    moduli = residue_moduli(op, body)
    if not moduli:
        return None
    split = [ax for ax in op.axes if ax in moduli]
    memo = {} if memo is None else memo
    pieces: dict[tuple[int, ...], ComputeOp | None] = {}
    specs = []
    for residues in product(*(range(moduli[ax]) for ax in split)):
        piece = _kept(memo, ("parity piece", op, body, residues),
                      lambda r=residues: _piece(op, body, moduli, dict(zip(split, r))))
        if body.arg.combiner.kind == "sum" and _no_terms(piece):
            pieces[residues] = None  # (a class no term reaches: zeros, read by the gather as such)
            continue
        spec = is_product(piece)
        if spec is None:
            return None
        pieces[residues] = piece
        specs.append(spec)
    if all(p is None for p in pieces.values()):
        return None
    gather = _kept(memo, ("parity gather", op, body), lambda: _gather(op, body.dtype, split, moduli, pieces))
    return [p for p in pieces.values() if p is not None], specs, gather


def _no_terms(piece: ComputeOp) -> bool:
    """Whether no point of ``piece``'s box meets its sum's condition (a strided 1x1 convolution's input
    gradient's unsampled classes), so that it is not costed as a product of packed zeros."""
    red = piece.body[0]
    if any(a.extent <= 0 for a in red.arg.axes):
        return True
    space = IndexSpace(tuple(piece.axes) + tuple(red.arg.axes))
    return space.box().intersect(space.cond(red.src[0], exact=False)).is_empty()


def _kept(memo: dict, key: tuple, make: Callable[[], ComputeOp]) -> ComputeOp:
    """``memo``'s op for ``key`` -- made by ``make`` once -- keyed by the identity of the op
    decomposed (``key[1]``; the entry holds it, so its id is not reused while the memo lives)."""
    ident = (key[0], id(key[1])) + key[2:]
    found = memo.get(ident)
    if found is None or found[0] is not key[1]:
        found = memo[ident] = (key[1], make())
    return found[1]


def _piece(op: ComputeOp, body: Expr, moduli: dict, r_of: dict) -> ComputeOp:
    """The reduction of ``op``'s residue class ``r_of`` (axis -> residue) of ``moduli``."""
    new_axes, mapping = [], {}
    for ax in op.axes:
        if ax in r_of:
            m, r = moduli[ax], r_of[ax]
            q = var(ax.name, 0, -(-(ax.extent - r) // m))
            mapping[ax] = q * const(m, ax.dtype) + const(r, ax.dtype) if r else q * const(m, ax.dtype)
        else:
            q = var(ax.name, ax.lo, ax.hi)
            mapping[ax] = q
        new_axes.append(q)
    src = tuple(simplify_index(substitute(e, mapping)) for e in body.src)
    red = _tighten(new_axes, unstride(Expr(Op.REDUCE, body.dtype, src, body.arg)))
    return ComputeOp(f"{op.name}.parity", "", tuple(new_axes), (red,))


def _tighten(axes: list[Expr], red: Expr) -> Expr:
    """``red`` with each reduction axis narrowed to where its condition can hold, so that a residue
    class's product is as long as its real sum."""
    ra: ReduceArg = red.arg
    space = IndexSpace(tuple(axes) + tuple(ra.axes))
    dom = space.box().intersect(space.cond(red.src[0], exact=False))  # a superset: safe bounds
    if dom.is_empty():
        return red
    mapping = {}
    for k in ra.axes:
        lo, last = pw_aff_range(space.aff(k).intersect_domain(dom))
        hi = last + 1
        if (lo, hi) != (k.lo, k.hi):
            mapping[k] = var(k.name, lo, hi)
    if not mapping:
        return red
    src = tuple(substitute(e, mapping) for e in red.src)
    axes_now = tuple(mapping.get(k, k) for k in ra.axes)
    return Expr(Op.REDUCE, red.dtype, src, ReduceArg(ra.combiner, axes_now, ra.value_index))


def _gather(op: ComputeOp, dtype: str, split: list[Expr], moduli: dict[Expr, int],
            pieces: dict[tuple[int, ...], ComputeOp | None]) -> ComputeOp:
    """``op[.., a, ..] = piece_{a % m}[.., a // m, ..]`` (0 for a class without terms, ``None``),
    over fresh axes."""
    out_axes = copies(op.axes)
    fresh = dict(zip(op.axes, out_axes))

    def pick(i: int, residues: tuple[int, ...]) -> Expr:
        if i == len(split):
            if pieces[residues] is None:
                return const(0, dtype)
            idx = tuple(fresh[a] // const(moduli[a], a.dtype) if a in moduli else fresh[a] for a in op.axes)
            return Expr(Op.READ, dtype, idx, Tensor(pieces[residues], 0))
        a, m = fresh[split[i]], moduli[split[i]]
        value = pick(i + 1, residues + (m - 1,))
        for r in range(m - 2, -1, -1):
            test = compare(Op.EQ, a % const(m, a.dtype), const(r, a.dtype))
            value = choice(Op.IF_THEN_ELSE, test, pick(i + 1, residues + (r,)), value)
        return value

    return ComputeOp(op.name, op.tag, out_axes, (pick(0, ()),))


def shared_padding(specs: list, limit: int) -> tuple[ComputeOp, dict[int, object]] | None:
    """``(copy, {k: spec})``: one zero-padded copy (:mod:`..gemm.padding`) of the tensor that two classes'
    products or more read guarded by its bounds, padded as the widest needs, and those products reading it
    (each side the copy's read over its whole box: the same terms); ``None`` past ``limit`` elements."""
    found: dict = {}  # tensor -> [(class, side name, padding)]
    for k, s in enumerate(specs):
        for name, side, axes in (("a", s.a, s.batch + s.m + s.k), ("b", s.b, s.batch + s.n + s.k)):
            pad = plan_padding(side, axes)
            if pad is not None and pad.value is None and (any(pad.lows) or any(pad.highs)):
                found.setdefault(pad.read.arg, []).append((k, name, pad))
    t, uses = max(found.items(), key=lambda kv: len(kv[1]), default=(None, []))
    if len({k for k, _, _ in uses}) < 2:
        return None
    pads = [p for _, _, p in uses]
    union = Padding(pads[0].read, tuple(map(max, *(p.lows for p in pads))),
                    tuple(map(max, *(p.highs for p in pads))))
    if union.size > min(limit, MAX_GROWTH * t.size):
        return None
    copy, _ = union.copy()
    out: dict[int, object] = {}
    for k, name, pad in uses:
        idx = tuple(i + const(lo, i.dtype) if lo else i for i, lo in zip(pad.read.src, union.lows))
        side = {name: Expr(Op.READ, pad.read.dtype, idx, Tensor(copy, 0))}
        out[k] = replace(out.get(k, specs[k]), **side, **({"band": None} if name == "a" else {}))
    return copy, out
