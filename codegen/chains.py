"""Loops that LLVM's loop vectorizer must not see: long unrolled chains of selecting combiners.

A reduction whose combiner reads an accumulator along several paths -- argmax's
``acc1' = select(acc1 >= x, acc1, x)`` reads ``acc1`` in the condition and in the choice --
becomes, once LLVM fully unrolls its constant-trip loops, a chain of ``n`` updates whose DAG has
about ``2**n`` paths.  When that chain sits in a loop the vectorizer then tries (it does not
depend on the loop's variable, so every value in it is uniform), VPlan's
``vputils::isSingleScalar`` walks the operands recursively without a memo and visits every
path: an argmax over ``r0 in [1, 10), r1 in [0, 4)`` (36 updates, 2**36 paths) inside a loop of 3
did not compile in an hour (issue 8, D5).

:func:`chain_paths` counts those paths exactly (a matrix power on the combiner's path counts,
Python ints); a loop around a chain with more than :data:`PATH_LIMIT` paths is emitted with the
vectorizer (and unroller) off.  Small windows -- the 2x2 or 3x3 winner reductions of pooling
gradients, 16 or 512 paths -- keep the vectorized outer loop.
"""

from __future__ import annotations

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import fold

from .program import Assign, If, Loop

PATH_LIMIT = 1 << 12


def path_matrix(values: tuple[Expr, ...], targets: tuple[Expr, ...]) -> list[list[int]]:
    """``M[i][j]``: the number of operand paths from ``values[i]`` to ``targets[j]``."""
    index = {t: j for j, t in enumerate(targets)}
    zero = (0,) * len(targets)

    def rule(node: Expr, *kids: tuple[int, ...]) -> tuple[int, ...]:
        if node.op is Op.VAR and node in index:
            return tuple(int(j == index[node]) for j in range(len(targets)))
        return tuple(sum(col) for col in zip(zero, *kids))

    memo: dict = {}
    return [list(fold(v, rule, memo)) for v in values]


def chain_paths(m: list[list[int]], steps: int, limit: int = PATH_LIMIT) -> int:
    """The most paths from one accumulator after ``steps`` updates to the initial ones (the
    row sums of ``M**steps``), stopping once past ``limit``.

    The counts stay below ``limit`` forever for most combiners (a sum's chain is one line), so
    the row vector then repeats: from its first repetition the rest of the sequence is a known
    cycle and the answer is read off it -- the work is bounded by the states seen, never by
    ``steps`` (a sum over a 256 x 256 window unrolled inside a loop once cost 10^5 updates)."""
    rows = tuple([1] * len(m))  # paths from each accumulator to the initial values, after 0 steps
    states: list[tuple[int, ...]] = [rows]
    first = {rows: 0}
    for step in range(1, steps + 1):
        rows = tuple(sum(m[i][j] * rows[j] for j in range(len(m))) for i in range(len(m)))
        if max(rows, default=0) > limit:
            break
        if rows in first:  # states[first[rows]:] repeats with period step - first[rows]
            start = first[rows]
            return max(states[start + (steps - start) % (step - start)], default=0)
        first[rows] = step
        states.append(rows)
    return max(rows, default=0)


def unrolled_chain_too_long(loop: Loop, limit: int = PATH_LIMIT) -> bool:
    """Whether fully unrolling the constant-trip loops inside ``loop`` would leave, in
    ``loop``'s body, an accumulator chain with more than ``limit`` paths."""
    def visit(stmts: tuple, steps: int) -> bool:
        for s in stmts:
            if isinstance(s, Loop):
                if s.lo.op is not Op.CONST or s.hi.op is not Op.CONST:
                    continue  # not fully unrollable: ``loop`` keeps an inner loop
                trips = max(0, -(-(int(s.hi.arg) - int(s.lo.arg)) // s.step))
                if visit(s.body, steps * trips):
                    return True
            elif isinstance(s, If):
                if visit(s.then, steps) or visit(s.orelse, steps):
                    return True
            elif isinstance(s, Assign) and steps > 1:
                if chain_paths(path_matrix(s.values, s.targets), steps, limit) > limit:
                    return True
        return False

    return any(isinstance(s, Loop) for s in loop.body) and visit(loop.body, 1)
