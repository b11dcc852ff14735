"""Loops that LLVM's loop vectorizer must not see -- long unrolled chains of selecting combiners -- and
loops it must be asked to vectorize: the windows of a short one (:func:`window_vector_width`).

A reduction whose combiner reads an accumulator along several paths (argmax's
``select(acc1 >= x, acc1, x)``) becomes, once LLVM unrolls its constant-trip loops, a chain of ``n``
updates with about ``2**n`` paths, which VPlan's ``vputils::isSingleScalar`` walks without a memo when the
chain sits in a loop it tries.  :func:`chain_paths` counts those paths exactly; a loop around a chain of
more than :data:`PATH_LIMIT` paths is emitted with the vectorizer and unroller off.  Small windows
(pooling gradients' 2x2 or 3x3) keep the vectorized outer loop."""

from __future__ import annotations

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import fold, free_vars, walk

from ..program import Assign, If, Loop, Store, const_trips
from ..program import stores as stores_in
from .expr import recombine_digits

PATH_LIMIT = 1 << 12
WINDOW_TRIPS = 8  # a loop of fewer trips (a 3 x 3 or 7 x 7 window) stays unrollable


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
    """The most paths from one accumulator after ``steps`` updates to the initial ones (the row sums of
    ``M**steps``), stopping past ``limit``.  When the counts stay below ``limit`` the row vector repeats,
    and the rest is read off the cycle: the work is bounded by the states seen, not by ``steps``."""
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
                trips = const_trips(s)
                if trips is None:
                    continue  # not fully unrollable: ``loop`` keeps an inner loop
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


WINDOW_COPIES = 64  # inner loops unrolled into at most this many copies: a window (8 x 8 at most)


def window_vector_width(loop: Loop, lanes) -> int | None:
    """Lanes to ask of LLVM's loop vectorizer for ``loop`` when it runs over the windows of a short
    selecting reduction (a max pool's winner over a 2 x 2 window): its inner loops have constant trips
    (unrolled fully, ``loop`` becomes innermost), at most :data:`WINDOW_COPIES` copies of a body whose
    accumulators are read along several paths, within :data:`PATH_LIMIT`.  The width is the power of two
    up to the accumulators' widest type's ``lanes(dtype)`` that leaves the fewest vector plus scalar
    iterations (14 trips: 4 lanes, 3 + 2).  ``None``: not such a loop."""
    trips = const_trips(loop)
    if trips is None or trips < 2:
        return None
    found: list[tuple[Assign, int]] = []  # (update, loop depth below ``loop``)

    def visit(stmts: tuple, copies: int, depth: int) -> bool:
        for s in stmts:
            if isinstance(s, Loop):
                t = const_trips(s)
                if t is None or copies * t > WINDOW_COPIES or not visit(s.body, copies * t, depth + 1):
                    return False
            elif isinstance(s, If):  # a test of data (a where-mask) leaves no select LLVM takes
                if not s.affine or not (visit(s.then, copies, depth) and visit(s.orelse, copies, depth)):
                    return False
            elif isinstance(s, Assign):
                found.append((s, depth))
        return True

    if not any(isinstance(s, Loop) for s in loop.body) or not visit(loop.body, 1, 0):
        return None
    # a window: the update runs in a loop inside this one, which starts its accumulators
    starts: dict[tuple, int] = {}
    for s, depth in found:
        if max(map(sum, path_matrix(s.values, s.targets)), default=0) == 0:
            starts[s.targets] = min(depth, starts.get(s.targets, depth))
    selecting = [s for s, depth in found if depth > 0 and starts.get(s.targets) == 0
                 and max(map(sum, path_matrix(s.values, s.targets)), default=0) > 1]
    # the windows move with the loop: an update not reading at ``loop``'s variable is invariant in it
    if not any(_reads_at(v, loop.var) for s in selecting for v in s.values):
        return None
    width = min(lanes(t.dtype) for s in selecting for t in s.targets)
    best = None
    vf = width
    while vf >= 2:
        cost = trips // vf + trips % vf
        if best is None or cost < best[0]:
            best = (cost, vf)
        vf //= 2
    return None if best is None else best[1]


SCATTER_STRIDE = 8  # a store moving at most this many elements a trip can still be vector lanes
                    # (consecutive, or a member of an interleaved group)


def rolled_inside_scatter(loop: Loop, strides, largest: int) -> list[Loop]:
    """The loops of at least :data:`WINDOW_TRIPS` trips with loops inside, within ``loop``, that must stay
    rolled: fully unrolled, they would leave ``loop`` innermost around more than :data:`WINDOW_COPIES` (and at
    most ``largest``) copies of a body each of whose stores moves by more than :data:`SCATTER_STRIDE` elements
    a trip of ``loop`` (scatters if vectorized), on which LLVM's loop-access analysis spends quadratic time.
    Kept rolled, when its own stores move by at most :data:`SCATTER_STRIDE` with it, the inner loop is
    innermost and vectorized.  Short loops stay unrollable, innermost loops LLVM's, and a window loop
    (:func:`window_vector_width`) keeps its own hint.  ``strides(tensor)``: the tensor's element strides."""
    if const_trips(loop) is None or not any(isinstance(s, Loop) for s in loop.body):
        return []
    stores: list[Store] = []
    long: list[Loop] = []

    def visit(stmts: tuple) -> int | None:
        """The most copies of a body full unrolling leaves; None: an inner loop's trips vary."""
        most = 1
        for s in stmts:
            if isinstance(s, Loop):
                t, d = const_trips(s), visit(s.body)
                if t is None or d is None:
                    return None
                if t >= WINDOW_TRIPS and any(isinstance(x, Loop) for x in s.body):
                    long.append(s)  # (an innermost loop is LLVM's to vectorize and unroll)
                most = max(most, t * d)
            elif isinstance(s, If):
                t, e = visit(s.then), visit(s.orelse)
                if t is None or e is None:
                    return None
                most = max(most, t, e)
            elif isinstance(s, Store):
                stores.append(s)
        return most

    copies = visit(loop.body)
    if copies is None or not WINDOW_COPIES < copies <= largest or not stores or not long:
        return []

    def step(s: Store, v: Expr) -> int | None:
        """The smallest stride at which ``s``'s address moves with ``v`` (None: it does not)."""
        moving = [abs(stride) for term, stride in recombine_digits(tuple(s.index), strides(s.buffer.tensor))
                  if v in free_vars(term)]
        return min(moving) if moving else None

    if any((st := step(s, loop.var)) is None or st <= SCATTER_STRIDE for s in stores):
        return []
    # kept rolled only where every store inside moves a few elements with the kept loop
    return [x for x in long if all((st := step(s, x.var)) is not None and st <= SCATTER_STRIDE
                                   for s in stores_in(x.body))]


def _reads_at(e: Expr, v: Expr) -> bool:
    """Whether ``e`` reads memory at an address that depends on variable ``v``."""
    return any(n.op is Op.READ and any(v in free_vars(i) for i in n.src) for n in walk(e))
