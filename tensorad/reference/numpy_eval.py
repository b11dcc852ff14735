"""``ta.evaluate``: a slow, plain-NumPy reference evaluator of the whole language, the test oracle,
written for obvious correctness.

Tensors are evaluated once each, producers first.  A compute op is evaluated over a broadcast index grid
(op axis ``d`` along grid dimension ``d``, reduce axes after), its body one ``ir.rewrite.fold`` with
``ARRAY_RULES``; a ``REDUCE`` is ``np.<ufunc>.reduce`` masked by ``where`` for built-in reducers, a
custom combiner folded per reduce point in C order from the identity.  Values are computed in the
tensor's dtype; index arithmetic is exact (int64), int32 data wraps, integer ``//`` and ``%`` floor.
``if_then_else`` is lazy: an out-of-bounds read *poisons* its points, poison flows up except through an
untaken branch or a ``where``-excluded point, and a poisoned result point is an
:class:`OutOfBoundsError`.  Floating-point warnings are silenced.

:func:`evaluate_in_order` gives a test its allowances, never a user's answer: built-in sums and products
folded one term at a time (``"sequential"``, ``"reversed"``, by index parity ``"mixed"``/``"mixed-odd"``,
or axis by axis ``"nested"``; the spread between orders is ``fuzz/checks.Case.order_spread``);
``strong_zero`` (a zero factor makes a product zero, as PyTorch's and JAX's derivatives); ``rounded_math``
(float32 :data:`ROUNDED_MATH` in float64, rounded once); ``unsigned_zeros`` (every zero ``+0``, as
optimized code may flip a zero's sign); ``given`` (tensors' values taken as given); ``jitter=(seed,
ulps)`` (every float read moves by a random ``|u| <= |ulps|`` ulps, per read and element, as a fast-math
kernel rounds each occurrence of a value on its own; a negative ``ulps`` mirrors the draws)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from tensorad.ir import dtype as dt
from tensorad.ir.expr import Expr, Op
from tensorad.ir.intrange import check_index_range
from tensorad.ir.printer import expr_to_str
from tensorad.ir.rewrite import fold, fold_along, tensor_graph, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.lang.bounds import OutOfBoundsError

from .feed import check_feed, convert_array

# Every value below is a pair (array, poison): poison is None or a bool mask, broadcastable to
# the grid, of the points whose value came from an out-of-bounds read.


def _erf(x: np.ndarray) -> np.ndarray:
    """``math.erf`` elementwise, in ``x``'s dtype (no SciPy: the reference must stay plain)."""
    x = np.asarray(x)
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()


def _const(n: Expr) -> np.ndarray:
    """A constant in its dtype; an ``int32`` one past int32's range is exact index arithmetic
    (int64), as in compiled code: the operation it meets is computed in 64 bits."""
    if n.dtype == "int32" and not -(1 << 31) <= int(n.arg) < (1 << 31):
        return np.asarray(int(n.arg), dtype=np.int64)
    return np.asarray(n.arg, dtype=dt.numpy_dtype(n.dtype))


def _cast(dtype: str, a: np.ndarray) -> np.ndarray:
    """``a`` converted to ``dtype``; float to int saturates as compiled code does
    (:func:`tensorad.ir.dtype.float_to_int`)."""
    a = np.asarray(a)
    if dt.is_int(dtype) and (a.dtype.kind == "f" or a.dtype.name == "bfloat16"):
        return dt.float_to_int(a, dtype)
    return a.astype(dt.numpy_dtype(dtype))


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a ** b`` with C's ``pow`` at a base of -inf, as compiled code has it: NumPy computes
    ``-inf ** 0.5`` as a square root (NaN) on some array shapes and as ``pow`` (inf) on
    others.  ``pow(-inf, b)`` is -inf / -0 for odd integers b > 0 / b < 0, else inf / 0."""
    r = np.power(a, b)
    bad = np.isneginf(a) & np.isnan(r) & ~np.isnan(b)
    if np.any(bad):
        r = np.where(bad, np.where(b > 0, np.inf, 0.0).astype(r.dtype), r)
    return r


def _reassociable(comb: Any) -> bool:
    """Whether a custom combiner is a bare ``x + y`` or ``x * y`` of its two operands (one
    value each): a fold that fast math reassociates like a built-in sum or product."""
    if comb.arity != 1 or len(comb.result) != 1:
        return False
    r = comb.result[0]
    return r.op in (Op.ADD, Op.MUL) and {id(x) for x in r.src} == {id(comb.lhs[0]), id(comb.rhs[0])}


def _in_float64(fn):
    """``fn`` computed in float64 for float32 operands, its result rounded once to float32."""
    def rule(node: Expr, *args: np.ndarray) -> np.ndarray:
        if not all(np.asarray(a).dtype == np.float32 for a in args):
            return fn(node, *args)
        return np.asarray(fn(node, *(np.asarray(a, np.float64) for a in args))).astype(np.float32)
    return rule


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # 1 / (1 + e^-x), in x's dtype (Python scalars are weak under NumPy 2 promotion)
    return 1 / (1 + np.exp(-x))


# ---- the scalar semantics: one NumPy function per op (operands already share node.dtype) ----
ARRAY_RULES: dict[Op, Any] = {
    Op.CONST: lambda n: _const(n),                                   # c
    Op.ADD: lambda n, a, b: np.add(a, b),                            # a + b
    Op.SUB: lambda n, a, b: np.subtract(a, b),                       # a - b
    Op.MUL: lambda n, a, b: np.multiply(a, b),                       # a * b
    Op.DIV: lambda n, a, b: np.true_divide(a, b),                    # a / b (floats only)
    Op.FLOORDIV: lambda n, a, b: np.floor_divide(a, b),              # floor(a / b): -7 // 2 = -4
    Op.MOD: lambda n, a, b: np.mod(a, b),                            # a - b*floor(a/b): -7 % 2 = 1
    Op.NEG: lambda n, a: np.negative(a),                             # -a
    Op.POW: lambda n, a, b: _pow(a, b),                              # a ** b (C's pow)
    Op.MAXIMUM: lambda n, a, b: dt.maximum(a, b),                    # max(a, b), -0 < +0
    Op.MINIMUM: lambda n, a, b: dt.minimum(a, b),                    # min(a, b), -0 < +0
    Op.LT: lambda n, a, b: np.less(a, b),                            # a < b
    Op.LE: lambda n, a, b: np.less_equal(a, b),                      # a <= b
    Op.GT: lambda n, a, b: np.greater(a, b),                         # a > b
    Op.GE: lambda n, a, b: np.greater_equal(a, b),                   # a >= b
    Op.EQ: lambda n, a, b: np.equal(a, b),                           # a == b
    Op.NE: lambda n, a, b: np.not_equal(a, b),                       # a != b
    Op.AND: lambda n, a, b: np.logical_and(a, b),                    # a && b
    Op.OR: lambda n, a, b: np.logical_or(a, b),                      # a || b
    Op.NOT: lambda n, a: np.logical_not(a),                          # !a
    Op.SELECT: lambda n, c, a, b: np.where(c, a, b),                 # c ? a : b, both evaluated
    Op.CAST: lambda n, a: _cast(n.dtype, a),                         # float->int saturates; half: RNE
    Op.EXP: lambda n, a: np.exp(a),                                  # e^a
    Op.LOG: lambda n, a: np.log(a),                                  # ln a
    Op.SQRT: lambda n, a: np.sqrt(a),                                # a^(1/2)
    Op.TANH: lambda n, a: np.tanh(a),                                # tanh a
    Op.SIGMOID: lambda n, a: _sigmoid(a),                            # 1 / (1 + e^-a)
    Op.ABS: lambda n, a: np.abs(a),                                  # |a|
    Op.SIN: lambda n, a: np.sin(a),                                  # sin a
    Op.COS: lambda n, a: np.cos(a),                                  # cos a
    Op.ERF: lambda n, a: _erf(a),                                    # 2/sqrt(pi) int_0^a e^-t^2 dt
}
# Context-dependent ops, handled by _Grid: VAR, READ, IF_THEN_ELSE, REDUCE, DATA_INDEX.
CONTEXT_OPS = frozenset({Op.VAR, Op.READ, Op.IF_THEN_ELSE, Op.REDUCE, Op.DATA_INDEX})

BUILTIN_FOLDS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
ORDERS = ("numpy", "sequential", "reversed", "mixed", "mixed-odd", "nested")
ORDERED_FOLDS = frozenset({"sum", "prod"})  # the folds whose rounding depends on the order
# The math functions that ``rounded_math`` computes in float64 for float32 operands.
ROUNDED_MATH = frozenset({Op.EXP, Op.LOG, Op.TANH, Op.SIGMOID, Op.SIN, Op.COS, Op.ERF, Op.POW})


def _or(*masks: Any) -> Any:
    out = None
    for m in masks:
        if m is not None:
            out = m if out is None else np.logical_or(out, m)
    return out


def _unsigned(rule):
    """``rule`` with every zero of its float result made ``+0`` (``x + 0``, IEEE): ``unsigned_zeros``."""
    def unsigned(node: Expr, *args: tuple) -> tuple:
        out, poison = rule(node, *args)
        out = np.asarray(out)
        return (out + out.dtype.type(0) if out.dtype.kind == "f" else out), poison
    return unsigned


def _lift(fn):
    """Turn an array rule into a rule on (array, poison) pairs: poison is the union."""
    def rule(node: Expr, *args: tuple) -> tuple:
        out = np.asarray(fn(node, *(a for a, _ in args)))
        want = dt.numpy_dtype(node.dtype)
        if out.dtype != want and not (out.dtype == np.int64 and node.dtype == "int32"
                                      and node.op is not Op.CAST):
            out = out.astype(want)  # (exact index arithmetic stays int64)
        return out, _or(*(p for _, p in args))
    return rule


class _Grid:
    """Evaluates the expressions of one compute op over its broadcast index grid."""

    def __init__(self, name: str, env: dict[Expr, np.ndarray], values: dict[Tensor, np.ndarray],
                 axis_pos: dict[Expr, int], grid_shape: tuple[int, ...], order: str = "numpy",
                 origin: tuple[int, ...] = (), strong_zero: bool = False,
                 rounded_math: bool = False, unsigned_zeros: bool = False,
                 jitter: tuple[np.random.Generator, float] | None = None) -> None:
        self.name, self.env, self.values, self.axis_pos = name, env, values, axis_pos
        self.grid_shape = grid_shape
        self.origin = origin or (0,) * len(grid_shape)  # each grid dimension's first index value
        self.order, self.strong_zero, self.jitter = order, strong_zero, jitter
        self.rounded_math, self.unsigned_zeros = rounded_math, unsigned_zeros
        self.memo: dict = {}
        self.oob: dict[Expr, tuple[np.ndarray, list[np.ndarray]]] = {}
        self.reduced: dict = {}
        self.table = {op: _lift(fn) for op, fn in ARRAY_RULES.items()}
        self.table.update({Op.VAR: self._var, Op.READ: self._read,
                           Op.IF_THEN_ELSE: self._if_then_else, Op.REDUCE: self._reduce,
                           Op.DATA_INDEX: self._data_index})
        if strong_zero:
            # a zero factor gives zero whatever the other is (0 * inf = 0)
            self.table[Op.MUL] = _lift(lambda n, a, b: np.where(
                (a == 0) | (b == 0), np.zeros((), np.result_type(a, b)), np.multiply(a, b)))
        if rounded_math:
            self.table.update({op: _lift(_in_float64(ARRAY_RULES[op])) for op in ROUNDED_MATH})
        if unsigned_zeros:
            self.table = {op: _unsigned(rule) for op, rule in self.table.items()}

    def release(self) -> None:
        """Drop the arrays of the grid now (its table's bound methods make a reference cycle)."""
        self.memo.clear()
        self.reduced.clear()
        self.oob.clear()
        self.table.clear()

    def eval(self, e: Expr) -> tuple[np.ndarray, Any]:
        return fold(e, self.table, self.memo)

    def _var(self, node: Expr) -> tuple:
        try:
            return self.env[node], None
        except KeyError:
            raise ValueError(f"evaluate: {self.name}: variable {node.name!r} is not bound here "
                             "(neither an axis of the compute nor a reduce axis)") from None

    def _read(self, node: Expr, *idx: tuple) -> tuple:
        t = node.arg
        data = self.values[t]
        poison = _or(*(p for _, p in idx))
        if not idx:
            return self._jittered(np.asarray(data)), poison
        arrays = np.broadcast_arrays(*(a for a, _ in idx))
        bad = np.zeros(arrays[0].shape, dtype=bool)
        clipped = []
        for a, size in zip(arrays, t.shape):
            bad |= (a < 0) | (a >= size)
            clipped.append(np.clip(a, 0, max(size - 1, 0)))
        out = np.zeros(bad.shape, data.dtype) if data.size == 0 else data[tuple(clipped)]
        if bad.any():
            self.oob.setdefault(node, (bad, arrays))
            poison = _or(poison, bad)
        return self._jittered(out), poison

    def _jittered(self, out: np.ndarray) -> np.ndarray:
        """``out`` moved by the read's own random ulps (``jitter``: the module's docstring)."""
        if self.jitter is None or not (out.dtype.kind == "f" or out.dtype == dt.numpy_dtype("bfloat16")):
            return out
        rng, ulps = self.jitter
        eps = float(ml_dtypes.finfo(out.dtype).eps)
        step = rng.uniform(-1.0, 1.0, out.shape) * (ulps * eps)
        return (out.astype(np.float64) * (1.0 + step)).astype(out.dtype)

    def _data_index(self, node: Expr, v: tuple) -> tuple:
        """``np.take``'s modes: ``clip`` and ``wrap`` bring the value into ``[0, n)``; under
        ``raise`` an out-of-range value poisons its points (an error where it is evaluated)."""
        a, poison = v
        a = np.asarray(a, dtype=np.int64)
        n, mode = node.arg.extent, node.arg.mode
        if mode == "clip":
            return np.clip(a, 0, n - 1), poison
        if mode == "wrap":
            return np.mod(a, n), poison
        bad = (a < 0) | (a >= n)
        if bad.any():
            self.oob.setdefault(node, (bad, [a]))
            poison = _or(poison, bad)
        return np.clip(a, 0, n - 1), poison

    def _if_then_else(self, node: Expr, c: tuple, a: tuple, b: tuple) -> tuple:
        (cv, cp), (av, ap), (bv, bp) = c, a, b
        out = np.where(cv, av, bv)
        branch = None
        if ap is not None or bp is not None:  # only the taken branch's poison counts
            branch = np.where(cv, False if ap is None else ap, False if bp is None else bp)
        return out, _or(cp, branch)

    def _reduce(self, node: Expr, cond: tuple, *sources: tuple) -> tuple:
        ra = node.arg
        key = (node.src, ra.combiner, ra.axes)  # the outputs of one multi-value reduction
        if key not in self.reduced:
            self.reduced[key] = self._fold_reduction(ra, cond, sources)
        return self.reduced[key][ra.value_index]

    def _fold_reduction(self, ra: Any, cond: tuple, sources: Sequence[tuple]) -> list[tuple]:
        comb = ra.combiner
        pos = tuple(self.axis_pos[a] for a in ra.axes)
        extents = [1] * len(self.grid_shape)
        for p in pos:
            extents[p] = self.grid_shape[p]
        shape = np.broadcast_shapes(cond[0].shape, *(s.shape for s, _ in sources), tuple(extents))
        mask = np.broadcast_to(cond[0], shape)
        srcs = [np.broadcast_to(s, shape) for s, _ in sources]
        # Poison: the condition everywhere, the sources where the condition holds.
        poison = _or(cond[1], *(None if p is None else np.logical_and(p, mask) for _, p in sources))
        if poison is not None:
            poison = np.logical_or.reduce(np.broadcast_to(poison, shape), axis=pos, keepdims=True)
        ufunc = BUILTIN_FOLDS.get(comb.kind)
        if ufunc is not None and comb.identity[0].op is Op.CONST:
            s = srcs[0]
            if self.order != "numpy" and comb.kind in ORDERED_FOLDS:
                first = comb.identity[0].arg
                if self.order == "nested":
                    out = _fold_nested(ufunc, s, mask, pos, first)
                else:
                    out = self._in_order(pos, lambda back: _fold_in_order(ufunc, s, mask, pos, first, back))
            elif comb.kind in ("max", "min"):
                out = dt.fold_extreme(comb.kind, s, pos, mask, comb.identity[0].arg)
            else:
                out = ufunc.reduce(s, axis=pos, keepdims=True, where=mask,
                                   initial=comb.identity[0].arg, dtype=s.dtype)
                if self.strong_zero and comb.kind == "prod":
                    zero = np.logical_or.reduce(mask & (s == 0), axis=pos, keepdims=True)
                    out = np.where(zero, np.zeros((), s.dtype), out)
            return [(np.asarray(out, dtype=s.dtype), poison)]
        if self.order != "numpy" and _reassociable(comb):
            folded = self._in_order(pos, lambda back: self._fold_custom(comb, pos, mask, srcs, back)[0])
            return [(folded, poison)]
        return [(a, poison) for a in self._fold_custom(comb, pos, mask, srcs)]

    def _in_order(self, pos: tuple[int, ...], fold) -> np.ndarray:
        """``fold(reverse)`` (a fold over grid dimensions ``pos``) in this grid's order: forward, reversed,
        or by index parity over the grid (``"mixed"``: odd elements reversed; ``"mixed-odd"``: even)."""
        if self.order in ("sequential", "reversed", "nested"):  # (nested: custom combiners in index order)
            return fold(self.order == "reversed")
        outer = tuple(1 if d in pos else n for d, n in enumerate(self.grid_shape))
        fwd, back = np.asarray(fold(False)), np.asarray(fold(True))
        shape = np.broadcast_shapes(fwd.shape, back.shape, outer)
        fwd, back = np.broadcast_to(fwd, shape), np.broadcast_to(back, shape)
        odd = sum(idx + (self.origin[d] if d not in pos else 0)
                  for d, idx in enumerate(np.indices(fwd.shape))) % 2 == 1
        up = odd if self.order == "mixed" else ~odd
        out = np.where(up, back, fwd)
        if out.dtype.kind != "f":
            return out
        # and moved apart by the rounding a reassociation of n terms may add (n/2 ulps, up or down by
        # parity), so that two elements equal in every order compare either way
        terms = int(np.prod([self.grid_shape[d] for d in pos], dtype=np.int64))
        step = out.dtype.type(terms * np.finfo(out.dtype).eps / 2)
        one = out.dtype.type(1)
        with np.errstate(all="ignore"):
            return (out * np.where(up, one + step, one - step)).astype(out.dtype)

    def _fold_custom(self, comb: Any, pos: tuple[int, ...], mask: np.ndarray,
                     srcs: list[np.ndarray], reverse: bool = False) -> list[np.ndarray]:
        """Sequential fold of a custom combiner: acc = combine(acc, value) per reduce point (``reverse``d)."""
        last = tuple(range(-len(pos), 0))
        mask = np.moveaxis(mask, pos, last)
        srcs = [np.moveaxis(s, pos, last) for s in srcs]
        outer = mask.shape[:mask.ndim - len(pos)]
        sub = _Grid(self.name, {}, self.values, {}, (), strong_zero=self.strong_zero,
                    rounded_math=self.rounded_math, unsigned_zeros=self.unsigned_zeros)
        acc = [np.array(np.broadcast_to(sub.eval(e)[0], outer), dtype=v.dtype)
               for e, v in zip(comb.identity, comb.lhs)]
        points = list(np.ndindex(*mask.shape[len(outer):]))
        for point in reversed(points) if reverse else points:
            here = mask[(..., *point)]
            if not here.any():
                continue
            sub.memo = {}
            sub.env = dict(zip(comb.lhs, acc))
            sub.env.update(zip(comb.rhs, (s[(..., *point)] for s in srcs)))
            new = [sub.eval(r)[0] for r in comb.result]
            acc = [np.where(here, n, a).astype(a.dtype) for n, a in zip(new, acc)]
        return [np.expand_dims(a, tuple(sorted(pos))) for a in acc]

    def out_of_bounds(self, op: ComputeOp, poison: np.ndarray, shape: tuple[int, ...]) -> Exception:
        """The error for a poisoned result: which read, which index values, at which point."""
        outer = tuple(np.argwhere(np.broadcast_to(poison, shape))[0][:len(op.axes)])
        names = {v: v.name for v in self.env}
        point = ", ".join(f"{ax.name}={int(x) + o}" for ax, x, o in zip(op.axes, outer, self.origin))
        for rd, (bad, arrays) in self.oob.items():
            here = np.broadcast_to(bad, self.grid_shape)[outer]
            if not here.any():
                continue
            full = outer + tuple(np.argwhere(here)[0])
            order = sorted(self.env, key=lambda v: self.axis_pos[v])
            at = ", ".join(f"{names[v]}={int(x) + self.origin[self.axis_pos[v]]}"
                           for v, x in zip(order, full))
            idx = tuple(int(np.broadcast_to(a, self.grid_shape)[full]) for a in arrays)
            if rd.op is Op.DATA_INDEX:
                return IndexError(rd.arg.message(idx[0], expr_to_str(rd.src[0]),
                                                 f"{op.name} at {at}", "evaluate"))
            return OutOfBoundsError(
                f"evaluate: {op.name}: read {expr_to_str(rd)} is out of bounds of tensor "
                f"{rd.arg.name} {list(rd.arg.shape)}: index {list(idx)} at {at}")
        return OutOfBoundsError(f"evaluate: {op.name}: a value at {point} depends on an "
                                "out-of-bounds read")


def _fold_in_order(ufunc: Any, s: np.ndarray, mask: np.ndarray, pos: tuple[int, ...],
                   identity: Any, reverse: bool) -> np.ndarray:
    """``ufunc``'s fold of ``s`` over the grid dimensions ``pos`` (kept with size 1) where ``mask`` holds,
    one term at a time from the identity in C order (``reverse``: last first), rounded in ``s``'s dtype: a
    strict kernel's loop.  A masked-out point adds the identity."""
    last = tuple(range(-len(pos), 0))
    terms = np.moveaxis(np.where(mask, s, np.asarray(identity, s.dtype)), pos, last)
    outer = terms.shape[:terms.ndim - len(pos)]
    terms = terms.reshape(outer + (math.prod(terms.shape[len(outer):]),))  # (no -1: a size may be 0)
    if reverse:
        terms = terms[..., ::-1]
    start = np.full(outer + (1,), identity, dtype=s.dtype)
    acc = ufunc.accumulate(np.concatenate([start, terms], axis=-1), axis=-1, dtype=s.dtype)[..., -1]
    return np.expand_dims(acc, tuple(sorted(pos)))


def _fold_nested(ufunc: Any, s: np.ndarray, mask: np.ndarray, pos: tuple[int, ...],
                 identity: Any) -> np.ndarray:
    """``ufunc``'s fold of ``s`` over the grid dimensions ``pos`` axis by axis, the last first: partial
    folds of the inner axes, in index order, per point of the outer ones, folded in turn (a regrouped sum)."""
    acc = np.where(mask, s, np.asarray(identity, s.dtype))
    everywhere = np.ones((), bool)
    for p in reversed(pos):
        acc = _fold_in_order(ufunc, acc, everywhere, (p,), identity, False)
    return acc


def _reduce_axes(bodies: Sequence[Expr]) -> list[Expr]:
    """The reduce axes of every reduction in the bodies, in order of first appearance."""
    out: dict[Expr, None] = {}
    for b in bodies:
        for node in walk(b):
            if node.op is Op.REDUCE:
                out.update(dict.fromkeys(node.arg.axes))
    return list(out)


# Points of one op's grid evaluated at once (every node of a body is an array of up to this many elements,
# all held until the body is done); a larger grid is cut into boxes of its outer axes.
GRID_BUDGET = 1 << 21


def grid_boxes(extents: Sequence[int], inner: int, budget: int = GRID_BUDGET) -> list[tuple[range, ...]]:
    """The outer index ranges of the boxes an op's grid is evaluated in (axes ``extents``, ``inner``
    reduce points each): trailing axes whole while the box fits ``budget``, the next cut into blocks,
    those before one index at a time; a reduction is never cut."""
    k, size = len(extents), max(inner, 1)
    while k > 0 and size * extents[k - 1] <= budget:
        size *= extents[k - 1]
        k -= 1
    whole = tuple(range(e) for e in extents[k:])
    if k == 0:
        return [whole]
    if size > budget:  # (k == len(extents): no axis fits)
        return [tuple(range(i, i + 1) for i in point) for point in np.ndindex(*extents)]
    step = budget // size
    cut = [range(a, min(a + step, extents[k - 1])) for a in range(0, extents[k - 1], step)]
    return [tuple(range(i, i + 1) for i in head) + (c,) + whole
            for head in np.ndindex(*extents[:k - 1]) for c in cut]


def _widest_reduction(bodies: Sequence[Expr]) -> int:
    """The most reduce points an array of the bodies spans per outer point (nested reductions' extents)."""
    width: dict[Expr, int] = {}
    for b in bodies:
        for node in walk(b):  # (operands first)
            w = max((width[x] for x in node.src), default=1)
            if node.op is Op.REDUCE:
                w *= math.prod(ax.hi - ax.lo for ax in node.arg.axes)
            width[node] = w
    return max((width[b] for b in bodies), default=1)


def exact_indices(body: Expr) -> Expr:
    """``body`` with the int32 constants of its read indices made int64, outside gathers: a read's index
    is exact index arithmetic (64 bits, as compiled), where an int32 value elsewhere (data) wraps."""
    memo: dict[tuple[Expr, bool], Expr] = {}

    def operands(key: tuple[Expr, bool]) -> list[tuple[Expr, bool]]:
        e, index = key
        inner = index and e.op is not Op.DATA_INDEX or e.op is Op.READ
        return [(x, inner) for x in e.src]

    def visit(key: tuple[Expr, bool]) -> Expr:
        e, index = key
        if index and e.op is Op.CONST and e.dtype == "int32":
            return Expr(Op.CONST, "int64", (), int(e.arg))
        src = tuple(memo[k] for k in operands(key))
        return e if all(a is b for a, b in zip(src, e.src)) else Expr(e.op, e.dtype, src, e.arg)

    return fold_along((body, False), operands, visit, memo)  # (iterative: programs may be 10,000 deep)


def evaluate_op(op: ComputeOp, values: dict[Tensor, np.ndarray], order: str = "numpy",
                strong_zero: bool = False, rounded_math: bool = False,
                unsigned_zeros: bool = False,
                jitter: tuple[np.random.Generator, float] | None = None) -> list[np.ndarray]:
    """The arrays of every output of compute ``op`` from the arrays it reads (``order`` one of
    :data:`ORDERS`; ``jitter`` a generator and the ulps), box by box (:func:`grid_boxes`)."""
    check_index_range(op.body, f"evaluate: {op.name}")  # index arithmetic fits int64 (exact)
    outer = tuple(op.shape)
    red = _reduce_axes(op.body)
    inner = _widest_reduction(op.body)
    out = [np.zeros(outer, dtype=dt.numpy_dtype(b.dtype)) for b in op.body]
    bodies = [exact_indices(b) for b in op.body]
    for box in grid_boxes(outer, inner):
        ranges = list(box) + [range(ax.hi - ax.lo) for ax in red]
        axes = list(op.axes) + red
        env, pos = {}, {}
        for d, (ax, r) in enumerate(zip(axes, ranges)):
            shape = [1] * len(axes)
            shape[d] = len(r)
            env[ax] = np.arange(ax.lo + r.start, ax.lo + r.stop, dtype=np.int64).reshape(shape)  # exact
            pos[ax] = d
        grid = _Grid(op.name, env, values, pos, tuple(len(r) for r in ranges), order,
                     origin=tuple(ax.lo + r.start for ax, r in zip(axes, ranges)),
                     strong_zero=strong_zero, rounded_math=rounded_math, unsigned_zeros=unsigned_zeros,
                     jitter=jitter)
        kept = tuple(len(r) for r in box) + (1,) * len(red)
        where = tuple(slice(r.start, r.stop) for r in box)
        for k, body in enumerate(bodies):
            val, poison = grid.eval(body)
            if poison is not None and np.broadcast_to(poison, kept).any():
                raise grid.out_of_bounds(op, poison, kept)
            try:
                val = np.broadcast_to(val, kept)
            except ValueError:
                raise ValueError(f"evaluate: {op.name}: output {k} uses a reduce axis outside its "
                                 "reduction") from None
            out[k][where] = val.reshape(kept[:len(outer)])
        grid.release()
    return out


def evaluate(outputs: Tensor | Sequence[Tensor], feed: dict) -> Any:
    """Evaluate ``outputs`` (a tensor or a list/tuple of tensors) with NumPy.

    ``feed`` maps placeholders to arrays (see ``feed.py``).  Returns one array for one tensor, a list
    (tuple) of arrays for a list (tuple) of tensors."""
    return evaluate_in_order(outputs, feed, "numpy")


def evaluate_in_order(outputs: Tensor | Sequence[Tensor], feed: dict, order: str, *,
                      strong_zero: bool = False, rounded_math: bool = False,
                      unsigned_zeros: bool = False, given: dict | None = None,
                      jitter: tuple[int, float] | None = None) -> Any:
    """:func:`evaluate` with every built-in sum and product folded in ``order`` (one of :data:`ORDERS`;
    ``"numpy"``: :func:`evaluate`).  ``strong_zero``, ``rounded_math``, ``unsigned_zeros``, ``given``,
    ``jitter=(seed, ulps)``: the module docstring's allowances."""
    if order not in ORDERS:
        raise ValueError(f"evaluate_in_order: order must be one of {ORDERS}, got {order!r}")
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    for t in outs:
        if not isinstance(t, Tensor):
            raise TypeError(f"evaluate: outputs must be tensors, got {type(t).__name__} {t!r}")
    given = dict(given or {})
    jitter_rng = None if jitter is None else (np.random.default_rng(jitter[0]), float(jitter[1]))
    graph = tensor_graph(outs, stop=given)
    values = check_feed([t for t in graph if t.is_placeholder and t not in given], feed)
    for t, value in given.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"evaluate: given key {t!r} is not a tensor")
        values[t] = convert_array(t, value)
    with np.errstate(all="ignore"):
        for t in graph:
            if t in values:
                continue
            for k, arr in enumerate(evaluate_op(t.op, values, order, strong_zero, rounded_math,
                                                unsigned_zeros, jitter_rng)):
                values.setdefault(Tensor(t.op, k), arr)  # a given sibling output stays given
    results = [values[t].copy() for t in outs]
    if single:
        return results[0]
    return tuple(results) if isinstance(outputs, tuple) else results
