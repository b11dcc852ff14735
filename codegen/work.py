"""Exact work of a loop nest: how many times innermost loop bodies execute.

isl has no cardinality in islpy, so we count with the loop structure itself.  The count of a
block is computed for a whole *frontier* of outer-loop points at once (NumPy arrays, one value
per point for each loop variable in scope):

* a loop whose body's bounds and guards do not mention its variable contributes
  ``trips * count(body)`` -- so a box costs a product of extents, whatever its size
  (32 x 3000 x 10000 dense: three multiplications);
* otherwise the loop is expanded: every point of the frontier is repeated once per iteration
  and the body is counted on the expanded frontier (a triangle ``k <= i`` expands ``i`` only,
  and the inner loop is ``i + 1`` trips in closed form);
* an affine ``if`` (from isl) masks the frontier;
* a block execution that runs a counted statement outside its inner loops is one execution of
  an innermost body -- also when loops sit beside it (isl splits ``min``/``max`` bounds and
  sub-domains into pieces: ``Y1[i] = ..; if i <= 2: ..``); several counted statements of one
  body execution count once; bookkeeping (``counted=False``: accumulator init, final stores,
  fused epilogues) never counts.

Frontiers are processed in chunks so memory stays bounded however deep the expansion goes.
"""

from __future__ import annotations

import numpy as np

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import fold, walk

from .program import If, Loop

CHUNK = 1 << 22

_RULES = {
    Op.CONST: lambda n: np.int64(n.arg) if n.dtype != "bool" else bool(n.arg),
    Op.ADD: lambda n, a, b: a + b,
    Op.SUB: lambda n, a, b: a - b,
    Op.MUL: lambda n, a, b: a * b,
    Op.NEG: lambda n, a: -a,
    Op.FLOORDIV: lambda n, a, b: np.floor_divide(a, b),
    Op.MOD: lambda n, a, b: np.mod(a, b),
    Op.MAXIMUM: lambda n, a, b: np.maximum(a, b),
    Op.MINIMUM: lambda n, a, b: np.minimum(a, b),
    Op.LT: lambda n, a, b: a < b,
    Op.LE: lambda n, a, b: a <= b,
    Op.GT: lambda n, a, b: a > b,
    Op.GE: lambda n, a, b: a >= b,
    Op.EQ: lambda n, a, b: np.equal(a, b),
    Op.NE: lambda n, a, b: np.not_equal(a, b),
    Op.AND: lambda n, a, b: np.logical_and(a, b),
    Op.OR: lambda n, a, b: np.logical_or(a, b),
    Op.NOT: lambda n, a: np.logical_not(a),
    Op.SELECT: lambda n, c, a, b: np.where(c, a, b),
    Op.CAST: lambda n, a: a,
}


def evaluate_index(e: Expr, env: dict[Expr, np.ndarray], n: int) -> np.ndarray:
    """An index expression or affine condition at every frontier point (length ``n``)."""
    rules = dict(_RULES)
    rules[Op.VAR] = lambda node: env[node]
    return np.broadcast_to(fold(e, rules), (n,))


class WorkCounter:
    def __init__(self) -> None:
        self._deps: dict[int, frozenset] = {}

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
        elif isinstance(s, If) and s.affine:
            out |= _vars(s.cond)
            for b in s.then + s.orelse:
                out |= self.deps(b)
        found = self._deps[key] = frozenset(out)
        return found

    def block(self, stmts: tuple, env: dict, n: int) -> np.ndarray:
        """Executions of innermost bodies in ``stmts``, per frontier point."""
        direct, nested = self.parts(stmts, env, n)
        return direct.astype(np.int64) + nested

    def parts(self, stmts: tuple, env: dict, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(1 where this block execution runs a counted statement outside any inner loop,
        executions of innermost bodies inside its inner loops), per frontier point.

        A counted statement beside a loop (``x = ..; if c: for k: ..``, as isl splits a
        domain into pieces) is an innermost-body execution of its own; counted statements of
        one body execution (plain, or under affine ``if``s: the stores of a multi-output op
        on different sub-domains) count once together."""
        direct = np.zeros(n, bool)
        nested = np.zeros(n, np.int64)
        for s in stmts:
            if isinstance(s, Loop):
                nested += self.loop(s, env, n)
            elif isinstance(s, If) and s.affine:
                mask = evaluate_index(s.cond, env, n)
                d_then, n_then = self.parts(s.then, env, n)
                d_else, n_else = self.parts(s.orelse, env, n)
                direct |= np.where(mask, d_then, d_else)
                nested += np.where(mask, n_then, n_else)
            elif counted(s):
                direct[:] = True
        return direct, nested

    def loop(self, s: Loop, env: dict, n: int) -> np.ndarray:
        lo = evaluate_index(s.lo, env, n).astype(np.int64)
        hi = evaluate_index(s.hi, env, n).astype(np.int64)
        trips = np.maximum(0, (hi - lo + s.step - 1) // s.step)
        inner = frozenset().union(*(self.deps(b) for b in s.body))
        if s.var not in inner:
            return trips * self.block(s.body, env, n)
        keep = [v for v in inner if v is not s.var and v in env]
        out = np.zeros(n, np.float64)
        # expand the frontier in chunks of at most CHUNK points
        ends = np.cumsum(trips)
        start_pt = 0
        while start_pt < n:
            base = ends[start_pt - 1] if start_pt else 0
            stop_pt = int(np.searchsorted(ends, base + CHUNK, side="right"))
            stop_pt = max(stop_pt, start_pt + 1)
            t = trips[start_pt:stop_pt]
            owner = np.repeat(np.arange(start_pt, stop_pt), t)
            if owner.size:
                first = np.repeat(ends[start_pt:stop_pt] - t, t)
                offset = np.arange(base, base + owner.size) - first
                sub_env = {v: np.broadcast_to(env[v], (n,))[owner] for v in keep}
                sub_env[s.var] = lo[owner] + s.step * offset
                counts = self.block(s.body, sub_env, owner.size)
                out += np.bincount(owner, weights=counts, minlength=n)
            start_pt = stop_pt
        return np.rint(out).astype(np.int64)


def counted(s) -> bool:
    """Whether a body statement is work: a data-dependent ``if`` is when what it guards is."""
    if isinstance(s, If):
        return any(counted(x) for x in s.then + s.orelse)
    if isinstance(s, Loop):
        raise TypeError("a loop under a data-dependent if is not counted exactly")
    return s.counted


def _vars(e: Expr) -> set:
    return {n for n in walk(e) if n.op is Op.VAR}


def count_work(body: tuple) -> int:
    """Executions of innermost loop bodies in ``body`` (a nest without loops runs once)."""
    return int(WorkCounter().block(body, {}, 1)[0])
