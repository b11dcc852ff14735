"""Expensive subexpressions that depend on fewer axes than their op, computed once per point of their own
axes.

In a log-softmax over NCHW's channels, ``Y[n, c, y, x] = X[n, c, y, x] - m[n, y, x] - log(s[n, y, x])``,
the log depends on ``(n, y, x)`` only, and ``c`` is an outer loop.  :func:`hoist_invariants` splits it::

    T[n, y, x]    = log(s[n, y, x])                 once per point of its own axes
    Y[n, c, y, x] = X[n, c, y, x] - m[n, y, x] - T[n, y, x]

A subexpression is taken when it holds a transcendental function or a power, uses the op's innermost axis
of more than one point but not every such axis, holds no reduction, and is evaluated at every point of the
op.  Whether it pays is :class:`Hoist`'s cost."""

from __future__ import annotations

from tensorad.ir.expr import Expr, Op, var
from tensorad.ir.rewrite import fold_along, free_vars, substitute, walk, walk_along
from tensorad.ir.tensor import ComputeOp, Tensor

from ..loops.schedule import HEAVY
from .cost import loop_cycles
from .registry import Candidate, pieces_then

_GUARDS = (Op.SELECT, Op.IF_THEN_ELSE)


def _candidates(body: Expr, axes: tuple[Expr, ...]) -> list[Expr]:
    """The maximal subexpressions of ``body`` worth computing once per point of their axes, from one bit
    mask per node (a reduction, a heavy function, which repeated axes) folded once over the DAG."""
    repeated = [a for a in axes if a.extent > 1]
    if not repeated:
        return []
    inner = repeated[-1]  # (the innermost loop that runs more than once)
    bit = {a: 1 << k for k, a in enumerate(repeated)}
    every, has_inner = (1 << len(repeated)) - 1, bit[inner]
    heavy, reduce = 1 << len(repeated), 1 << (len(repeated) + 1)
    masks = _masks(body, bit, heavy, reduce)

    def taken(n: Expr) -> bool:  # heavy, using the innermost repeated axis but not every one, no sum
        m = masks[n]
        wanted = not m & reduce and m & heavy and m & has_inner and m & every != every
        return bool(wanted) and n.op is not Op.READ

    def below(n: Expr) -> tuple[Expr, ...]:  # a sum's or a heavy node's operands (a guard's condition only)
        if taken(n) or not masks[n] & (reduce | heavy):
            return ()
        return n.src[:1] if n.op in _GUARDS else n.src

    return [n for n in walk_along(body, below) if taken(n)]


def _masks(body: Expr, bit: dict[Expr, int], heavy: int, reduce: int) -> dict[Expr, int]:
    """Each node of ``body``: the ``bit`` of every variable its subtree uses, with ``heavy`` for a
    :data:`.loops.schedule.HEAVY` function and ``reduce`` for a reduction."""
    masks: dict[Expr, int] = {}
    for n in walk(body):
        op = n.op
        m = heavy if op in HEAVY else reduce if op is Op.REDUCE else bit.get(n, 0) if op is Op.VAR else 0
        for c in n.src:
            m |= masks[c]
        masks[n] = m
    return masks


def hoist_invariants(op: ComputeOp, body: Expr) -> tuple[list[ComputeOp], ComputeOp] | None:
    """``(temporaries, op')``: an op per subexpression :func:`_candidates` takes from ``body``, over its
    axes, and ``op`` reading them; ``None`` when there is none."""
    if op.is_reduction or op.num_outputs != 1 or not op.axes \
            or any(a.lo != 0 or a.extent < 1 for a in op.axes):
        return None
    found = _candidates(body, tuple(op.axes))
    if not found:
        return None
    mapping: dict[Expr, Expr] = {}
    temps: list[ComputeOp] = []
    for k, e in enumerate(found):
        used = [a for a in op.axes if a in set(free_vars(e))]
        axes = tuple(var(f"{a.name}.h", 0, a.extent) for a in used)
        temp = ComputeOp(f"{op.name}.hoisted{k}", "", axes, (substitute(e, dict(zip(used, axes))),))
        temps.append(temp)
        mapping[e] = Expr(Op.READ, e.dtype, tuple(used), Tensor(temp, 0))
    return temps, ComputeOp(op.name, op.tag, op.axes, (_replace(body, mapping),), op.attrs, op.provenance)


def _replace(root: Expr, mapping: dict[Expr, Expr]) -> Expr:
    """``root`` with each node of ``mapping`` replaced, outermost first: a taken subexpression
    inside another (``f`` in ``X * f`` and in ``f * f``) leaves the outer one whole."""
    memo: dict[Expr, Expr] = dict(mapping)

    def rebuilt(node: Expr) -> Expr:
        new = tuple(memo[c] for c in node.src)
        return node.replace(src=new) if any(a is not b for a, b in zip(new, node.src)) else node

    return fold_along(root, lambda n: n.src, rebuilt, memo)


class Hoist:
    """An elementwise op whose transcendental subexpression depends on fewer axes than the op: that part
    computed once per point of its axes into a temporary (:mod:`.strategies.hoist`), then the op."""

    name = "hoist"

    def match(self, op, bodies, ctx):
        if len(bodies) != 1 or (found := hoist_invariants(op, bodies[0])) is None:
            return []
        return [Candidate(self, op, bodies, found)]

    def cost(self, cand, ctx):
        temps, rest = cand.data
        return sum(loop_cycles(t, t.body, ctx) for t in temps) + loop_cycles(rest, rest.body, ctx)

    def lower(self, cand, ctx):
        return pieces_then(*cand.data, cand.op)
