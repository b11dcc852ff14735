"""One sum computed once when the program spells it twice, once transposed.

Reverse mode can reach one product by two paths in two layouts (SwiGLU's ``dY W2``:
``A[j, i] = sum_r W2[r, j] * dY[i, r]`` and ``B[i, j] = sum_r dY[i, r] * W2[r, j]``).  ``B[i, j]`` is
``A[j, i]``, so the later one is dropped and its readers read the earlier, permuted.  Equality is
structural, ``+``/``*`` operands in either order (exact in IEEE arithmetic)."""

from __future__ import annotations

from itertools import permutations

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import replace_reads, simultaneous, walk
from tensorad.ir.tensor import ComputeOp, Tensor

MAX_AXES = 4  # permutations tried: at most 4! per pair
COMMUTATIVE = (Op.ADD, Op.MUL)


def _same(a: Expr, b: Expr, memo: dict) -> bool:
    """Structural equality with the operands of ``+`` and ``*`` in either order."""
    if a is b:
        return True
    key = (id(a), id(b))
    if key in memo:
        return memo[key]
    if a.op is not b.op or a.dtype != b.dtype or a.arg != b.arg or len(a.src) != len(b.src):
        out = False
    elif a.op in COMMUTATIVE and len(a.src) == 2:
        out = (_same(a.src[0], b.src[0], memo) and _same(a.src[1], b.src[1], memo)) or \
              (_same(a.src[0], b.src[1], memo) and _same(a.src[1], b.src[0], memo))
    else:
        out = all(_same(x, y, memo) for x, y in zip(a.src, b.src))
    memo[key] = out
    return out


def _sum(op: ComputeOp, bodies: dict) -> Expr | None:
    bs = bodies[op]
    if op.num_outputs != 1 or len(bs) != 1 or bs[0].op is not Op.REDUCE or not op.axes \
            or len(op.axes) > MAX_AXES or bs[0].arg.combiner.kind != "sum":
        return None
    return bs[0]


def _transposed(a_op: ComputeOp, a: Expr, b_op: ComputeOp, b: Expr) -> tuple[int, ...] | None:
    """``perm`` with ``B[x] = A[x[perm[0]], x[perm[1]], ...]`` for every point, else ``None``."""
    ra, rb = a.arg.axes, b.arg.axes
    if len(ra) != len(rb) or any((x.lo, x.hi) != (y.lo, y.hi) for x, y in zip(ra, rb)):
        return None
    if sorted(a_op.shape) != sorted(b_op.shape):
        return None
    for perm in permutations(range(len(b_op.axes))):
        if perm == tuple(range(len(perm))):
            continue  # (equal layouts are the optimizer's common-subexpression business)
        if any(a_op.axes[k].extent != b_op.axes[p].extent or a_op.axes[k].lo != b_op.axes[p].lo
               for k, p in enumerate(perm)):
            continue
        mapping = {**{a_op.axes[k]: b_op.axes[p] for k, p in enumerate(perm)}, **dict(zip(ra, rb))}
        # at once: a permutation of shared axes is a cycle repeated replacement would never leave
        moved = [simultaneous(mapping)(s) for s in a.src]
        if all(_same(x, y, {}) for x, y in zip(moved, b.src)):
            return perm
    return None


def merge_transposed(ops: list[ComputeOp], bodies: dict, outputs: frozenset) -> list[ComputeOp]:
    """``ops`` without each sum that an earlier one computes transposed (an output keeps its
    own); readers of a dropped sum read the earlier one; ``bodies`` is updated in place."""
    out_ops = {t.op for t in outputs}
    # compared only within a bucket of the same shape, sum ranges and tensors read
    buckets: dict[tuple, list[tuple[ComputeOp, Expr]]] = {}
    dropped: dict[ComputeOp, tuple[ComputeOp, tuple[int, ...]]] = {}
    for b_op in ops:
        b = _sum(b_op, bodies)
        if b is None:
            continue
        key = (tuple(sorted(b_op.shape)), tuple((r.lo, r.hi) for r in b.arg.axes),
               frozenset(n.arg for n in walk(b) if n.op is Op.READ))
        earlier = buckets.setdefault(key, [])
        if b_op in out_ops:
            earlier.append((b_op, b))
            continue
        for a_op, a in earlier:
            perm = _transposed(a_op, a, b_op, b)
            if perm is not None:
                dropped[b_op] = (a_op, perm)
                break
        else:
            earlier.append((b_op, b))
    if not dropped:
        return ops

    def reroute(node: Expr) -> Expr | None:
        found = dropped.get(node.arg.op)
        if found is None:
            return None
        a_op, perm = found
        return Expr(Op.READ, node.dtype, tuple(node.src[p] for p in perm), Tensor(a_op, 0))

    kept = [op for op in ops if op not in dropped]
    for op in kept:
        bodies[op] = tuple(replace_reads(b, reroute) for b in bodies[op])
    for op in dropped:
        del bodies[op]
    return kept
