"""A cheap, sound "not zero" tried before a zero-proof: a sum nonzero at one point of a model.

A term nonzero in *one* model of what a zero-proof (:func:`.zeros.polynomial.provably_zero`) assumes is not
identically zero: :meth:`Refuter.refutes` looks for such a value, and the proof runs only where it finds
none (the same answers, by construction).  The model evaluates exactly (:mod:`.zeros.rational`):

* free index variables take random points of their ranges; a placeholder element is a random small value,
  the same for every read in the call; a computed element is its body at its indices (memoized, at a
  bounded depth: :meth:`Refuter._value`);
* a sum sums a few sample points per axis, chosen once per range: a fixed *linear functional*, which is
  all the proof assumes of a sum; other reductions combine over the same points;
* ``exp``, ``log``, ... are the float64 function rounded to :data:`ROUND_BITS` bits; an operator over
  constants is exact, and the model gives up where :func:`.algebra.consts.fold_constant` would round.

The evaluation is bounded (:data:`MAX_STEPS`, :data:`MAX_BITS`) and gives up on a division by zero, an
infinite constant, an integer outside its type, a variable without a range.  The seeded :class:`Refuter`
holds two models: the first (data near 0, variables near their ranges' start) answers nearly every
question; the last attempt uses the second (spread wide), spending at most :data:`WIDE_STEPS`."""

from __future__ import annotations

import itertools
import math
import operator
import random
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from tensorad.ir import dtype as dt
from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import walk
from tensorad.ir.tensor import ComputeOp, PlaceholderOp

from ..algebra.consts import fold_constant
from . import rational

MAX_STEPS = 20_000  # node evaluations one refutation may spend, all its points together
MAX_BITS = 16_384  # a number past this many bits (numerator or denominator): give up
POINTS = 3  # points tried (the first two near the start of every free variable's range)
WIDE_STEPS = 2_000  # the most the last point (the second model's) may spend after a zero
NEAR = 4  # "near the start of a range": its first NEAR points
WIDE = 1 << 15  # integer placeholder elements of the second model: below this
ROUND_BITS = 24  # significant bits kept of a function's value (numbers stay small)
_DATA = tuple(Fraction(k, 8) for k in (-4, -3, -2, -1, 1, 2, 3, 4))  # a float placeholder element

_add = rational.add
_MISSING = object()
_CONST = Op.CONST
_VAR = Op.VAR


class _GiveUp(Exception):
    """The model has no value here (or the budget is spent): let the proof decide."""


class _Deep(Exception):
    """An element read :data:`MAX_DEPTH` elements deep, not evaluated yet (``key``: its read's
    site and index): evaluated first, on its own (:meth:`Refuter._value`)."""

    def __init__(self, key: tuple) -> None:
        self.key = key


_NO_VALUE = (_GiveUp, ZeroDivisionError, OverflowError, ValueError, TypeError, KeyError)
_FAILS = (*_NO_VALUE, RecursionError)  # (RecursionError: the stack's depth, not the element)
MAX_DEPTH = 32  # elements evaluated one inside another before the innermost is set aside
_NONE = object()  # an element without a value in a model (kept: asked again, it gives up at once)


def _big(v: Any) -> Any:
    """``v``, or give up when its numbers grew past :data:`MAX_BITS`."""
    if type(v) is int:
        if v.bit_length() > MAX_BITS:
            raise _GiveUp
    elif isinstance(v, Fraction) and (v.numerator.bit_length() > MAX_BITS
                                      or v.denominator.bit_length() > MAX_BITS):
        raise _GiveUp
    return v


def _real(x: float) -> Any:
    """``x`` to :data:`ROUND_BITS` significant bits, exactly (0, 1/2 and 1 stay exact)."""
    if not math.isfinite(x):
        raise _GiveUp
    m, p = math.frexp(x)
    n, p = round(m * (1 << ROUND_BITS)), p - ROUND_BITS
    return n << p if p >= 0 else Fraction(n, 1 << -p)


def _squash(x: float) -> float:
    """``x`` where ``|x| <= 32``, else drawn in slowly (exp and the others stay finite)."""
    return x if abs(x) <= 32 else math.copysign(32 + math.log(abs(x) - 31), x)


def _log(x: float) -> float:
    return math.log(x) if x > 0 else math.log(-x) + 0.5 if x < 0 else -64.0


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-_squash(x)))


# A deterministic function of the exact argument is all the model needs (the true one where folded).
_MATH: dict[Op, Callable[[float], float]] = {
    Op.EXP: lambda x: math.exp(_squash(x)), Op.LOG: _log, Op.SQRT: lambda x: math.sqrt(abs(x)),
    Op.TANH: math.tanh, Op.SIGMOID: _sigmoid, Op.SIN: math.sin, Op.COS: math.cos,
    Op.ERF: math.erf,
}


def _as_int(v: Any) -> int:
    if type(v) is int:
        return v
    if isinstance(v, Fraction):
        if v.denominator != 1:
            raise _GiveUp
        return v.numerator
    return int(v)  # (a bool)


def _cast(dtype: str, v: Any) -> Any:
    if dtype == dt.BOOL:
        return v != 0
    if dt.is_int(dtype):
        out = int(v)  # (a fraction truncates toward zero, as the IR's cast does)
        if not dt.min_value(dtype) <= out <= dt.max_value(dtype):
            raise _GiveUp  # (wrapping is the proof's business: not modelled)
        return out
    return int(v) if type(v) is bool else v  # a float: exact (any deterministic value is a model)


def _kept(out: Any) -> Any:
    """``out``, or give up where :mod:`.zeros.rational` found no value within :data:`MAX_BITS`."""
    if out is None:
        raise _GiveUp
    return out


_mul = lambda a, b: _kept(rational.mul(a, b, MAX_BITS))  # noqa: E731
_div = lambda a, b: _kept(rational.div(a, b, MAX_BITS))  # noqa: E731


def _pow(a: Any, b: Any) -> Any:
    if (type(b) is int or b.denominator == 1) and abs(b) <= 64:
        b = int(b)
        return _big(a ** b) if b >= 0 else _div(1, _big(a ** -b))
    return _real(math.pow(float(a), float(b)))


def _data_index(info: Any, v: Any) -> int:
    n, v = info.extent, _as_int(v)
    if info.mode == "clip":
        return min(max(v, 0), n - 1)
    return v % n  # wrap; under "raise" any value in range models the opaque index


def _mod(a: Any, b: Any) -> Any:
    return _big(a - b * (a // b))


_BINARY: dict[Op, Callable[[Any, Any], Any]] = {
    Op.ADD: rational.add,
    Op.SUB: rational.sub,
    Op.MUL: _mul,
    Op.FLOORDIV: operator.floordiv,  # (ints and fractions alike; by zero: give up)
    Op.MOD: _mod,
    Op.MAXIMUM: max,
    Op.MINIMUM: min,
    Op.LT: lambda a, b: a < b,
    Op.LE: lambda a, b: a <= b,
    Op.GT: lambda a, b: a > b,
    Op.GE: lambda a, b: a >= b,
    Op.EQ: lambda a, b: a == b,
    Op.NE: lambda a, b: a != b,
    Op.POW: _pow,
}


def _math(fn: Callable[[float], float]) -> Callable[[Any], Any]:
    return lambda a: _real(fn(float(a)))


_UNARY: dict[Op, Callable[[Any], Any]] = {
    Op.NEG: lambda a: -a,
    Op.NOT: lambda a: not a,
    Op.ABS: abs,
    **{op: _math(fn) for op, fn in _MATH.items()},
}


class _Model:
    """One random interpretation of the placeholders and sums, kept for the call: placeholder elements,
    each axis range's sample points, the free variables' shared first points and the computed elements
    (``tables``).  ``wide``: integer placeholder elements drawn from a wide range instead of near 0."""

    __slots__ = ("rng", "wide", "tables", "sites", "samples", "points", "resume")

    def __init__(self, seed: int, wide: bool) -> None:
        self.rng = random.Random(seed)
        self.wide = wide
        # (placeholder op) or (compute op, output) -> {index: element value (random, or evaluated) or _NONE}
        self.tables: dict[tuple, dict[tuple, Any]] = {}
        self.sites: dict[Expr, _Site] = {}  # read node -> its tensor's table, axes and body
        self.samples: dict[tuple[int, int], tuple] = {}  # axis range -> its sample points
        self.points: dict[tuple, int] = {}  # (range, slot) -> a free variable's shared value
        self.resume: list[tuple] = []  # elements set aside when a question's budget ran out


class _Site:
    """What a read node reads in one model: its tensor's ``table`` of elements (shared by every read of
    the tensor), the ``axes`` and ``body`` that compute an element (``None`` and the dtype for a
    placeholder), and whether every index is a variable (``direct``)."""

    __slots__ = ("table", "axes", "body", "direct")

    def __init__(self, table: dict, axes: tuple | None, body: Any, direct: bool) -> None:
        self.table, self.axes, self.body, self.direct = table, axes, body, direct


# attempt -> (model, free variables: "shared" first points near the start of their ranges,
# "near" the start drawn afresh, or "anywhere" shared per range and slot)
_ATTEMPTS = ((0, "shared"), (0, "near"), (1, "anywhere"))


class Refuter:
    """The random models of one optimizer call (the module docstring) and its counts: ``tried``,
    ``refuted``, ``zero``, ``gave up`` and the ``steps`` taken."""

    def __init__(self, seed: int = 0, steps: int = MAX_STEPS) -> None:
        self.models = (_Model(seed, False), _Model(seed + 1_000_003, True))
        self.model = self.models[0]  # the model the evaluation under way reads
        self.steps = steps
        self.left = 0
        self.depth = 0  # elements being evaluated, one inside another (:meth:`_value`)
        self.folded: dict[Expr, Any] = {}  # node over constants -> folded value (None: not)
        self.consts: dict[Expr, Any] = {}  # constant node -> its exact value
        self.counts: dict[str, int] = {"tried": 0, "refuted": 0, "zero": 0, "gave up": 0, "steps": 0}

    def refutes(self, e: Expr, steps: int | None = None) -> bool:
        """Whether ``e`` is nonzero at one of :data:`POINTS` random points of the models; False also when
        no model has a value.  :data:`MAX_STEPS` (or ``steps``) is the budget of all the points together,
        the second model's at most :data:`WIDE_STEPS` of it after zeros."""
        self.counts["tried"] += 1
        budget = self.left = self.steps if steps is None else steps
        evaluated = False  # 0 at some point (not only points without a value)
        try:
            nodes = list(walk(e))
            bound = {a for n in nodes if n.op is Op.REDUCE for a in n.arg.axes}
            free = [n for n in nodes if n.op is Op.VAR and n not in bound]
            for model, how in _ATTEMPTS[:POINTS]:
                if how == "near" and not free:
                    continue  # (the shared point again)
                if model and evaluated:
                    kept = max(self.left - WIDE_STEPS, 0)  # (steps the cold model may not spend)
                    budget -= kept
                    self.left -= kept
                self.model = self.models[model]
                try:
                    slots: dict[tuple, int] = {}
                    env = {}
                    for v in free:
                        rng = (v.lo, v.hi)
                        slot = slots[rng] = slots.get(rng, -1) + 1
                        env[v] = self._point(v, how, slot)
                    if self._value(e, env):
                        self.counts["refuted"] += 1
                        return True
                    evaluated = True
                except _FAILS:
                    if self.left < 0:
                        break  # (the budget is spent: no other point either)
        finally:
            self.counts["steps"] += budget - max(self.left, 0)
        self.counts["zero" if evaluated else "gave up"] += 1
        return False

    def _point(self, v: Expr, how: str, slot: int) -> int:
        """A free variable's value: near the start of its range on the first two attempts, anywhere in the
        second model; the shared points drawn once per model, range and ``slot`` (the variable's place
        among the question's), so questions read kept elements (the "near" points drawn afresh)."""
        if v.lo is None or v.hi is None or v.lo >= v.hi:
            raise _GiveUp
        m = self.model
        if how == "near":
            return v.lo + m.rng.randrange(min(NEAR, v.hi - v.lo))
        key = (v.lo, v.hi, slot)
        found = m.points.get(key)
        if found is None:
            found = m.points[key] = v.lo + m.rng.randrange(min(NEAR, v.hi - v.lo)) if how == "shared" \
                else m.rng.randrange(v.lo, v.hi)
        return found

    def _sample(self, v: Expr) -> tuple[int, ...]:
        """Sample points of an axis with ``v``'s range: the first, one near, one anywhere (kept per range)."""
        key = (v.lo, v.hi)
        m = self.model
        found = m.samples.get(key)
        if found is None:
            if v.lo is None or v.hi is None:
                raise _GiveUp
            points = {v.lo, v.lo + m.rng.randrange(min(NEAR, v.hi - v.lo)),
                      m.rng.randrange(v.lo, v.hi)} if v.lo < v.hi else set()
            found = m.samples[key] = tuple(sorted(points))
        return found

    def _datum(self, dtype: str) -> Any:
        """A new random placeholder element of ``dtype``."""
        m = self.model
        if dtype == dt.BOOL:
            return m.rng.random() < 0.5
        if dt.is_int(dtype):
            return m.rng.randrange(0, min(WIDE, dt.max_value(dtype) + 1) if m.wide else NEAR)
        return m.rng.choice(_DATA)

    def _value(self, e: Expr, env: dict) -> Any:
        """``e``'s value in the current model, at a bounded depth: past :data:`MAX_DEPTH` the innermost
        element is set aside, evaluated and kept first (the model's ``resume``, left to the next question
        when a budget runs out), so each element is evaluated once."""
        pending = self.model.resume
        while True:
            self.depth = 0
            try:
                if not pending:
                    return self._eval(e, env, {})
                site, idx = pending[-1]
                if idx not in site.table:
                    self._element(site, idx)
                pending.pop()
            except _Deep as deep:
                pending.append(deep.key)
            except _NO_VALUE:
                if not pending or self.left < 0:
                    raise  # (the budget spent: ``pending`` is where the next question starts)
                pending.pop()  # (kept as without a value: the element that reads it is next)
            except RecursionError:
                pending.clear()  # (an element too deep for the stack: not resumed)
                raise

    def _eval(self, e: Expr, env: dict, memo: dict) -> Any:
        op = e.op
        if op is _VAR:  # (half the nodes evaluated: a lookup, not a step)
            return env[e]
        if op is _CONST:
            found = self.consts.get(e, _MISSING)
            if found is _MISSING:
                found = self.consts[e] = _const(e)
            return found
        found = memo.get(e, _MISSING)
        if found is not _MISSING:
            return found
        self.left -= 1
        if self.left < 0:
            raise _GiveUp
        out = memo[e] = _BY_ID[id(e.op)](self, e, env, memo)  # (an enum's hash is slow)
        return out

    def _fold(self, e: Expr, exact: Any) -> Any:
        """An operator over constants, ``exact`` its exact value; gives up where folding to the node's
        dtype (as the proof does where it simplifies first) would differ."""
        found = self.folded.get(e, _MISSING)
        if found is _MISSING:
            c = fold_constant(e)
            found = self.folded[e] = _const(c) if c is not None else None
        if found is not None and found != exact:
            raise _GiveUp
        return exact

    def _read(self, e: Expr, env: dict, memo: dict) -> Any:
        site = self.model.sites.get(e)
        if site is None:
            site = self._site(e)
        if site.direct:  # (every index a variable: its value an int)
            idx = tuple(map(env.__getitem__, e.src))
        else:
            idx = []
            for s in e.src:
                v = env[s] if s.op is _VAR else self._eval(s, env, memo)
                idx.append(v if type(v) is int else _as_int(v))
            idx = tuple(idx)
        found = site.table.get(idx, _MISSING)
        if found is _MISSING:
            if site.axes is None:  # (a placeholder's element, drawn at its first read)
                found = site.table[idx] = self._datum(site.body)
            else:
                found = self._element(site, idx)
        elif found is _NONE:
            raise _GiveUp
        return found

    def _site(self, e: Expr) -> _Site:
        """The read ``e``'s :class:`_Site` in the model (made at its first read)."""
        t = e.arg
        op = t.op
        if type(op) is PlaceholderOp:
            key, axes, body = (op,), None, op.dtype
        elif type(op) is ComputeOp and len(e.src) == len(op.axes):
            key, axes, body = (op, t.value_index), op.axes, op.body[t.value_index]
        else:
            raise _GiveUp
        m = self.model
        table = m.tables.get(key)
        if table is None:
            table = m.tables[key] = {}
        site = m.sites[e] = _Site(table, axes, body, all(s.op is _VAR for s in e.src))
        return site

    def _element(self, site: _Site, idx: tuple) -> Any:
        """A computed tensor's element, evaluated in the model once (a budget stop is not kept)."""
        if self.depth >= MAX_DEPTH:
            raise _Deep((site, idx))
        self.depth += 1
        try:
            found = self._eval(site.body, dict(zip(site.axes, idx)), {})
        except _NO_VALUE:
            if self.left >= 0:  # (not the budget: the element has no value in this model)
                site.table[idx] = _NONE
            raise
        finally:
            self.depth -= 1
        site.table[idx] = found
        return found

    def _points(self, e: Expr, env: dict):
        """``(environment, memo)`` for each sample point of the reduction's axes where its condition holds."""
        axes, cond = e.arg.axes, e.src[0]
        always = cond.op is _CONST  # (most sums' condition: tested once)
        if always and not self._eval(cond, env, {}):
            return
        if len(axes) == 1:  # (most sums: no product of one range, no zip)
            axis = axes[0]
            for x in self._sample(axis):
                inner = env.copy()
                inner[axis] = x
                memo: dict = {}
                if always or self._eval(cond, inner, memo):
                    yield inner, memo
            return
        for point in itertools.product(*[self._sample(a) for a in axes]):
            inner = env.copy()
            inner.update(zip(axes, point))
            memo = {}
            if always or self._eval(cond, inner, memo):
                yield inner, memo

    def _reduce(self, e: Expr, env: dict, memo: dict) -> Any:
        combiner = e.arg.combiner
        kind = combiner.kind
        if len(e.src) != 2 or kind not in ("sum", "max", "min", "prod"):
            return self._combine(e, env)
        body, acc = e.src[1], None
        for inner, memo in self._points(e, env):
            v = self._eval(body, inner, memo)
            if acc is None:
                acc = v
            elif kind == "sum":
                acc = _add(acc, v)
            else:
                acc = max(acc, v) if kind == "max" else min(acc, v) if kind == "min" else _mul(acc, v)
        return _const(combiner.identity[0]) if acc is None else acc  # (no point in the domain)

    def _combine(self, e: Expr, env: dict) -> Any:
        """A custom or multi-value reduction (argmax): its combiner over the sample points from the first."""
        combiner, acc = e.arg.combiner, None
        for inner, memo in self._points(e, env):
            values = tuple(self._eval(s, inner, memo) for s in e.src[1:])
            if acc is None:
                acc = values
                continue
            both = dict(zip(combiner.lhs, acc)) | dict(zip(combiner.rhs, values))
            acc = tuple(self._eval(r, both, {}) for r in combiner.result)
        return _const(combiner.identity[e.arg.value_index]) if acc is None else acc[e.arg.value_index]


def _const(c: Expr) -> Any:
    v = c.arg
    if c.dtype == dt.BOOL:
        return bool(v)
    if dt.is_int(c.dtype):
        return int(v)
    v = float(v)
    if v.is_integer() and abs(v) < 2 ** 53:
        return int(v)
    if not math.isfinite(v):
        raise _GiveUp
    return Fraction(v)


def _unary(fn: Callable[[Any], Any]) -> Callable:
    def node(r: Refuter, e: Expr, env: dict, memo: dict) -> Any:
        a = e.src[0]
        op = a.op
        if op is _CONST:
            return r._fold(e, fn(_const(a)))
        return fn(env[a] if op is _VAR else r._eval(a, env, memo))
    return node


def _binary(fn: Callable[[Any, Any], Any]) -> Callable:
    def node(r: Refuter, e: Expr, env: dict, memo: dict) -> Any:
        a, b = e.src
        ao, bo = a.op, b.op
        if ao is _CONST and bo is _CONST:
            return r._fold(e, fn(_const(a), _const(b)))
        # (an operand variable looked up in place: index arithmetic is mostly over variables)
        return fn(env[a] if ao is _VAR else r._eval(a, env, memo),
                  env[b] if bo is _VAR else r._eval(b, env, memo))
    return node


def _choice(r: Refuter, e: Expr, env: dict, memo: dict) -> Any:
    c, a, b = e.src
    return r._eval(a if r._eval(c, env, memo) else b, env, memo)


def _and(r: Refuter, e: Expr, env: dict, memo: dict) -> Any:
    return bool(r._eval(e.src[0], env, memo)) and bool(r._eval(e.src[1], env, memo))


def _or(r: Refuter, e: Expr, env: dict, memo: dict) -> Any:
    return bool(r._eval(e.src[0], env, memo)) or bool(r._eval(e.src[1], env, memo))


_DIVIDE = _binary(_div)


def _div_node(r: Refuter, e: Expr, env: dict, memo: dict) -> Any:
    if not dt.is_float(e.dtype):
        raise _GiveUp
    return _DIVIDE(r, e, env, memo)


def _cast_node(r: Refuter, e: Expr, env: dict, memo: dict) -> Any:
    a = e.src[0]
    op = a.op
    if op is _CONST:
        return r._fold(e, _cast(e.dtype, _const(a)))
    return _cast(e.dtype, env[a] if op is _VAR else r._eval(a, env, memo))


# One entry per ``Op`` (a test walks the enum).
_NODES: dict[Op, Callable[[Refuter, Expr, dict, dict], Any]] = {
    Op.VAR: lambda r, e, env, memo: env[e],
    Op.CONST: lambda r, e, env, memo: _const(e),
    Op.READ: Refuter._read,
    Op.REDUCE: Refuter._reduce,
    Op.SELECT: _choice,
    Op.IF_THEN_ELSE: _choice,
    Op.AND: _and,
    Op.OR: _or,
    Op.DIV: _div_node,
    Op.CAST: _cast_node,
    Op.DATA_INDEX: lambda r, e, env, memo: _data_index(e.arg, r._eval(e.src[0], env, memo)),
    **{op: _binary(fn) for op, fn in _BINARY.items()},
    **{op: _unary(fn) for op, fn in _UNARY.items()},
}
_BY_ID = {id(op): fn for op, fn in _NODES.items()}
