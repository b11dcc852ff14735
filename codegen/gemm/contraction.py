"""Recognizing contractions: reductions that are a matrix product in disguise.

A sum ``C[x] = sum_{k : c} f1 * f2 * ...`` is a (batched) matrix product when its output axes split into
``n`` (a suffix of the output axes read only by some factors: side B), ``m`` (other output axes read only
by the other factors, consecutive in C: :func:`row_axes`) and ``batch`` (the rest), and each conjunct of
the condition involves only one side's axes (besides ``k`` and the batch).  Then
``C[m, n] = sum_k A(m, k) * B(k, n)`` with ``A = if_then_else(cA, prod(FA), 0)`` and ``B`` alike, which the
micro-kernel computes from panels packed by evaluating these expressions.  Dense ``X[i, k] * W[j, k]``:
m = i, n = (j,); conv2d into ``Y[b, f, y, x]``: batch = (b,), m = f, n = (y, x), k = (c, ry, rx); its
weight gradient into ``dW[f, c, ry, rx]``: m = f, n = (c, ry, rx), k = (b, y, x)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import reduce
from itertools import permutations
from typing import Any

from tensorad.simplify import simplify_expr
from tensorad.simplify.algebra.logic import conjuncts
from tensorad.simplify.algebra.rules import is_zero

from tensorad.ir.dtype import INT_DTYPES
from tensorad.ir.expr import UNARY_MATH, Expr, Op, choice, const, logical, logical_not, var
from tensorad.ir.rewrite import chain, free_vars, substitute, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.lang.bounds import OutOfBoundsError, check_op_bounds
from tensorad.poly.linear import var_coefficients

from ..passes.speculate import cheap, speculate
from ..target import Target, host_target
from .descriptor import APRE_LIMIT, MAXBATCH, NARROW_LANES, runs

MICROKERNEL_MIN = 64 ** 3  # smaller contractions compile faster as plain loops and lose little
MIN_ROWS = 2  # one row is a matrix-vector product: memory-bound, the loops stream it as well


@dataclass(frozen=True, eq=False)
class Contraction:
    c: Tensor
    batch: tuple[Expr, ...]
    m: tuple[Expr, ...]  # the row axes, consecutive in C (one flat row index, row-major)
    n: tuple[Expr, ...]
    k: tuple[Expr, ...]
    a: Expr  # side A as an expression of batch, m and k
    b: Expr  # side B as an expression of batch, k and n
    dtype: str
    mr: int = 8
    nr: int = 32
    kc: int = 256
    mc: int = 128
    nc: int = 256
    #: C's index (one expression per axis of C) in the product's axes, where they differ from
    #: C's own axes: a chunk of the batch (:func:`pad_contraction`), a split axis (:func:`digit_splits`)
    c_index: tuple = ()
    target: Target | None = None  # the CPU the tile was chosen for (its vectors, registers)
    exact: Expr | None = None  # the term as written, where a condition excludes terms (:func:`exact_term`)
    band: Band | None = None  # the rows' ranges of k where side A can be nonzero (:func:`k_band`)
    #: an elementwise consumer of C (:class:`.strategies.epilogue.Epilogue`) applied in place to each finished
    #: block of C, which then lives in the consumer's buffer (:class:`.strategies.fusions.ProductEpilogue`)
    epilogue: Any = None
    #: C holds the sum over an earlier chunk of the first ``k`` axis (:func:`pad_contraction`): add to it
    accumulate: bool = False
    #: a generic kernel's block rows, of which the product runs the count read when it runs
    rows: RowCount | None = None
    #: side B packed once in a buffer of the kernel for the products that read it alike
    packed_b: SharedPack | None = None
    #: parts of the rows, each a block of the parallel loop of its own (:func:`row_parts`)
    row_parts: int = 1

    @property
    def c_at(self) -> tuple[Expr, ...]:
        """C's index in the product's axes: C's own axes unless :attr:`c_index` says otherwise."""
        return self.c_index or tuple(self.c.op.axes)

    def c_layout(self, strides) -> tuple[dict[Expr, int], int]:
        """``(stride, first)``: the stride in C's buffer (axes stepping by ``strides``) of each axis of
        the product, and the offset of its first point (split ``f = F g + j``: ``F`` rows per ``g``)."""
        stride: dict[Expr, int] = {}
        first = 0
        for e, st in zip(self.c_at, strides):
            for v, x in var_coefficients(e).items():
                if v is None:
                    first += x * st
                else:
                    stride[v] = stride.get(v, 0) + x * st
        first += sum(ax.lo * stride.get(ax, 0) for ax in self.batch + self.m + self.n)
        return stride, first

    @property
    def M(self) -> int:  # noqa: N802
        return math.prod(a.extent for a in self.m)

    @property
    def N(self) -> int:  # noqa: N802
        return math.prod(a.extent for a in self.n)

    @property
    def K(self) -> int:  # noqa: N802
        return math.prod(a.extent for a in self.k)

    @property
    def batches(self) -> int:
        return math.prod(a.extent for a in self.batch)

    @property
    def blocks(self) -> int:
        """Iterations of the parallel loop: batch points times column blocks times row parts."""
        return self.batches * -(-self.N // self.nc) * self.row_parts

    @property
    def part_rows(self) -> int:
        """The rows of a row part (whole row tiles; the last part may have fewer)."""
        return -(-self.M // (self.mr * self.row_parts)) * self.mr

    @property
    def flops(self) -> int:
        return 2 * self.batches * self.M * self.N * self.K

    @property
    def k_steps(self) -> int:
        """The ``k`` steps the micro-tiles of one column panel run: ``ceil(M / MR) * K``, fewer in a band."""
        tiles = -(-self.M // self.mr)
        if self.band is None:
            return tiles * self.K
        return sum(hi - lo for lo, hi in (self.band.k_range(r * self.mr, min(self.mr, self.M - r * self.mr),
                                                             self.K) for r in range(tiles)))

    def describe(self) -> str:
        shape = (f"{'batch ' + 'x'.join(str(b.extent) for b in self.batch) + ' of ' if self.batch else ''}"
                 f"[{self.M} x {self.K}] @ [{self.K} x {self.N}]")
        band = ""
        if self.band is not None:
            full = -(-self.M // self.mr) * self.K
            band = f"; k banded by rows: {100 * self.k_steps // max(1, full)}% of the k steps"
        then = f"; {self.epilogue.consumer.name} applied to each finished block" if self.epilogue else ""
        parts = f" in {self.row_parts} parts of rows" if self.row_parts > 1 else ""
        return (f"emitted as a matrix product {shape}: packed {self.mr}x{self.nr} vector micro-kernel "
                f"(KC={self.kc} MC={self.mc} NC={self.nc}{band}{parts}){then}")


@dataclass(frozen=True)
class SharedPack:
    """Side B of several products packed once into the buffer of ``tensor``
    (:mod:`..passes.shared_packing`): the first of the ``products`` ``fills`` it, the others read it."""

    tensor: Tensor
    fills: bool
    products: int

    def describe(self) -> str:
        return f"B packed {'here' if self.fills else 'before'} for the {self.products} products that read it"


@dataclass(frozen=True)
class RowCount:
    """The rows of a generic kernel's block (:mod:`..passes.row_bound`) as the first axis of a product's
    group ``group`` (:data:`.descriptor.BATCH`, ``OUTER``: ``m``, ``KGROUP``: its sum, ``COLUMNS``: ``n``):
    the product runs the first ``count`` of them, an index expression read when the kernel runs."""

    group: int
    count: Expr

    def extent(self, spec: Contraction) -> int:
        """The points of the group per row of the block: the extent of its axes after the first."""
        return math.prod(a.extent for a in (spec.batch, spec.m, spec.k, spec.n)[self.group][1:])


@dataclass(frozen=True)
class Band:
    """Side A is zero unless ``lo + m <= kf <= hi + m`` (either bound may be absent), in the digits of
    ``m`` and of the first reduction axis ``kf`` (``inner``: the extent of the axes after it): the driver
    (:mod:`.gemm.library`) runs each row tile only over the ``k`` its band reaches."""

    lo: int | None
    hi: int | None
    inner: int

    def k_range(self, row: int, rows: int, K: int) -> tuple[int, int]:  # noqa: N803
        """The flat ``[start, end)`` of ``k`` that rows ``[row, row + rows)`` reach (as the driver
        computes it: clamped to ``[0, K)``, ``start <= end``)."""
        start = 0 if self.lo is None else min(max((row + self.lo) * self.inner, 0), K)
        end = K if self.hi is None else min(max((row + rows + self.hi) * self.inner, start), K)
        return start, end


_BOUNDS = {Op.LE: (1, 0), Op.LT: (1, -1), Op.GE: (-1, 0), Op.GT: (-1, -1)}


def k_band(conds: list[Expr], m: Expr, k: tuple[Expr, ...]) -> Band | None:
    """The :class:`Band` set by side A's conjuncts ``kf <= m + c`` or ``kf >= m + c`` (unit coefficients,
    no other variable) on ``m`` and the first reduction axis ``kf``; else ``None``."""
    if not k:
        return None
    kf = k[0]
    lo = hi = None
    for c in conds:
        if c.op not in _BOUNDS or c.src[0].dtype not in INT_DTYPES:
            continue
        lhs, rhs = (var_coefficients(x) for x in c.src)
        if lhs is None or rhs is None:
            continue
        form = {v: lhs.get(v, 0) - rhs.get(v, 0) for v in set(lhs) | set(rhs)}
        sign, shift = _BOUNDS[c.op]  # sign * (form) <= shift: the condition
        const_ = form.pop(None, 0)
        form = {v: sign * x for v, x in form.items() if x}
        bound = shift - sign * const_  # sum form[v] * v <= bound
        if set(form) != {m, kf}:
            continue
        if form[kf] == 1 and form[m] == -1:  # kf <= m + bound: an upper bound, in digits
            c_ = bound + m.lo - kf.lo
            hi = c_ if hi is None else min(hi, c_)
        elif form[kf] == -1 and form[m] == 1:  # kf >= m - bound
            c_ = m.lo - bound - kf.lo
            lo = c_ if lo is None else max(lo, c_)
    return None if lo is None and hi is None else Band(lo, hi, math.prod(a.extent for a in k[1:]))


def _vars(e: Expr) -> set[Expr]:
    return {n for n in walk(e) if n.op is Op.VAR and n.lo is not None}


def _product(fs: list[Expr], dtype: str) -> Expr:
    return reduce(lambda out, f: Expr(Op.MUL, dtype, (out, f)), fs[1:], fs[0]) if fs else const(1, dtype)


def _peel_masks(src: Expr) -> tuple[Expr, list[Expr]]:
    """``src`` without its outer masks ``select(c, e, 0)`` / ``if_then_else(c, e, 0)``, and their
    conditions' conjuncts, which join the reduction condition and go to their side."""
    masks: list[Expr] = []
    while src.op in (Op.SELECT, Op.IF_THEN_ELSE):
        c, a, b = src.src
        if is_zero(b):
            masks += conjuncts(c)
            src = a
        elif is_zero(a):  # select(c, 0, e): the term is e where !c (kept as !c: NaN-exact)
            masks.append(logical_not(c))
            src = b
        else:
            break
    return src, masks


def _guarded(cond: list[Expr], value: Expr, axes: tuple[Expr, ...]) -> Expr:
    """``if_then_else(cond, value, 0)`` over the box of ``axes``, the conjuncts reading tensors (a mask)
    tested inside the others.  Choices are eager (``select``) where :func:`.passes.speculate.speculate`
    finds a mask's safe, an index condition's where ``value`` is in bounds and cheap (:func:`_eager`)."""
    reading = [c for c in cond if any(n.op is Op.READ for n in walk(c))]
    for group in (reading, [c for c in cond if c not in reading]):
        if group:
            c = group[0]
            for x in group[1:]:
                c = logical(Op.AND, c, x)
            lazy = group is not reading and not _eager(value, axes)
            value = choice(Op.IF_THEN_ELSE if lazy else Op.SELECT, c, value, const(0, value.dtype))
            if group is reading:
                value = speculate(value)
    return value


def _eager(value: Expr, axes: tuple[Expr, ...]) -> bool:
    """Whether computing ``value`` where an index condition fails is safe and cheap: every read in bounds
    on the box, no transcendental function, reduction, checked gather index, integer division; few nodes."""
    return (cheap(value, UNARY_MATH | {Op.REDUCE})
            and not any(n.op in _DIVISIONS and n.dtype in INT_DTYPES for n in walk(value))
            and _in_bounds(value, axes))


_DIVISIONS = frozenset({Op.DIV, Op.FLOORDIV, Op.MOD})


def match_contraction(op: ComputeOp, bodies: tuple[Expr, ...], tile: tuple | None = None,
                      target: Target | None = None) -> Contraction | None:
    """The :class:`Contraction` of ``op`` (inlined ``bodies``) tiled for ``target`` (host), or ``None``."""
    if not op.is_reduction or len(bodies) != 1 or not op.axes:
        return None
    red = bodies[0]
    cond, *srcs = red.src
    if red.arg.combiner.kind != "sum" or len(srcs) != 1 or red.dtype not in ("float32", "float64"):
        return None
    if any(a.extent <= 0 for a in op.axes + tuple(red.arg.axes)) or not red.arg.axes:
        return None
    if any(n.op is Op.REDUCE for n in walk(srcs[0])):
        return None
    # a checked gather index needs the kernel's run-time test, which the packers do not emit
    if any(n.op is Op.DATA_INDEX and n.arg.mode == "raise" for n in walk(red)):
        return None
    target = target or host_target()
    form = (tuple(op.axes), red, ())
    spec = _match(op, *form, target)
    for axis, parts in ([] if spec is not None else digit_splits(op, red)):
        value = parts[0] * const(parts[1].extent, axis.dtype) + parts[1]
        split = simplify_expr(substitute(red, {axis: value}))
        if split.op is not Op.REDUCE or len(split.src) != 2:
            continue
        form = (tuple(x for a in op.axes for x in (parts if a is axis else (a,))), split,
                tuple(value if a is axis else a for a in op.axes))
        spec = _match(op, *form, target)
        if spec is not None:
            break
    tiled = spec and _with_tiles(spec, tile, target)
    moved = spec and _match(op, *form, target, shared_to_b=True)
    other = moved and _with_tiles(moved, tile, target)
    return other if other and pack_work(other) < pack_work(tiled) else tiled


def digit_splits(op: ComputeOp, red: Expr) -> list[tuple[Expr, tuple[Expr, Expr]]]:
    """``(f, (g, j))`` for each output axis ``f`` that ``red`` reads through ``// F`` or ``% F`` (``F``
    dividing its extent), as ``f = F g + j`` over new axes ``g < extent / F``, ``j < F`` (a grouped conv)."""
    found: dict[tuple[Expr, int], None] = {}
    for n in walk(red):
        if n.op not in (Op.FLOORDIV, Op.MOD) or n.src[1].op is not Op.CONST or n.dtype not in INT_DTYPES:
            continue
        form = var_coefficients(n.src[0])
        divisor = int(n.src[1].arg)
        for a in op.axes if form is not None else ():
            if form.get(a) and a.lo == 0 and 1 < divisor < a.extent and a.extent % divisor == 0:
                found[(a, divisor)] = None
    return [(a, (var(f"{a.name}.g", 0, a.extent // d, a.dtype), var(f"{a.name}.j", 0, d, a.dtype)))
            for a, d in found]


def _match(op: ComputeOp, axes: tuple[Expr, ...], red: Expr, c_index: tuple, target: Target,
           shared_to_b: bool = False) -> Contraction | None:
    """The untiled :class:`Contraction` of the sum ``red`` over output ``axes`` (C's index in
    them: ``c_index``, empty when they are ``op``'s own), or ``None``.  Factors that read no row and no
    column (``0.125`` in ``sum_s (G[l, s] * 0.125) * K[s, d]``) are side A's, or side B's with
    ``shared_to_b`` (``None`` where there are none), which computes K x N values, not M x K."""
    cond, src = red.src
    src, masks = _peel_masks(src)
    factors = chain(src, Op.MUL)  # (a factor select(c, 1, 0) stays one: its zero times an inf is NaN)
    if not factors:
        return None
    fvars = [_vars(f) for f in factors]
    cvars = [(c, _vars(c)) for c in _unless_implied(conjuncts(cond), axes + tuple(red.arg.axes)) + masks]
    axes = list(axes)
    for length in range(len(axes) - 1, 0, -1):
        n_axes = axes[-length:]
        fb = [i for i, vs in enumerate(fvars) if vs & set(n_axes)]
        fa = [i for i in range(len(factors)) if i not in fb]
        a_vars = set().union(*(fvars[i] for i in fa)) if fa else set()
        b_vars = set().union(*(fvars[i] for i in fb)) if fb else set()
        tied = {ax for _, vs in cvars if vs & set(n_axes) for ax in vs}  # share a condition with n
        m_cands = [ax for ax in axes[:-length] if ax in a_vars and ax not in b_vars and ax not in tied]
        if not m_cands or not fb:
            continue
        m = row_axes(tuple(axes[:-length]), m_cands, math.prod(a.extent for a in n_axes),
                     math.prod(a.extent for a in red.arg.axes), a_vars, red.dtype, target)
        batch = tuple(ax for ax in axes[:-length] if ax not in m)
        shared = [i for i in fa if shared_to_b and not fvars[i] & set(m)]
        if shared_to_b and not 0 < len(shared) < len(fa):
            return None
        fa, fb = [i for i in fa if i not in shared], fb + shared
        ga, gb = [], []
        for c, vs in cvars:
            (gb if vs & set(n_axes) else ga).append(c)
        box_a, box_b = batch + m + tuple(red.arg.axes), batch + tuple(n_axes) + tuple(red.arg.axes)
        a = _guarded(ga, _product([factors[i] for i in fa], red.dtype), box_a)
        b = _guarded(gb, _product([factors[i] for i in fb], red.dtype), box_b)
        allowed_a = set(batch) | set(m) | set(red.arg.axes)
        allowed_b = set(batch) | set(n_axes) | set(red.arg.axes)
        if not set(free_vars(a)) <= allowed_a or not set(free_vars(b)) <= allowed_b:
            continue
        if not (_in_bounds(a, box_a) and _in_bounds(b, box_b)):
            continue  # a read kept in bounds only by the other side's condition
        k = k_order(((a, m), (b, tuple(n_axes))), tuple(red.arg.axes))
        exact = exact_term(ga + gb, [factors[i] for i in fa], [factors[i] for i in fb], red.dtype,
                           box_a + tuple(n_axes))
        return Contraction(Tensor(op, 0), batch, m, tuple(n_axes), k, a, b, red.dtype, exact=exact,
                           band=k_band(ga, m[0], k) if len(m) == 1 else None, c_index=c_index)
    return None


def row_axes(outer: tuple[Expr, ...], cands: list[Expr], columns: int, depth: int, a_vars: set[Expr],
             dtype: str, target: Target) -> tuple[Expr, ...]:
    """The product's rows among the output axes ``outer`` (all but the columns): the longest run of ``cands``
    consecutive in ``outer`` (C is row-major: their strides chain into one row index; a channels-last
    convolution's ``(y, x)`` is one product of ``H * W`` rows).  Leading axes of the run stay batch axes while
    the parallel loop (batch points times column blocks) would have fewer than ``PARALLEL_BLOCKS`` blocks, or
    the columns more blocks than with the longest axis alone, each packing side A again: unless A (``a_vars``,
    summed over ``depth``) is packed once per call (:func:`a_packed_once`), where more column blocks cost no
    packing and B is packed once or read in place."""
    runs_: list[tuple[Expr, ...]] = []
    for i, ax in enumerate(outer):
        if ax not in cands:
            continue
        if runs_ and runs_[-1][-1] is outer[i - 1]:
            runs_[-1] += (ax,)
        else:
            runs_.append((ax,))
    run = max(runs_, key=lambda r: math.prod(a.extent for a in r))  # the first on ties
    mr, nr = register_tile(target, dtype)
    es = 4 if dtype == "float32" else 8

    def blocks(rows: tuple[Expr, ...]) -> tuple[int, int, bool]:  # batch points, column blocks, A once
        batch = [a for a in outer if a not in rows]
        batches = math.prod(a.extent for a in batch)
        once = not set(batch) & a_vars and -(-math.prod(a.extent for a in rows) // mr) * mr * depth * es \
            <= APRE_LIMIT
        width = column_tile(columns, batches, mr, nr, target.lanes(dtype), once)
        return batches, -(-columns // column_block(columns, batches, width)), once

    one = blocks((max(cands, key=lambda a: a.extent),))[1]
    while len(run) > 1:
        batches, cuts, once = blocks(run)
        if batches * cuts >= PARALLEL_BLOCKS and (once or cuts <= one):
            break
        run = run[1:]
    return run


def exact_term(cond: list[Expr], fa: list[Expr], fb: list[Expr], dtype: str,
               axes: tuple[Expr, ...]) -> Expr | None:
    """The term ``prod(fa) * prod(fb)`` where every conjunct of ``cond`` holds, else ``0``; ``None``
    without conditions.  The packed kernel's ``0 * inf`` (a side's guarded zero times the other) is NaN
    wherever it is wrong: the fixer (:mod:`.gemm.microkernel`) recomputes C's NaN elements from this term."""
    if not cond:
        return None
    value = Expr(Op.MUL, dtype, (_product(fa, dtype), _product(fb, dtype)))
    return _guarded(cond, value, axes)


K_ORDER_MAX = 5  # reduction axes whose orders are all tried (120)
OUTER_RUN = 8  # a read this contiguous along its outer axes is copied whatever the order of k


def k_order(sides, k: tuple[Expr, ...]) -> tuple[Expr, ...]:
    """The reduction axes in the order the packers read best (the sum is reassociated anyway): register
    transposes need a unit-stride run along the trailing ``k`` axes.  ``sides``:
    ``(side, its outer axes)``; the given order is kept unless another gives the reads longer runs."""
    if not 2 <= len(k) <= K_ORDER_MAX:
        return k
    coefs = []
    for side, outer in sides:
        for r in walk(side):
            if r.op is not Op.READ:
                continue
            forms = [var_coefficients(i) for i in r.src]
            if any(f is None for f in forms):
                continue
            flat, acc = [], 1
            for n in reversed(r.arg.shape):
                flat.append(acc)
                acc *= n
            coef = {a: sum(f.get(a, 0) * st for f, st in zip(forms, reversed(flat))) for a in k + outer}
            if runs(outer, [coef[a] for a in outer]) < OUTER_RUN:
                coefs.append(coef)

    def score(order) -> int:
        return sum(runs(order, [c[a] for a in order]) for c in coefs)

    best = max(permutations(k), key=score)  # the first best: the given order on ties
    return best if score(best) > score(k) else k


def _unless_implied(conds: list[Expr], axes: tuple[Expr, ...]) -> list[Expr]:
    """``conds`` without the affine conjuncts true on the box of ``axes`` (a residue class's range tests)."""
    from tensorad.poly.affine import IndexSpace, NotAffine

    space = IndexSpace(axes)
    box = space.box()
    out = []
    for c in conds:
        if not any(n.op is Op.READ or n.op is Op.DATA_INDEX for n in walk(c)):
            try:
                if box.is_subset(space.cond(c)):
                    continue
            except (NotAffine, NotImplementedError, ValueError):
                pass
        out.append(c)
    return out


def _in_bounds(side: Expr, axes: tuple[Expr, ...]) -> bool:
    """Whether every read of ``side`` is in bounds on the box of ``axes`` (where packing evaluates it)."""
    try:
        check_op_bounds(ComputeOp("pack", "", axes, (side,)))
    except OutOfBoundsError:
        return False
    return True


MR_MAX = 8  # taller tiles waste more of the edge tiles and of the A panels' packing
NV_MAX = 3  # wider tiles waste more of the edge tiles along N and of the B panels' packing
KC_MIN = 256  # shorter k blocks make the C tile's load-add-store per block weigh more
KC_MAX = 1024  # the longest k block (cache_blocks)
LONG_KC_TILES = 8  # fewer row tiles stream B once: its panels, KC_MIN rows long, stay in L1 between them


def operand_registers(target: Target) -> int:
    """Vector registers a micro-kernel ``k`` step holds besides the accumulators and B's vectors: A's
    broadcast and, without FMA, the product ``a * b`` before it is added."""
    return 1 if target.fma else 2


def register_tile(target: Target, dtype: str) -> tuple[int, int]:
    """``(MR, NR)`` of the micro-kernel for ``target``.  An ``MR x NR`` tile of C lives in ``MR * NV``
    vector registers (``NR = NV * lanes``), and a ``k`` step also holds ``NV`` vectors of B and
    :func:`operand_registers` more: ``MR * NV + NV + 1 <= registers`` with FMA, ``+ 2`` without.  A step
    loads ``MR + NV`` values for ``MR * NV`` multiply-adds, so among the tiles that fit (``NV <= NV_MAX``,
    ``MR <= MR_MAX``) the fewest loads per multiply-add wins (float32 AVX2: 4 x 24, AVX-512: 8 x 48)."""
    vw, regs = target.lanes(dtype), target.vector_registers
    best = None
    for nv in range(1, NV_MAX + 1):
        mr = min(MR_MAX, (regs - operand_registers(target) - nv) // nv)
        if mr >= 1:
            score = ((mr + nv) / (mr * nv), nv)
            if best is None or score < best[0]:
                best = (score, mr, nv * vw)
    if best is None:  # pragma: no cover - fewer than 3 vector registers
        return 1, vw
    return best[1], best[2]


# the fewest slots a micro-kernel ``k`` step takes: x86's FMA units need 8 multiply-adds in flight (2 units x
# 4 cycles), and a tile of exactly 8 accumulators also waits on its loads and loop (4 x 16 on AVX2 runs
# 4-7% slower per multiply-add than 4 x 24)
BUSY_ACCUMULATORS = 8.5


def column_tile(n: int, batches: int, mr: int, nr: int, lanes: int, a_once: bool = False) -> int:
    """``NR`` for a product of ``n`` columns over ``batches`` batch points: the register tile's ``nr``, or
    a narrower one (the same ``MR``) whose panels pad fewer columns.  An edge panel is computed whole, and
    a ``k`` step of an ``MR x NV`` tile takes ``max(MR * NV, MR + NV, BUSY_ACCUMULATORS)`` slots.  The
    width whose ``ceil(n / NR)`` panels take the fewest slots wins (ties: the widest), unless it cuts the
    columns into more blocks (:func:`column_block`: each packs A again) and A is not packed once per call
    anyway (``a_once``, :func:`.gemm.microkernel.packs_a_once`).  Columns that one vector holds take one
    vector (:func:`.descriptor.panel_lanes`): the fewest lanes, a power of two, that hold them."""
    if n <= lanes:
        return min(lanes, max(NARROW_LANES, 1 << (n - 1).bit_length()))
    def cost(nv: int) -> float:
        return -(-n // (nv * lanes)) * max(mr * nv, mr + nv, BUSY_ACCUMULATORS)

    def blocks(width: int) -> int:
        return -(-n // column_block(n, batches, width))

    default = nr // lanes
    best = min(range(default, 0, -1), key=cost)  # ties: the widest
    narrow = cost(best) < cost(default) and (a_once or blocks(best * lanes) <= blocks(nr))
    return best * lanes if narrow else nr


def a_packed_once(c: Contraction, mr: int) -> bool:
    """Whether the driver packs side A once per call rather than once per block: A reads no batch axis
    (every batch point and column block reads the same A) and fits ``APRE_LIMIT``."""
    es = 4 if c.dtype == "float32" else 8
    return (c.row_parts == 1 and not set(free_vars(c.a)) & set(c.batch)
            and -(-c.M // mr) * mr * c.K * es <= APRE_LIMIT)


def b_packed_once(c: Contraction) -> bool:
    """Whether the driver packs side B once per call rather than once per block: a batched product whose B
    reads no batch axis (shared weights) and fits ``APRE_LIMIT``, when the call runs more blocks than
    columns do."""
    es = 4 if c.dtype == "float32" else 8
    return (c.batches > 1 and not set(free_vars(c.b)) & set(c.batch)
            and c.nc % c.nr == 0  # (the pre-packed blocks lie at jc * KC)
            and -(-c.N // c.nr) * c.nr * c.K * es <= APRE_LIMIT)


def packed_elements(c: Contraction) -> tuple[int, int]:
    """The elements of sides A and B that one call packs, at one thread: side A once per call where
    :func:`a_packed_once`, else once per batch point and column block; side B once per call where
    :func:`b_packed_once`, else once per batch point and row part."""
    njc = -(-c.N // c.nc)
    a = c.M * c.K * (1 if a_packed_once(c, c.mr) else c.batches * njc)
    return a, c.K * c.N * (1 if b_packed_once(c) else c.batches * c.row_parts)


def computes(side: Expr) -> bool:
    """Whether packing ``side`` computes each element (its own packer evaluates an expression), rather than
    copying a read (range-guarded or converted)."""
    if side.op in (Op.IF_THEN_ELSE, Op.SELECT) and side.src[2].op is Op.CONST and side.src[2].arg == 0 \
            and not any(n.op is Op.READ for n in walk(side.src[0])):
        side = side.src[1]
    while side.op is Op.CAST:
        side = side.src[0]
    return side.op is not Op.READ


def pack_work(c: Contraction) -> int:
    """The evaluations of its computed sides (:func:`computes`) that one call's packing runs."""
    a, b = packed_elements(c)
    return a * computes(c.a) + b * computes(c.b)


def cache_blocks(target: Target, dtype: str, mr: int, nr: int, k: int | None = None,
                 nc: int | None = None, rows: int | None = None) -> tuple[int, int]:
    """``(KC, MC)``: B's ``KC x NR`` panel in half of L1 (``KC >= KC_MIN``), A's ``MC x KC`` block in a
    quarter of L2; longer (to ``KC_MAX``, equal blocks of ``k``) where B's ``KC x NC`` block fits half
    of L2 and over ``LONG_KC_TILES`` row tiles (of ``rows``) read it: a ``k`` block reloads C's tiles."""
    es = 4 if dtype == "float32" else 8
    kc = max(KC_MIN, min(512, target.l1d // (2 * nr * es) // 16 * 16))
    if k is not None and nc is not None and (rows is None or -(-rows // mr) > LONG_KC_TILES):
        fits = min(KC_MAX, target.l2 // (2 * nc * es) // 16 * 16)
        if fits > kc and k > kc:
            blocks = -(-k // fits)
            per_block = -(-k // blocks)
            kc = -(-per_block // 16) * 16
    mc = max(mr, min(1024, target.l2 // (4 * kc * es) // mr * mr))
    return kc, mc


def _with_tiles(c: Contraction, tile: tuple | None, target: Target) -> Contraction:
    vw = target.lanes(c.dtype)
    mr, nr = register_tile(target, c.dtype)
    if not tile:
        nr = column_tile(c.N, c.batches, mr, nr, vw, a_packed_once(c, mr))
        if nr <= vw:  # (one vector of B a step: the most rows that keep the accumulators in registers)
            mr = min(MR_MAX, target.vector_registers - operand_registers(target) - 1)
    nc = column_block(c.N, c.batches, nr) if tile else row_block(c, mr, nr)
    kc, mc = cache_blocks(target, c.dtype, mr, nr, c.K, nc, c.M)
    if tile:
        mr, nr, kc, mc = check_tile(tile, c, vw, (mr, nr, kc, mc), target)
        nc = column_block(c.N, c.batches, nr)
    else:
        mc = max(mr, mc // mr * mr)
    c = replace(c, mr=mr, nr=nr, kc=kc, mc=mc, nc=nc, target=target)
    return replace(c, row_parts=row_parts(c))


PARALLEL_BLOCKS = 4  # blocks of the parallel loop (batch points x column blocks) to share
NC_MAX = 1024  # widest column block (its KC x NC panel of B is packed once per block)
PART_TILES = 8  # the fewest row tiles of a row part: each packs side B's blocks again


def row_parts(c: Contraction) -> int:
    """The parts the rows split into, each a block of the parallel loop with its own packed A and B, where
    batch points times column blocks are fewer than ``PARALLEL_BLOCKS`` (few, narrow columns): as many as
    make ``PARALLEL_BLOCKS`` blocks, each of at least ``PART_TILES`` row tiles.  None where side B's packing
    computes its values (it would compute them again per part) or A's does over several column blocks
    (packed once per call unless the rows are in parts), the rows are a generic kernel's (their count is
    read at run time) or side B is packed once per call."""
    blocks = c.batches * -(-c.N // c.nc)
    if blocks >= PARALLEL_BLOCKS or computes(c.b) or computes(c.a) and blocks > c.batches \
            or c.rows is not None or b_packed_once(c):
        return 1
    parts = max(1, min(-(-PARALLEL_BLOCKS // blocks), -(-c.M // c.mr) // PART_TILES))
    return -(-c.M // (-(-c.M // (c.mr * parts)) * c.mr))  # (no part empty)


def row_block(c: Contraction, mr: int, nr: int) -> int:
    """``NC``: :func:`column_block`'s, or all the columns in one block where the rows are at least
    ``PARALLEL_BLOCKS`` times as many, the sum at least ``KC_MIN`` long and the rows' parts
    (:func:`row_parts`) make as many blocks: a part packs B's block again where a column block packs A's (a
    short sum's A is cheap to pack again, and narrower blocks of C are written faster)."""
    nc, whole = column_block(c.N, c.batches, nr), -(-c.N // nr) * nr
    if whole > NC_MAX or c.N * PARALLEL_BLOCKS > c.M or c.K < KC_MIN or nc == whole:
        return nc
    return whole if row_parts(replace(c, mr=mr, nr=nr, nc=whole)) >= -(-c.N // nc) else nc


def column_block(n: int, batches: int, nr: int) -> int:
    """``NC``: the column block width of an ``n``-column product over ``batches`` batch points: the
    parallel loop (batch points times column blocks) needs only ``PARALLEL_BLOCKS`` blocks, each packing A
    again; equal blocks of at most ``NC_MAX`` (whole panels), a few kept even in number."""
    batches = max(1, batches)
    cols = max(-(-PARALLEL_BLOCKS // batches), -(-n // max(nr, NC_MAX // nr * nr)), 1)
    while batches * cols % 2 and batches * cols < 4 * PARALLEL_BLOCKS and cols < n:
        cols += 1
    width = -(-n // cols)
    return max(nr, -(-width // nr) * nr)


def check_tile(tile: tuple, c: Contraction, vw: int, default: tuple[int, int, int, int],
               target: Target) -> tuple[int, int, int, int]:
    """A user's ``(MR, NR, KC, MC)`` (``None`` entries: the default) checked against the micro-kernel and
    the target, ``KC`` and ``MC`` clamped to the product's size:

    * ``NR`` a multiple of the vector width, ``MC`` of ``MR`` (a default ``MC`` rounded down to one);
    * the ``MR x NR`` accumulator tile at most twice the register file
      (:func:`.options.register_file_bytes`): past it every step spills and the unrolled kernel's compile
      time explodes;
    * the packed blocks (``(MC + MR) x KC`` of A, ``NC x KC`` of B) under :data:`.options.PACK_LIMIT`
      bytes (allocated on every call)."""
    from ..options import PACK_LIMIT, register_file_bytes

    t = (list(tile) + [None] * 4)[:4]
    mr, nr, kc, mc = (d if x is None else x for x, d in zip(t, default))
    if t[3] is None and isinstance(mr, int) and mr > 0:  # (the default MC: whole panels of the user's MR)
        mc = max(mr, mc // mr * mr)
    if nr % vw or mc % mr:
        raise ValueError(f"tile (MR, NR, KC, MC) for {c.dtype}: NR must be a multiple of {vw} and MC "
                         f"a multiple of MR, got {tuple(tile)}")
    es = 4 if c.dtype == "float32" else 8
    budget = 2 * register_file_bytes(target)
    if mr * nr * es > budget:
        raise ValueError(f"tile (MR, NR, KC, MC): an MR x NR = {mr} x {nr} {c.dtype} accumulator tile "
                         f"({mr * nr * es} bytes) exceeds twice this target's vector registers "
                         f"({budget} bytes); keep MR * NR <= {budget // es}")
    kc = min(kc, max(c.K, 1))
    mc = min(mc, -(-max(c.M, 1) // mr) * mr)
    nc = max(nr, min(1024, -(-c.N // nr) * nr))
    packed = ((mc + mr) * kc + nc * kc) * es
    if packed > PACK_LIMIT:
        raise ValueError(f"tile (MR, NR, KC, MC) = {tuple(tile)}: the packed blocks of A and B need "
                         f"{packed >> 20} MiB per call, more than {PACK_LIMIT >> 20} MiB; choose a "
                         "smaller KC or MC (blocks that fit the caches are faster)")
    return mr, nr, kc, mc


def pad_contraction(c: Contraction, limit: int) -> list[tuple[list, Contraction, tuple | None]]:
    """``c`` as pieces ``(copies, spec, range)``: each range-guarded side reads a zero-padded copy
    (:mod:`.gemm.padding`) made by ``copies`` before the piece, per chunk of the first batch axis past
    ``limit`` elements (``range = (axis, lo, hi)``; the chunk's copy last), else per chunk of the first ``k``
    axis, each piece after the first adding to C (:attr:`Contraction.accumulate`); and each computed side
    that packing would compute more than once per point reads a copy computed once; else ``([], c, None)``."""
    from .padding import computed_copy, plan_padding

    if c.flops // 2 < MICROKERNEL_MIN:  # too small for a copy (and more nests) to pay
        return [([], c, None)]
    plans = {name: plan_padding(side, axes) for name, side, axes in
             (("a", c.a, c.batch + c.m + c.k), ("b", c.b, c.batch + c.n + c.k))}
    whole = {n: p for n, p in plans.items() if p is not None and p.size <= limit}
    big = [n for n, p in plans.items() if p is not None and p.size > limit]
    copies, sides = [], {}
    for name, plan in whole.items():
        op, sides[name] = plan.copy()
        copies.append(op)
    packed = dict(zip("ab", packed_elements(c)))
    for name, side, axes in (("a", c.a, c.batch + c.m + c.k), ("b", c.b, c.batch + c.n + c.k)):
        used = set(free_vars(side))  # its distinct points: the box of the product's axes it reads
        points = math.prod(ax.extent for ax in c.batch + c.m + c.n + c.k if ax in used)
        if plans[name] is None and computes(side) and packed[name] > points and points <= limit:
            op, sides[name] = computed_copy(side, axes, f"{c.c.op.name}.{name}")
            copies.append(op)
    chunked = None
    if len(big) == 1:
        plan = plans[big[0]]
        # chunks of the first batch axis, else (no band or epilogue reading C whole) of the first k
        # axis, each chunk's product adding to C what the earlier ones stored
        reduced = c.c.op.body[0].arg.axes if c.c.op.body[0].op is Op.REDUCE else ()
        along = [(ax, own) for ax, own in ((c.batch[:1], c.c.op.axes),
                 (c.k[:1] if c.band is None and c.epilogue is None else (), reduced)) if ax]
        for (b0,), own in along:
            rows = -(-plan.size // limit)
            step = -(-b0.extent // rows)
            # (the chunk restricts the op's own loops, which the axis must be one of)
            if plan.read.src[0] is b0 and b0 in own and not plan.lows[0] and not plan.highs[0] \
                    and b0.extent >= 2 and step * plan.size // b0.extent <= limit:
                chunked = (big[0], plan, b0, step)
                break
    if "a" in sides or (chunked is not None and chunked[0] == "a"):
        c = replace(c, band=None)  # (the band is side A's guard, which a copy no longer is)
    if chunked is None:
        return [(copies, replace(c, **sides) if sides else c, None)]
    name, plan, b0, step = chunked
    pieces = []
    for first in range(b0.lo, b0.hi, step):
        count = min(step, b0.hi - first)
        op, side = plan.copy(first - b0.lo, count)
        part = var(b0.name, first, first + count)  # the chunk's batch points (C starts at ``first``)
        new = {k: substitute(e, {b0: part}) for k, e in {**sides, name: side}.items()}
        new.setdefault("a" if name == "b" else "b", substitute(c.a if name == "b" else c.b, {b0: part}))
        if c.exact is not None:
            new["exact"] = substitute(c.exact, {b0: part})
        if c.batch and b0 is c.batch[0]:
            index = tuple(substitute(e, {b0: part}) for e in c.c_at)
            spec = replace(c, batch=(part,) + c.batch[1:], c_index=index, **new)
        else:
            spec = replace(c, k=(part,) + c.k[1:], accumulate=bool(pieces), **new)
        pieces.append(((copies if not pieces else []) + [op], spec, (b0, first, first + count)))
    return pieces


def worth_it(c: Contraction, forced: bool | None) -> bool:
    """Whether the micro-kernel should take ``c`` (always when forced): enough multiply-adds, at least
    ``MIN_ROWS`` rows and a vector of columns, or the narrowest vector's where packing computes neither side
    (the loops compute it where they read it; the cost model then weighs the micro-kernel against them)."""
    if len(c.batch) > MAXBATCH:
        return False  # the library's descriptor holds at most MAXBATCH batch axes
    if forced:
        return True
    lanes = (c.target or host_target()).lanes(c.dtype)
    narrow = c.N >= min(lanes, NARROW_LANES) and not (computes(c.a) or computes(c.b))
    return c.flops // 2 >= MICROKERNEL_MIN and c.M >= MIN_ROWS and (c.N >= lanes or narrow)


__all__ = ["Contraction", "exact_term", "match_contraction", "pad_contraction", "worth_it", "MICROKERNEL_MIN"]
