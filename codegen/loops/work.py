"""Exact work of a loop nest: how many times innermost loop bodies execute.

A block's count is computed for a whole *frontier* of outer-loop points at once (NumPy arrays, one value
per point per loop variable in scope).  A loop whose body's bounds and guards do not mention its
variable contributes ``trips * count(body)``, else the frontier is repeated per iteration; an affine
``if`` masks the frontier; a data-dependent ``if`` counts as taken (the larger branch).  A block execution
that runs counted statements outside its inner loops is one execution per op; bookkeeping
(``counted=False``) never counts.  A loop over one inner unit-step loop with affine bounds and a body
independent of both is summed in closed form (:meth:`WorkCounter.series`).  Counts are exact (Python
ints); an expansion past :data:`EXPAND_LIMIT` points is a clear error."""

from __future__ import annotations

import operator

import numpy as np

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import fold, walk
from tensorad.poly.linear import var_coefficients
from tensorad.reference.numpy_eval import ARRAY_RULES

from ..program import If, Loop, owner_of

CHUNK = 1 << 22
EXPAND_LIMIT = 1 << 28
PIECEWISE_POINTS = 4096  # frontier points summed piece by piece in Python
_SAFE = 1 << 62


def _magnitude(a) -> int:
    a = np.asarray(a)
    return int(np.max(np.abs(a))) if a.size else 0


def _exact(a) -> np.ndarray:
    """``a`` as an array of Python ints (object dtype)."""
    return np.asarray(a).astype(object)


def exact_mul(a, b) -> np.ndarray:
    """``a * b`` elementwise, exact (int64 while it cannot overflow, Python ints beyond)."""
    return np.asarray(a) * np.asarray(b) if _magnitude(a) * _magnitude(b) < _SAFE else _exact(a) * _exact(b)


def exact_add(a, b) -> np.ndarray:
    return np.asarray(a) + np.asarray(b) if _magnitude(a) + _magnitude(b) < _SAFE else _exact(a) + _exact(b)


# index arithmetic as ``ta.evaluate`` computes it, on int64 (or exact object) arrays
_RULES = {op: ARRAY_RULES[op] for op in (
    Op.ADD, Op.SUB, Op.MUL, Op.NEG, Op.FLOORDIV, Op.MOD, Op.MAXIMUM, Op.MINIMUM, Op.LT, Op.LE, Op.GT, Op.GE,
    Op.EQ, Op.NE, Op.AND, Op.OR, Op.NOT, Op.SELECT)}
_RULES |= {Op.CONST: lambda n: np.int64(n.arg) if n.dtype != "bool" else bool(n.arg), Op.CAST: lambda n, a: a}


def evaluate_index(e: Expr, env: dict[Expr, np.ndarray], n: int) -> np.ndarray:
    """An index expression or affine condition at every frontier point (length ``n``)."""
    rules = dict(_RULES)
    rules[Op.VAR] = lambda node: env[node]
    return np.broadcast_to(fold(e, rules), (n,))


class WorkCounter:
    """A block execution counts one innermost-body execution per distinct owner
    (:func:`.program.owner_of`) of the counted statements it runs directly (:mod:`.loops.fused_nest`)."""

    def __init__(self) -> None:
        self._deps: dict[int, frozenset] = {}
        self.owner = owner_of

    def deps(self, s) -> frozenset:
        """Loop variables that bounds and affine guards inside ``s`` read from outside it."""
        key = id(s)
        found = self._deps.get(key)
        if found is not None:
            return found
        out: set = set()
        if isinstance(s, Loop):
            out |= _vars(s.lo) | _vars(s.hi)
            for b in s.body:
                out |= self.deps(b)
            out.discard(s.var)
        elif isinstance(s, If):
            out |= _vars(s.cond) if s.affine else set()
            for b in s.then + s.orelse:
                out |= self.deps(b)
        found = self._deps[key] = frozenset(out)
        return found

    def block(self, stmts: tuple, env: dict, n: int) -> np.ndarray:
        """Executions of innermost bodies in ``stmts``, per frontier point."""
        direct, nested = self.parts(stmts, env, n)
        for d in direct.values():
            nested = exact_add(nested, d.astype(np.int64))
        return nested

    def parts(self, stmts: tuple, env: dict, n: int) -> tuple[dict, np.ndarray]:
        """({owner: 1 where this block execution runs a counted statement of that owner outside any inner
        loop}, executions of innermost bodies inside its inner loops), per frontier point.  Counted
        statements of one owner in one body execution count once together."""
        direct: dict = {}
        nested = np.zeros(n, np.int64)
        for s in stmts:
            if isinstance(s, Loop):
                nested = exact_add(nested, self.loop(s, env, n))
            elif isinstance(s, If):  # (a data test: taken, its larger branch)
                mask = evaluate_index(s.cond, env, n) if s.affine else None
                d_then, n_then = self.parts(s.then, env, n)
                d_else, n_else = self.parts(s.orelse, env, n)
                for o in {**d_then, **d_else}:
                    hit = (d_then.get(o, False) | d_else.get(o, False) if mask is None else
                           np.where(mask, d_then.get(o, False), d_else.get(o, False)))
                    direct[o] = direct[o] | hit if o in direct else np.broadcast_to(hit, (n,))
                nested = exact_add(nested, np.maximum(n_then, n_else) if mask is None else
                                   np.where(mask, n_then, n_else))
            elif s.counted:
                direct[self.owner(s)] = np.ones(n, bool)
        return direct, nested

    def loop(self, s: Loop, env: dict, n: int) -> np.ndarray:
        lo = evaluate_index(s.lo, env, n).astype(np.int64)
        hi = evaluate_index(s.hi, env, n).astype(np.int64)
        trips = np.maximum(0, (hi - lo + s.step - 1) // s.step)
        inner = frozenset().union(*(self.deps(b) for b in s.body))
        if s.var not in inner:
            return exact_mul(trips, self.block(s.body, env, n))
        closed = self.series(s, env, n, lo, trips)
        if closed is not None:
            return closed
        total = int(_exact(trips).sum())
        if total > EXPAND_LIMIT:
            raise ValueError(f"work: counting the loop over {s.var.name} exactly would visit {total} "
                             f"points (more than {EXPAND_LIMIT}); its inner bounds are not affine "
                             "in it, so no closed form applies")
        keep = [v for v in inner if v is not s.var and v in env]
        out = np.zeros(n, np.int64)
        # expand the frontier in chunks of about CHUNK points (a point of more trips split into several)
        pts = np.repeat(np.arange(n), -(-trips // CHUNK))  # one row per (point, chunk of trips)
        part = np.arange(pts.size) - np.repeat(np.cumsum(-(-trips // CHUNK)) - -(-trips // CHUNK),
                                               -(-trips // CHUNK))
        first_iter = part * CHUNK
        count = np.minimum(trips[pts] - first_iter, CHUNK)
        ends = np.cumsum(count)
        row = 0
        while row < pts.size:
            base = ends[row - 1] if row else 0
            stop = max(int(np.searchsorted(ends, base + CHUNK, side="right")), row + 1)
            c = count[row:stop]
            rows = np.repeat(np.arange(row, stop), c)
            offset = first_iter[rows] + np.arange(rows.size) - np.repeat(ends[row:stop] - c, c) + base
            owner = pts[rows]
            sub_env = {v: np.broadcast_to(env[v], (n,))[owner] for v in keep}
            sub_env[s.var] = lo[owner] + s.step * offset
            counts = self.block(s.body, sub_env, owner.size)
            if counts.dtype == object or _magnitude(counts) * max(owner.size, 1) >= _SAFE:
                out = _exact(out)
                np.add.at(out, owner, _exact(counts))
            else:
                out = exact_add(out, np.bincount(owner, weights=counts, minlength=n).astype(np.int64)
                                if _magnitude(counts) * owner.size < (1 << 53) else _sum_by(owner, counts, n))
            row = stop
        return out

    def series(self, s: Loop, env: dict, n: int, lo: np.ndarray, trips: np.ndarray):
        """``sum over v in s of max(0, hi_t(v) - lo_t(v)) * count(t.body)`` in closed form, when ``s``'s
        body is one unit-step loop ``t`` (beside plain statements) with bounds affine in ``v`` and a body
        depending on neither variable; else ``None``.  With ``v = lo + step * m``, ``m`` in ``[0, T)``,
        the trips are ``max(0, A*m + B)``, ``A = a * step``, ``B = a * lo + b`` (``a`` the coefficient of
        ``v`` in ``hi_t - lo_t``, ``b`` its value at 0): the positive terms form one run of ``m`` (from
        ``floor(-B / A) + 1`` when ``A > 0``, below ``ceil(B / -A)`` when ``A < 0``): arithmetic series."""
        loops = [x for x in s.body if isinstance(x, Loop)]
        others = tuple(x for x in s.body if not isinstance(x, Loop))
        if len(loops) != 1 or loops[0].step != 1 or any(s.var in self.deps(x) for x in others):
            return None
        t = loops[0]
        direct = self.block(others, env, n)  # (statements beside the loop, per iteration)
        body_deps = frozenset().union(*(self.deps(b) for b in t.body))
        if s.var in body_deps or t.var in body_deps:
            return None
        co_hi, co_lo = var_coefficients(t.hi), var_coefficients(t.lo)
        if co_hi is None or co_lo is None:
            pieces = self.piecewise_series(s, t, env, n, lo, trips)
            if pieces is None:
                return None
            return _exact(pieces) * _exact(self.block(t.body, env, n)) + _exact(direct) * _exact(trips)
        a = co_hi.get(s.var, 0) - co_lo.get(s.var, 0)
        at0 = {**env, s.var: np.zeros(n, np.int64)}
        b = _exact(evaluate_index(t.hi, at0, n)) - _exact(evaluate_index(t.lo, at0, n))
        big_a, big_b, T = a * s.step, a * _exact(lo) + b, _exact(trips)
        if big_a == 0:
            total = T * np.maximum(big_b, 0)
        elif big_a > 0:
            m0 = np.minimum(np.maximum((-big_b) // big_a + 1, 0), T)
            cnt = T - m0
            total = big_a * ((m0 + T - 1) * cnt // 2) + big_b * cnt
        else:
            m1 = np.minimum(np.maximum(-((-big_b) // -big_a), 0), T)
            total = big_a * ((m1 - 1) * m1 // 2) + big_b * m1
        return _exact(total) * _exact(self.block(t.body, env, n)) + _exact(direct) * T

    def piecewise_series(self, s: Loop, t: Loop, env: dict, n: int, lo: np.ndarray,
                         trips: np.ndarray) -> np.ndarray | None:
        """``sum over v in s of max(0, hi_t(v) - lo_t(v))`` per frontier point when ``t``'s bounds are
        ``min``/``max`` trees of affine functions of ``v``: an arithmetic series per piece between
        crossings; ``None`` if not so or the frontier is too wide."""
        if n > PIECEWISE_POINTS:
            return None
        out = []
        bounds = (_py_function(t.hi), _py_function(t.lo))  # (walked once, evaluated per point)
        if None in bounds:
            return None  # not integer arithmetic (a comparison, a select): expand instead
        for p in range(n):
            point = {v: int(np.broadcast_to(a, (n,))[p]) for v, a in env.items()}
            total = _piecewise_sum(t, s.var, point, int(lo[p]), s.step, int(trips[p]), bounds)
            if total is None:
                return None  # not affine between crossings (floor divisions): expand instead
            out.append(total)
        return np.array(out, dtype=object)


def _vars(e: Expr) -> set:
    return {n for n in walk(e) if n.op is Op.VAR}


def _piecewise_sum(t: Loop, v: Expr, point: dict, first: int, step: int, count: int,
                   bounds: tuple) -> int | None:
    """``sum over m in [0, count) of max(0, hi_t - lo_t)`` at ``v = first + step * m`` (``bounds``:
    ``t``'s, as :func:`_py_function`); ``None`` when a bound is not piecewise affine in ``v``."""
    hi_at, lo_at = bounds

    def f(m: int) -> int:
        at = {**point, v: first + step * m}
        return max(0, hi_at(at) - lo_at(at))

    pairs: list = []
    hi, lo = _lines(t.hi, v, point, pairs), _lines(t.lo, v, point, pairs)
    if hi is None or lo is None:
        return None
    pairs.append((hi, lo))  # where the trips reach zero
    cuts = {0, count}
    for xs, ys in pairs:  # lines cross at v* = (by - bx) / (ax - ay)
        for ax, bx in xs:
            for ay, by in ys:
                if ax != ay:
                    m = ((by - bx) // (ax - ay) - first) // step
                    cuts.update(c for c in (m - 1, m, m + 1, m + 2) if 0 < c < count)
    total = 0
    edges = sorted(cuts)
    for a, b in zip(edges, edges[1:]):
        fa, fb = f(a), f(b - 1)
        if b - a > 1:  # one affine piece (a safety check: three more points)
            d = f(a + 1) - fa
            mid = (a + b) // 2
            if fb != fa + d * (b - 1 - a) or f(mid) != fa + d * (mid - a):
                return None
        total += (fa + fb) * (b - a) // 2
    return total


def _lines(e: Expr, v: Expr, point: dict, pairs: list) -> list[tuple[int, int]] | None:
    """The lines ``a * v + b`` (at this frontier point) that ``e`` equals piecewise, when built from
    affine terms by ``+ - min max`` and constant factors, each ``min``/``max`` adding its operands' lines
    to ``pairs``; else ``None``."""
    op = e.op
    if op is Op.VAR:
        return [(1, 0)] if e is v else [(0, point[e])] if e in point else None
    if op is Op.CONST:
        return [(0, int(e.arg))]
    if op is Op.CAST:
        return _lines(e.src[0], v, point, pairs)
    kids = [_lines(x, v, point, pairs) for x in e.src]
    if any(k is None for k in kids):
        return None
    if op is Op.NEG:
        return [(-a, -b) for a, b in kids[0]]
    if op in (Op.ADD, Op.SUB):
        sign = 1 if op is Op.ADD else -1
        out = sorted({(a + sign * c, b + sign * d) for a, b in kids[0] for c, d in kids[1]})
        return out if len(out) <= 64 else None
    if op is Op.MUL:
        const = [k for k in kids if len(k) == 1 and k[0][0] == 0]
        if not const:
            return None
        factor = const[0][0][1]
        other = kids[1] if const[0] is kids[0] else kids[0]
        return [(a * factor, b * factor) for a, b in other]
    if op in (Op.MINIMUM, Op.MAXIMUM):
        pairs.append((kids[0], kids[1]))
        return sorted(set(kids[0]) | set(kids[1]))
    return None


_PY_BINARY = {Op.ADD: operator.add, Op.SUB: operator.sub, Op.MUL: operator.mul,
              Op.FLOORDIV: operator.floordiv, Op.MOD: operator.mod, Op.MAXIMUM: max, Op.MINIMUM: min}


def _py_function(e: Expr):
    """``e`` as a Python function of a point (``{var: int}``) made by one walk (evaluations are nested
    closure calls), or ``None`` when ``e`` is not integer arithmetic."""
    def rule(node: Expr, *kids):
        op = node.op
        if any(k is None for k in kids):
            return None
        if op is Op.VAR:
            return lambda env: env[node]
        if op is Op.CONST:
            if isinstance(node.arg, float) and not node.arg.is_integer():
                return None
            c = int(node.arg)
            return lambda env: c
        if op is Op.CAST:
            return kids[0]
        if op is Op.NEG:
            a = kids[0]
            return lambda env: -a(env)
        combine = _PY_BINARY.get(op)
        if combine is None or len(kids) != 2:
            return None
        a, b = kids
        return lambda env: combine(a(env), b(env))

    return fold(e, rule)


def _sum_by(owner: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.int64)
    np.add.at(out, owner, counts.astype(np.int64))
    return out


def count_work(body: tuple) -> int:
    """Executions of innermost loop bodies in ``body`` (a nest without loops runs once), an exact int."""
    return int(WorkCounter().block(body, {}, 1)[0])
