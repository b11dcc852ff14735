"""3x3 convolutions with fewer multiplications: Winograd's minimal filtering F(m x m, 3 x 3).

A sum recognized by structure, whatever spells it (``ta.topi.nn.conv2d``, a user's ``ta.compute``, the
data gradient of a convolution after differentiation)::

    Y[rows..., cols..., y, x] = sum_{c..., r, q} A(rows..., c..., y + a r, x + b q) * B(cols..., c..., r, q)

where ``r`` and ``q`` run over 3 values, ``A`` (the data: any expression, padding included) depends on
``y`` and ``r`` only through ``y + a r`` and on ``x`` and ``q`` only through ``x + b q`` (``|a|``, ``|b|``
the dilations; a negative one a flipped kernel), and ``B`` (the kernel) reads no row axis.  The sum
becomes short transforms around one product per transform point: the kernel transform
``U[xi, nu, cols..., c...] = (G B G^T)[xi, nu]``; the input transform ``V[xi, nu, c..., rows..., tiles...]
= (B^T d B)[xi, nu]`` over each input tile ``d`` of ``(m + 2)^2`` points (the data deinterleaved by column
residue, zero past the points the sum reads, so odd sizes tile exactly); the product
``M[xi, nu, cols..., rows..., tiles...] = sum_c U * V``, planned as any product; and
``O[xi, cols..., rows..., tiles..., x] = (M A)[xi, x % m]``, the sum being ``sum_xi A^T[y % m, xi] O[xi,
...]``.  A sum whose taps are output axes (a weight gradient, :func:`match_taps`,
``Y[cols..., c..., r, q] = sum_{rows..., y, x} A(rows..., cols..., y, x) * B(rows..., c..., y + r, x + q)``)
takes the transpose (:func:`rewrite_taps`): the same data transform, the head's tiles of ``m^2`` points by
``A``, one product per transform point over the tiles, and ``G^T M G``.

Each output tile costs ``(m + 2)^2`` multiply-adds per channel pair instead of ``9 m^2`` (2.25 times fewer for
``m = 2``, 4 for ``m = 4``).  :func:`choose_tile` prices the tiles and the direct sum in multiply-adds
(:func:`macs`; a transformed value :data:`TRANSFORM_MAC` a vector bit: wide vectors speed products only)
and rewrites where the tile costs at most :data:`PAYS` of the direct sum over :data:`MIN_TILES` tiles or more:
F(4x4, 3x3) from about 40 channels in and out at 256 bits (75 at 512), F(2x2, 3x3) from about 100 (200).
F(4x4, 3x3)'s float32 error is about four times the direct sum's, within every tolerance of a value, but it
moves values across kinks (a ReLU mask the backward takes of a pre-activation near zero flips, moving the
gradient by a whole term), so it is offered only for a sum whose value reaches (:func:`kinked`) no jump of the
program (a comparison other than a choice's whose branches agree where its sides meet, a cast, an index read
from data), nor a kink (``max``, ``min``, ``abs``, a max or min reduction, a ReLU) where the value also leaves
the kernel point by point (an output, or read by one that sums nothing); F(2x2, 3x3), whose error is the
direct sum's, everywhere.  Float sums only; ``fastmath=False`` keeps the direct sum (the transforms add in
another order)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import partial

from tensorad.simplify import simplify_expr

from tensorad.ir.dtype import is_float
from tensorad.ir.expr import COMPARISONS, TRUE, Expr, Op, ReduceArg, box, choice, const, copies, var
from tensorad.ir.rewrite import chain, free_vars, substitute, walk
from tensorad.ir.tensor import ComputeOp, Provenance, Role, Tensor
from tensorad.poly.linear import from_linear, is_index, to_linear, var_coefficients

F = Fraction
# (B^T, G, A^T) of F(m, 3) for the tile sizes offered (Lavin and Gray, 2016): points 0, +-1 and infinity, and
# 2 and -1/2 for m = 4 (Barabasz et al., 2020: a third of the float32 error of +-1/2 or +-2), each row of B^T
# scaled to a largest entry of 1 and G's row by the inverse
TRANSFORMS: dict[int, tuple[tuple, tuple, tuple]] = {
    2: (((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
        ((1, 0, 0), (F(1, 2), F(1, 2), F(1, 2)), (F(1, 2), F(-1, 2), F(1, 2)), (0, 0, 1)),
        ((1, 1, 1, 0), (0, 1, -1, -1))),
    4: (((F(1, 2), F(3, 4), -1, F(-3, 4), F(1, 2), 0), (0, F(2, 5), 1, F(1, 5), F(-2, 5), 0),
         (0, F(2, 5), F(1, 5), -1, F(2, 5), 0), (0, F(-1, 2), -1, F(1, 2), 1, 0),
         (0, -1, F(1, 2), 1, F(-1, 2), 0), (0, F(1, 2), F(3, 4), -1, F(-3, 4), F(1, 2))),
        ((2, 0, 0), (F(5, 6), F(5, 6), F(5, 6)), (F(5, 6), F(-5, 6), F(5, 6)), (F(1, 15), F(2, 15), F(4, 15)),
         (F(32, 15), F(-16, 15), F(8, 15)), (0, 0, 2)),
        ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, F(-1, 2), 0), (0, 1, 1, 4, F(1, 4), 0),
         (0, 1, -1, 8, F(-1, 8), 1))),
}
CHOSEN = (2, 4)  # the tiles the cost model picks from (F(4x4, 3x3) where no mask follows: module docstring)
SMOOTH = (2,)  # the tiles offered for a sum whose value reaches a kink
MIN_TILES = 64  # output tiles at least: the columns of each product fill two micro-kernel panels
PAYS = 0.8  # F(m, 3)'s cost at most this share of the direct sum's (both in multiply-adds)
TRANSFORM_MAC = 40 / 256  # products' multiply-adds a transformed value costs per vector bit (AVX2: 40)


@dataclass(frozen=True)
class Window:
    """One spatial axis of the sum: output axis ``out`` reads ``out + step * red``."""

    out: Expr
    red: Expr
    step: int


@dataclass(frozen=True)
class Conv:
    """A recognized 3x3 sum: its data and kernel factors, the axes of each kind."""

    data: Expr
    kernel: Expr
    windows: tuple[Window, Window]
    rows: tuple[Expr, ...]
    cols: tuple[Expr, ...]
    channels: tuple[Expr, ...]
    sum: Expr  # the sum itself: its dtype and combiner
    taps_out: bool = False  # the windows' taps are output axes (a weight gradient: :func:`match_taps`)


def _normalized(e: Expr) -> Expr:
    """``e`` with each index expression rebuilt from its linear form (``u - 2 r + 2 r`` is ``u``), and a
    comparison of two as one of their difference with zero."""
    if is_index(e) and e.op not in (Op.VAR, Op.CONST) and var_coefficients(e) is not None:
        return from_linear(to_linear(e), e.dtype)
    if not e.src:
        return e
    if e.op in COMPARISONS and is_index(e.src[0]) and var_coefficients(e.src[0] - e.src[1]) is not None:
        return Expr(e.op, e.dtype, (from_linear(to_linear(e.src[0] - e.src[1]), e.src[0].dtype),
                                    const(0, e.src[0].dtype)))
    src = tuple(_normalized(s) for s in e.src)
    return e if all(a is b for a, b in zip(src, e.src)) else Expr(e.op, e.dtype, src, e.arg)


def _step(data: Expr, out: Expr, red: Expr) -> int | None:
    """``a`` where ``data`` reads ``out`` and ``red`` only as ``out + a red``, and never divides it, else
    ``None``."""
    steps = set()
    for n in walk(data):
        if is_index(n) and n.op is not Op.VAR:
            vc = var_coefficients(n)
            if vc is not None and vc.get(red) and vc.get(out):
                if vc[red] % vc[out]:
                    return None
                steps.add(vc[red] // vc[out])
    if len(steps) != 1:
        return None
    a = steps.pop()
    u = var("u", out.lo, out.hi, out.dtype)
    moved = _normalized(substitute(data, {out: u - const(a, out.dtype) * red}))
    divided = any(n.op in (Op.FLOORDIV, Op.MOD) and u in free_vars(n) for n in walk(moved))
    if red in free_vars(moved) or divided:  # (divided: a transposed convolution's input, for parity)
        return None
    return a


def _factors(op: ComputeOp, body: Expr) -> list[Expr] | None:
    """The factors of ``body``'s term where it is a float sum of products of reads and arithmetic."""
    if body.op is not Op.REDUCE or body.arg.combiner.kind != "sum" or len(body.src) != 2 \
            or not is_float(body.dtype) or op.num_outputs != 1:
        return None
    if any(n.op in (Op.REDUCE, Op.DATA_INDEX) for n in walk(body.src[1]) if n is not body):
        return None
    return chain(body.src[1], Op.MUL)


def match(op: ComputeOp, body: Expr) -> Conv | None:
    """The 3x3 sum ``body`` (``op``'s inlined body) spells, else ``None``."""
    factors = _factors(op, body)
    if factors is None:
        return None
    red, outs = body.arg.axes, op.axes
    if body.src[0] is not TRUE:  # a condition on the data's points (padding after differentiation) guards it
        first = next((k for k, f in enumerate(factors) if set(free_vars(f)) & set(outs)), None)
        if first is None:
            return None
        f = factors[first]
        factors[first] = choice(Op.IF_THEN_ELSE, body.src[0], f, const(0.0, f.dtype))
    windows: list[Window] = []
    for r in (r for r in red if r.hi - r.lo == 3):
        for y in (y for y in outs if y not in (w.out for w in windows)):
            steps = {_step(f, y, r) for f in factors if y in free_vars(f)}
            if len(steps) == 1 and None not in steps:
                windows.append(Window(y, r, steps.pop()))
                break
    if len(windows) != 2:
        return None
    spatial = {w.out for w in windows} | {w.red for w in windows}
    data_f = [f for f in factors if set(free_vars(f)) & {w.out for w in windows}]
    kernel_f = [f for f in factors if f not in data_f]
    if not kernel_f:
        return None
    data = math.prod(data_f[1:], start=data_f[0])
    kernel = math.prod(kernel_f[1:], start=kernel_f[0])
    dvars, kvars = set(free_vars(data)), set(free_vars(kernel))
    channels = tuple(r for r in red if r not in spatial)
    rows = tuple(a for a in outs if a in dvars and a not in spatial)
    cols = tuple(a for a in outs if a in kvars)
    if not channels or not cols or any(a in dvars for a in cols) or len(rows) + len(cols) + 2 != len(outs) \
            or kvars & {w.out for w in windows} or any(c not in dvars or c not in kvars for c in channels):
        return None
    if any(_step(data, w.out, w.red) != w.step for w in windows):
        return None
    return Conv(data, kernel, (windows[0], windows[1]), rows, cols, channels, body)


def match_taps(op: ComputeOp, body: Expr) -> Conv | None:
    """The 3x3 sum ``body`` spells whose taps are output axes (a convolution's weight gradient), else
    ``None``::

        Y[cols..., channels..., r, q] = sum_{rows..., y, x} A(rows..., cols..., y, x)
                                                              * B(rows..., channels..., y + r, x + q)

    (or ``y + d r``, ``d`` > 0 a dilation), where ``A`` (the head) reads no tap and ``B`` (the data, the
    sum's condition on it) reads ``y`` and ``r`` only through ``y + d r``.  The :class:`Conv` has
    ``taps_out``, ``kernel`` is ``A``, and each window's ``out`` is the summed axis, its ``red`` the tap."""
    factors = _factors(op, body)
    if factors is None:
        return None
    red, outs = body.arg.axes, op.axes
    windows: list[Window] = []
    for r in (r for r in outs if r.hi - r.lo == 3):
        for y in (y for y in red if y not in (w.out for w in windows)):
            steps = {_step(f, y, r) for f in factors if r in free_vars(f)}
            if len(steps) == 1 and (steps & set(range(1, y.hi - y.lo + 1))):
                windows.append(Window(y, r, steps.pop()))
                break
    if len(windows) != 2:
        return None
    taps = {w.red for w in windows}
    data_f = [f for f in factors if set(free_vars(f)) & taps]
    head_f = [f for f in factors if f not in data_f]
    if not head_f:
        return None
    if body.src[0] is not TRUE:
        data_f[0] = choice(Op.IF_THEN_ELSE, body.src[0], data_f[0], const(0.0, data_f[0].dtype))
    data, head = math.prod(data_f[1:], start=data_f[0]), math.prod(head_f[1:], start=head_f[0])
    dvars, hvars = set(free_vars(data)), set(free_vars(head))
    spatial = {w.out for w in windows} | taps
    rows = tuple(r for r in red if r not in spatial)
    channels = tuple(a for a in outs if a in dvars and a not in spatial)
    cols = tuple(a for a in outs if a in hvars and a not in spatial)
    if not channels or not cols or set(channels) & hvars or set(cols) & dvars \
            or len(channels) + len(cols) + 2 != len(outs):
        return None
    if any(_step(data, w.out, w.red) != w.step for w in windows):
        return None
    return Conv(data, head, (windows[0], windows[1]), rows, cols, channels, body, taps_out=True)


def _tiles(w: Window, m: int) -> tuple[int, int]:
    """``(tiles, residues)`` along ``w``: outputs ``lo + d m t + d i + p`` for ``i < m``, ``p < d``."""
    d = abs(w.step)
    return -(-(w.out.hi - w.out.lo) // (d * m)), min(d, w.out.hi - w.out.lo)


def tile_count(conv: Conv, m: int) -> int:
    """The output tiles of F(m, 3): the columns of each product per transform point."""
    return box(conv.rows) * math.prod(t * p for t, p in (_tiles(w, m) for w in conv.windows))


def macs(conv: Conv, m: int | None, vector_bits: int = 256) -> float:
    """The direct sum's cost (``m=None``) or F(m, 3)'s, in the products' multiply-adds on ``vector_bits``
    vectors: a transformed value (``(m + 2)^2`` a tile, channel in and out) :data:`TRANSFORM_MAC` a bit."""
    c, k = box(conv.channels), box(conv.cols)
    if m is None:
        return box(conv.rows) * box(tuple(w.out for w in conv.windows)) * 9 * c * k
    points = tile_count(conv, m) * (m + 2) ** 2
    return points * c * k + TRANSFORM_MAC * vector_bits * points * (c + k)


def choose_tile(conv: Conv, tiles: tuple[int, ...] = CHOSEN, vector_bits: int = 256) -> int | None:
    """The tile of ``tiles`` that costs least on ``vector_bits`` vectors, where it pays, else ``None``."""
    best = min(tiles, key=lambda m: macs(conv, m, vector_bits))
    pays = tile_count(conv, best) >= MIN_TILES and macs(conv, best, vector_bits) <= PAYS * macs(conv, None)
    return best if pays else None


# jumps where a value crosses an integer or a multiple (a float cast: none)
STEPS = frozenset({Op.CAST, Op.DATA_INDEX, Op.FLOORDIV, Op.MOD})
CONTINUOUS = frozenset({Op.MAXIMUM, Op.MINIMUM, Op.ABS})  # kinks whose value does not jump


def _agrees(n: Expr) -> bool:
    """Whether the ``select``/``if_then_else`` ``n`` on one comparison ``L op R`` is continuous across it:
    its branches agree where ``L = R`` (``select(v <= 0, 0, v)``, a ReLU; ``select(a > b, a, b)``, a max)."""
    cond, yes, no = n.src
    if cond.op not in COMPARISONS:
        return False
    left, right = cond.src
    if any(n is left for n in walk(right)):
        left, right = right, left
    if any(n is left for n in walk(right)):
        return False
    at = {left: right}
    return simplify_expr(substitute(yes, at)) is simplify_expr(substitute(no, at))


def _kinks(body: Expr) -> tuple[set[Expr], set[Expr]]:
    """``(steps, kinks)``: the nodes of ``body`` whose value jumps as an operand moves (a comparison other
    than the condition of a :func:`_agrees` choice, a cast to an integer, a floor division or remainder, an
    index read from data, a reduction that picks), and those whose value bends without jumping (``max``,
    ``min``, ``abs``, a max or min reduction, a choice that :func:`_agrees`)."""
    steps: set[Expr] = set()
    kinks: set[Expr] = set()
    for n in walk(body):
        if n.op is Op.REDUCE and n.arg.combiner.kind != "sum":
            (kinks if n.arg.combiner.kind in ("max", "min", "prod") else steps).add(n)
        elif n.op in CONTINUOUS:
            kinks.add(n)
        elif n.op in STEPS and (n.op is not Op.CAST or not is_float(n.dtype)):
            steps.add(n)
        for k, s in enumerate(n.src):
            if s.op in COMPARISONS:
                smooth = k == 0 and n.op in (Op.SELECT, Op.IF_THEN_ELSE) and _agrees(n)
                (kinks if smooth else steps).add(s)
    if body.op in COMPARISONS:
        steps.add(body)
    return steps, kinks


def kinked(ops: list[ComputeOp], bodies: dict, outputs: frozenset = frozenset()) -> set[ComputeOp]:
    """The ops of ``ops`` whose values reach a jump of the program through its reads (:func:`_kinks`), or a
    kink while leaving the kernel point by point (an output, or read by one that sums nothing: a reader's
    mask of it, as a backward's of a saved pre-activation, moves with the kink)."""
    reads: dict[ComputeOp, set[ComputeOp]] = {}  # op -> the ops whose values it reads
    at_steps: set[ComputeOp] = set()
    at_kinks: set[ComputeOp] = set()
    for op in ops:
        reads[op] = set()
        for body in bodies[op]:
            steps, kinks = _kinks(body)
            for n in walk(body):
                if n.op is Op.READ and isinstance(n.tensor.op, ComputeOp):
                    reads[op].add(n.tensor.op)
            at_steps.update(r.tensor.op for n in steps for r in walk(n) if r.op is Op.READ)
            at_kinks.update(r.tensor.op for n in kinks for r in walk(n) if r.op is Op.READ)
    exposed = {t.op for t in outputs} & reads.keys()
    todo = list(exposed)
    while todo:
        op = todo.pop()
        if not op.is_reduction:
            new = (reads[op] & reads.keys()) - exposed
            exposed |= new
            todo.extend(new)
    return _reaching(at_steps, reads) | (_reaching(at_kinks, reads) & exposed)


def _reaching(seeds: set[ComputeOp], reads: dict) -> set[ComputeOp]:
    """The ops of ``reads`` whose values reach ``seeds`` (the ops read there) through the reads."""
    out, grew = set(seeds), True
    while grew:
        grew = False
        for op, read in reads.items():
            if op in out:
                new = read - out
                grew |= bool(new)
                out |= new
    return out & reads.keys()


def _combination(coefs: tuple, terms: list[Expr], dtype: str) -> Expr:
    """``sum coefs[j] terms[j]`` over the nonzero coefficients."""
    out: Expr | None = None
    for k, t in zip(coefs, terms):
        if not k:
            continue
        term = t if abs(k) == 1 else const(float(abs(k)), dtype) * t
        out = (term if k > 0 else -term) if out is None else out + term if k > 0 else out - term
    return out if out is not None else const(0.0, dtype)


def choice_tree(axis: Expr, leaves: list[Expr]) -> Expr:
    """``leaves[axis]`` as a balanced tree of ``if_then_else`` on ``axis`` (from 0)."""
    def node(lo: int, hi: int) -> Expr:
        if hi - lo == 1:
            return leaves[lo]
        mid = (lo + hi) // 2
        return choice(Op.IF_THEN_ELSE, axis < const(mid, axis.dtype), node(lo, mid), node(mid, hi))
    return node(0, len(leaves))


class _Builder:
    """The ops of one rewrite, named after the sum and derived from it (``Role.SPLIT``)."""

    def __init__(self, op: ComputeOp, conv: Conv) -> None:
        self.op, self.conv, self.made = op, conv, []
        self.role = Provenance(Role.SPLIT, op.provenance.group, Tensor(op, 0))
        self.dt, self.fdt = op.axes[0].dtype, conv.sum.dtype

    def table(self, name: str, rows: tuple) -> Tensor:
        """A constant matrix as a tensor (a tree of constants over its two axes)."""
        i, j = var("i", 0, len(rows), self.dt), var("j", 0, len(rows[0]), self.dt)
        body = choice_tree(i, [choice_tree(j, [const(float(v), self.fdt) for v in row]) for row in rows])
        return self.add(name, (i, j), body)

    def add(self, name: str, axes: tuple[Expr, ...], body: Expr) -> Tensor:
        made = ComputeOp(f"{self.op.name}.wino_{name}", self.op.tag, axes, (body,), (), self.role)
        self.made.append(made)
        return Tensor(made, 0)

    def sum(self, name: str, axes: tuple[Expr, ...], extent: int, term: Callable[[Expr], Expr]) -> Tensor:
        """``name[axes] = sum_{k < extent} term(k)``."""
        k = var("k", 0, extent, self.dt)
        body = Expr(Op.REDUCE, self.fdt, (TRUE, term(k)), ReduceArg(self.conv.sum.arg.combiner, (k,), 0))
        return self.add(name, axes, body)


def _data_transform(bld: _Builder, conv: Conv, m: int) -> tuple[Tensor, tuple[Expr, ...]]:
    """``(V, its tile axes)``: ``V[xi, nu, ch..., rows..., ty, py, px, tx] = (B^T d B)[xi, nu]`` over the
    data's tiles of ``(m + 2)^2`` points (module docstring)."""
    bt, a, dt = TRANSFORMS[m][0], m + 2, bld.dt
    wy, wx = conv.windows
    dy, dx = abs(wy.step), abs(wx.step)
    (ty_n, py_n), (tx_n, px_n) = _tiles(wy, m), _tiles(wx, m)
    c = partial(const, dtype=dt)

    def first_input(w: Window) -> tuple[int, int]:
        """(the first input point the sum reads along ``w``, the last)"""
        shift = w.step * w.red.lo + (0 if w.step > 0 else 2 * w.step)
        return w.out.lo + shift, w.out.hi - 1 + shift + 2 * abs(w.step)
    (ylo, yhi), (xlo, xhi) = first_input(wy), first_input(wx)
    uy, ux = var("uy", ylo, yhi + 1, dt), var("ux", xlo, xhi + 1, dt)
    data = _normalized(substitute(conv.data, {wy.out: uy - c(wy.step) * wy.red,
                                              wx.out: ux - c(wx.step) * wx.red}))

    # D[r, rows, ch, uy, px, t]: the data at column xlo + px + dx (m t + r), zero past the last it reads
    rows, ch = copies(conv.rows), copies(conv.channels)
    r_, py_rows = var("r", 0, m, dt), var("uy", 0, dy * (m * (ty_n - 1) + a - 1) + py_n, dt)  # (from ylo)
    px, t = var("px", 0, px_n, dt), var("t", 0, tx_n + 1, dt)
    col = c(xlo) + px + c(dx) * (c(m) * t + r_)
    value = substitute(data, dict(zip(conv.rows, rows)) | dict(zip(conv.channels, ch))
                       | {uy: c(ylo) + py_rows, ux: col})
    guard = TRUE
    if ylo + py_rows.hi - 1 > yhi:
        guard = py_rows <= c(yhi - ylo)
    if xlo + px_n - 1 + dx * (m * tx_n + m - 1) > xhi:
        guard = col <= c(xhi) if guard is TRUE else guard & (col <= c(xhi))
    if guard is not TRUE:
        value = choice(Op.IF_THEN_ELSE, guard, value, const(0.0, value.dtype))
    d_t = bld.add("d", (r_,) + rows + ch + (py_rows, px, t), value)

    # V1[nu, rows, ch, uy, px, tx] = sum_k B^T[nu, k] D[k % m, ..., tx + k // m]: the columns
    nu, tx = var("nu", 0, a, dt), var("tx", 0, tx_n, dt)
    rows, ch, uy1 = copies(conv.rows), copies(conv.channels), copies((py_rows,))
    dk = [d_t[(c(k % m),) + rows + ch + uy1 + (px, tx + c(k // m))] for k in range(a)]
    v1 = bld.add("v1", (nu,) + rows + ch + uy1 + (px, tx),
                 choice_tree(nu, [_combination(row, dk, bld.fdt) for row in bt]))

    # V[xi, nu, ch, rows, ty, py, px, tx] = sum_k B^T[xi, k] V1[nu, ..., py + dy (m ty + k), ...]: the rows
    xi, nu = var("xi", 0, a, dt), var("nu", 0, a, dt)
    ty, py = var("ty", 0, ty_n, dt), var("py", 0, py_n, dt)
    rows, ch, px, tx = copies(conv.rows), copies(conv.channels), copies((px,))[0], copies((tx,))[0]
    tiles = (ty, py, px, tx)
    vk = [v1[(nu,) + rows + ch + (py + c(dy) * (c(m) * ty + c(k)), px, tx)] for k in range(a)]
    v_t = bld.add("v", (xi, nu) + ch + rows + tiles,
                  choice_tree(xi, [_combination(row, vk, bld.fdt) for row in bt]))
    return v_t, tiles


def rewrite(op: ComputeOp, conv: Conv, m: int) -> tuple[list[ComputeOp], Expr]:
    """``(the new ops, op's new body)`` computing ``op``'s sum by F(m, 3) (module docstring); every
    transform of the data and the output is a tree of constant combinations over an outer axis or over the
    last axis's digits, the kernel's a short sum against a constant matrix."""
    _, g, at = TRANSFORMS[m]
    a = m + 2
    bld = _Builder(op, conv)
    dt = bld.dt
    wy, wx = conv.windows
    g_t, a_t = bld.table("g", g), bld.table("at", at)
    v_t, tiles = _data_transform(bld, conv, m)
    c = partial(const, dtype=dt)

    # U1[xi, cols, ch, q] = sum_r G[xi, r] W(r, q), U[xi, nu, cols, ch] = sum_q G[nu, q] U1[xi, ..., q]
    def kernel_at(cols: tuple, ch: tuple, r: Expr, q: Expr) -> Expr:  # (flipped where the step is negative)
        at_r = c(wy.red.lo) + (r if wy.step > 0 else c(2) - r)
        at_q = c(wx.red.lo) + (q if wx.step > 0 else c(2) - q)
        return substitute(conv.kernel, dict(zip(conv.channels, ch)) | dict(zip(conv.cols, cols))
                          | {wy.red: at_r, wx.red: at_q})
    xi, cols, ch, q = var("xi", 0, a, dt), copies(conv.cols), copies(conv.channels), var("q", 0, 3, dt)
    u1 = bld.sum("u1", (xi,) + cols + ch + (q,), 3, lambda k: g_t[xi, k] * kernel_at(cols, ch, k, q))
    xi, nu, cols, ch = var("xi", 0, a, dt), var("nu", 0, a, dt), copies(conv.cols), copies(conv.channels)
    u_t = bld.sum("u", (xi, nu) + cols + ch, 3, lambda k: g_t[nu, k] * u1[(xi,) + cols + ch + (k,)])

    # M[xi, nu, rows, cols, tiles] = sum_ch U V: one product per transform point
    xi, nu = var("xi", 0, a, dt), var("nu", 0, a, dt)
    rows, cols, ch = copies(conv.rows), copies(conv.cols), copies(conv.channels)
    tiles = copies(tiles)
    prod = u_t[(xi, nu) + cols + ch] * v_t[(xi, nu) + ch + rows + tiles]
    m_t = bld.add("m", (xi, nu) + cols + rows + tiles,
                  Expr(Op.REDUCE, bld.fdt, (TRUE, prod), ReduceArg(conv.sum.arg.combiner, ch, 0)))

    # O[xi, cols, rows, ty, py, px, xq] = (A^T M[xi, :, ..., xq // m])[xq % m]: the output transform's
    # columns, each tile's m outputs side by side (xq = m tx + j), so that Y reads them in order
    xi, rows, cols = var("xi", 0, a, dt), copies(conv.rows), copies(conv.cols)
    ty, py, px = copies(tiles[:3])
    xq = var("xq", 0, m * _tiles(wx, m)[0], dt)
    mq = [m_t[(xi, c(k)) + cols + rows + (ty, py, px, xq // c(m))] for k in range(a)]
    o_t = bld.add("o", (xi,) + cols + rows + (ty, py, px, xq),
                  choice_tree(xq % c(m), [_combination(row, mq, bld.fdt) for row in at]))

    # Y[..., y, x] = sum_xi A^T[i, xi] O[xi, ...] at y = lo + py + dy (m ty + i), x = lo + px + dx xq
    def split(w: Window) -> tuple[Expr, Expr, Expr, Expr]:
        """(tile, point in the tile, residue, the tiles' points side by side) of ``w``'s output axis"""
        d, rel = abs(w.step), w.out - c(w.out.lo) if w.out.lo else w.out
        if d == 1:
            return rel // c(m), rel % c(m), c(0), rel
        return rel // c(d * m), (rel // c(d)) % c(m), rel % c(d), rel // c(d)
    (ty_, iy, py_, _), (_, _, px_, xq_) = split(wy), split(wx)
    s = var("xi", 0, a, dt)
    term = a_t[iy, s] * o_t[(s,) + conv.cols + conv.rows + (ty_, py_, px_, xq_)]
    body = Expr(Op.REDUCE, bld.fdt, (TRUE, term), ReduceArg(conv.sum.arg.combiner, (s,), 0))
    return list(bld.made), body


def rewrite_taps(op: ComputeOp, conv: Conv, m: int) -> tuple[list[ComputeOp], Expr]:
    """``(the new ops, op's new body)`` computing a sum of :func:`match_taps` by the transpose of F(m, 3): for
    each tile, ``sum_i g_i d_{i + r} = sum_xi G[xi, r] (A g)_xi (B^T d)_xi``, so

        Y[cols, ch, r, q] = sum_{xi, nu} G[xi, r] G[nu, q] M[xi, nu, cols, ch]
        M[xi, nu, cols, ch] = sum_{rows, tiles} (A^T^T g A^T)[xi, nu] (B^T d B)[xi, nu]

    over the head's tiles ``g`` of ``m^2`` points (zero past its last) and the data's of ``(m + 2)^2`` (at a
    dilation ``d``, a tile's points ``d`` apart, one set of tiles per residue)."""
    _, g, at = TRANSFORMS[m]
    a = m + 2
    bld = _Builder(op, conv)
    dt, fdt = bld.dt, bld.fdt
    wy, wx = conv.windows
    (ty_n, py_n), (tx_n, px_n) = _tiles(wy, m), _tiles(wx, m)
    dy, dx, ny, nx = wy.step, wx.step, wy.out.hi - wy.out.lo, wx.out.hi - wx.out.lo
    g_t = bld.table("g", g)
    v_t, _ = _data_transform(bld, conv, m)
    a_rows = [tuple(at[i][j] for i in range(m)) for j in range(a)]  # A, the transpose of A^T
    c = partial(const, dtype=dt)

    # H1[nu, rows, cols, y, px, tx] = sum_j A[nu, j] g(..., y, px + dx (m tx + j)): the head's columns, zero
    # past its last
    nu, y = var("nu", 0, a, dt), var("y", 0, dy * m * ty_n, dt)
    px, tx = var("px", 0, px_n, dt), var("tx", 0, tx_n, dt)
    rows, cols = copies(conv.rows), copies(conv.cols)

    def head_at(j: int) -> Expr:
        col = px + c(dx) * (c(m) * tx + c(j))
        value = substitute(conv.kernel, dict(zip(conv.rows, rows)) | dict(zip(conv.cols, cols))
                           | {wy.out: c(wy.out.lo) + y, wx.out: c(wx.out.lo) + col})
        guards = [y < c(ny)] if y.hi > ny else []
        guards += [col < c(nx)] if px_n - 1 + dx * (m * tx_n - 1) >= nx else []
        if not guards:
            return value
        guard = guards[0] if len(guards) == 1 else guards[0] & guards[1]
        return choice(Op.IF_THEN_ELSE, guard, value, const(0.0, value.dtype))
    h1 = bld.add("h1", (nu,) + rows + cols + (y, px, tx),
                 choice_tree(nu, [_combination(row, [head_at(j) for j in range(m)], fdt) for row in a_rows]))

    # H[xi, nu, cols, rows, ty, py, px, tx] = sum_i A[xi, i] H1[nu, ..., py + dy (m ty + i), px, tx]: the rows
    xi, nu = var("xi", 0, a, dt), var("nu", 0, a, dt)
    tiles = (var("ty", 0, ty_n, dt), var("py", 0, py_n, dt), var("px", 0, px_n, dt), var("tx", 0, tx_n, dt))
    rows, cols, (ty, py, px, tx) = copies(conv.rows), copies(conv.cols), tiles
    hk = [h1[(nu,) + rows + cols + (py + c(dy) * (c(m) * ty + c(i)), px, tx)] for i in range(m)]
    h_t = bld.add("h", (xi, nu) + cols + rows + tiles,
                  choice_tree(xi, [_combination(row, hk, fdt) for row in a_rows]))

    # M[xi, nu, cols, ch] = sum_{rows, tiles} H V: one product per transform point, over the tiles
    xi, nu, tiles = var("xi", 0, a, dt), var("nu", 0, a, dt), copies(tiles)
    rows, cols, ch = copies(conv.rows), copies(conv.cols), copies(conv.channels)
    prod = h_t[(xi, nu) + cols + rows + tiles] * v_t[(xi, nu) + ch + rows + tiles]
    m_t = bld.add("m", (xi, nu) + cols + ch,
                  Expr(Op.REDUCE, fdt, (TRUE, prod), ReduceArg(conv.sum.arg.combiner, rows + tiles, 0)))

    # T[xi, q, cols, ch] = sum_nu G[nu, q] M[xi, nu, cols, ch]; Y[cols, ch, r, q] = sum_xi G[xi, r] T[xi, q]
    g_cols = [tuple(g[k][j] for k in range(a)) for j in range(3)]  # G^T
    xi, q, cols, ch = var("xi", 0, a, dt), var("q", 0, 3, dt), copies(conv.cols), copies(conv.channels)
    mk = [m_t[(xi, c(k)) + cols + ch] for k in range(a)]
    t_t = bld.add("t", (xi, q) + cols + ch, choice_tree(q, [_combination(row, mk, fdt) for row in g_cols]))
    s_, (r, q) = var("xi", 0, a, dt), (w.red - c(w.red.lo) if w.red.lo else w.red for w in conv.windows)
    term = g_t[s_, r] * t_t[(s_, q) + conv.cols + conv.channels]
    return list(bld.made), Expr(Op.REDUCE, fdt, (TRUE, term), ReduceArg(conv.sum.arg.combiner, (s_,), 0))


def winograd(ops: list[ComputeOp], bodies: dict, check: Callable[[ComputeOp, tuple], bool],
             tile: int | None = None, outputs: frozenset = frozenset(), bits: int = 256) -> list[ComputeOp]:
    """``ops`` with each 3x3 sum where F(m, 3) pays on ``bits``-bit vectors computed by it (``tile``: option
    ``winograd``, 0 none, 2 or 4 for all); ``bodies`` updated in place; ``check`` proves reads in bounds."""
    if tile == 0:
        return ops
    out: list[ComputeOp] = []
    reach: set[ComputeOp] | None = None  # the ops whose values reach a kink (computed at the first match)
    for op in ops:
        conv = (match(op, bodies[op][0]) or match_taps(op, bodies[op][0])) if len(bodies[op]) == 1 else None
        m = None
        if conv is not None and tile:
            m = tile
        elif conv is not None:
            reach = kinked(ops, bodies, outputs) if reach is None else reach
            m = choose_tile(conv, SMOOTH if op in reach else CHOSEN, bits)
        if m is not None:
            made, body = (rewrite_taps if conv.taps_out else rewrite)(op, conv, m)
            if all(check(o, o.body) for o in made) and check(op, (body,)):
                out.extend(made)
                bodies.update((o, o.body) for o in made)
                bodies[op] = (body,)
        out.append(op)
    return out
