"""Which tensors get a buffer and which are recomputed inside their consumers.

The rule (printed as ``# inlined: ...`` and ``allocate ...``): outputs, reductions and values whose readers
must see the same bits (``Role.SAVED``) are materialized; a non-reduction tensor is inlined into its readers,
unless its body (with its inlined producers') has a transcendental function or more than :data:`READ_BUDGET`
reads, or its own body several reads, and its readers read it at least twice per element (a recurrence's state
is computed once per step); but one larger than the arguments together and than each buffer held anyway
(a reduction's) is inlined, and no inlined body gathers more than :data:`INLINE_BUDGET` expensive operations.

:func:`inline_bodies` then substitutes the inlined bodies, so every materialized op reads only buffers.
:func:`store_operands` stores, in place of a materialized elementwise ``T``, the value a sum reads of it
through windows as a factor (``max(T, 0)``, read nine times per point by a convolution's weight gradient),
where recomputing it per read costs more than a store and loads (:func:`.strategies.cost.recompute_cost`)
and ``T``'s other readers read each point at most once (they inline ``T``)."""

from __future__ import annotations

import math
from collections.abc import Iterator

from tensorad.simplify.algebra.ranges import wraps_where_stored

from tensorad.ir.dtype import is_float, is_int
from tensorad.ir.expr import UNARY_MATH, Expr, Op, const
from tensorad.ir.rewrite import free_vars, match_pattern, replace_reads, rewrite, substitute, walk
from tensorad.ir.tensor import ComputeOp, Role, Tensor

from ..gemm.padding import pointwise_read
from ..strategies.cost import recompute_cost
from ..target import Target
from .shared_windows import expansion

EXPENSIVE = UNARY_MATH | {Op.POW, Op.DIV, Op.REDUCE}
INLINE_BUDGET = 128  # expensive operations one inlined body may gather (compile time)
READ_BUDGET = 8  # reads one inlined body evaluated twice per element may gather


def _box(op: ComputeOp) -> int:
    return math.prod(max(ax.hi - ax.lo, 0) for ax in list(op.axes) + list(op.reduce_axes))


def _cost(bodies: tuple[Expr, ...]) -> tuple[int, int]:
    """(number of reads, number of expensive operations) in ``bodies``; a division by a value of no axis (a
    mean's ``/ width``, a count read from an input) costs what the product by its reciprocal costs, none."""
    nodes = [n for b in bodies for n in walk(b)]
    return sum(n.op is Op.READ for n in nodes), \
        sum(n.op in EXPENSIVE and not (n.op is Op.DIV and not free_vars(n.src[1])) for n in nodes)


def must_store(op: ComputeOp, kept: set) -> bool:
    """Whether ``op`` is materialized whatever it costs: an output or forced (``kept``), a reduction, a
    value whose readers must see the same bits, or one that wraps where it is stored."""
    return op in kept or op.is_reduction or op.provenance.role is Role.SAVED \
        or any(wraps_where_stored(b) for b in op.body)


def choose_materialized(tensors: list[Tensor], outputs: list[Tensor], inputs: set[Tensor],
                        force_inline: set = frozenset(), force_materialize: set = frozenset()
                        ) -> set[ComputeOp]:
    """The compute ops that get buffers (see the module docstring)."""
    ops = list(dict.fromkeys(t.op for t in tensors if isinstance(t.op, ComputeOp) and t not in inputs))
    kept = {t.op for t in outputs} | set(force_materialize)
    chosen = {op for op in ops if must_store(op, kept)}
    limit = max([sum(t.size for t in list(inputs) + list(outputs)),  # (or a buffer it holds anyway)
                 *(math.prod(max(ax.extent, 0) for ax in op.axes) * op.num_outputs for op in chosen)])
    # reads of each op by every other op, weighted by the reader's iteration box
    uses: dict[ComputeOp, int] = dict.fromkeys(ops, 0)
    for reader in ops:
        w = _box(reader)
        for b in reader.body[:1] if reader.is_reduction else reader.body:
            for n in walk(b):
                if n.op is Op.READ and isinstance(n.arg.op, ComputeOp) and n.arg.op in uses:
                    uses[n.arg.op] += w
    # producers first: an op's inlined producers are known when it is decided; an op whose body with
    # them would hold more than INLINE_BUDGET expensive operations is materialized too
    gathered: dict[ComputeOp, tuple[int, int]] = {}  # reads and expensive operations of an op's inlined body
    for op in ops:
        nodes = {n for b in op.body for n in walk(b)}
        reads, heavy = _cost(op.body)
        inlined = [gathered[n.arg.op] for n in nodes if n.op is Op.READ and n.arg.op in gathered]
        loads = reads + sum(r - 1 for r, _ in inlined)  # (an inlined producer's read becomes its reads)
        heavy += sum(h for _, h in inlined)
        size = max(_box(op), 1)
        costly = heavy > 0 or reads >= 3 or loads > READ_BUDGET
        if op not in force_inline and (costly and uses[op] >= 2 * size and size <= max(limit, 1)
                                       or heavy > INLINE_BUDGET):
            chosen.add(op)
        gathered[op] = (1, 0) if op in chosen else (loads, heavy)
    return chosen


def reuse_materialized(ops: list[ComputeOp], bodies: dict, check) -> None:
    """Reads of a materialized elementwise value (a transcendental function, no reduction, stored in the
    type it computes) where a later body computes it again (the softmax gradient's ``exp(z - m)``), where
    ``check(op, bodies)`` proves them in bounds.  ``bodies`` is updated in place."""
    position = {op: k for k, op in enumerate(ops)}
    kinds: dict[ComputeOp, tuple[tuple, dict]] = {}  # reader -> (its bodies, their nodes by op)

    def by_kind(reader: ComputeOp, bs: tuple) -> dict:
        """The nodes of ``reader``'s bodies ``bs`` grouped by operation and by operation and
        the operations of their operands (one walk per version)."""
        got = kinds.get(reader)
        if got is None or got[0] is not bs:
            table: dict = {}
            for b in bs:
                for n in walk(b):
                    table.setdefault(n.op, []).append(n)
                    table.setdefault((n.op, tuple(x.op for x in n.src)), []).append(n)
            got = kinds[reader] = (bs, table)
        return got[1]

    readers: dict[Tensor, list[ComputeOp]] = {}  # tensor -> the ops reading it, in order
    for op in ops:
        for t in dict.fromkeys(n.arg for b in bodies[op] for n in walk(b) if n.op is Op.READ):
            readers.setdefault(t, []).append(op)
    for k, t_op in enumerate(ops):
        if t_op.is_reduction or t_op.num_outputs != 1 or not t_op.axes:
            continue
        pattern = bodies[t_op][0]
        if pattern.dtype != t_op.body[0].dtype or not any(n.op in UNARY_MATH for n in walk(pattern)):
            continue
        first = next((n.arg for n in walk(pattern) if n.op is Op.READ), None)
        if first is None:
            continue
        axes = frozenset(t_op.axes)
        tensor = Tensor(t_op, 0)
        # the candidates: nodes of the pattern's operation (or its operands', where none is an axis)
        kind = pattern.op if any(x in axes for x in pattern.src) else (
            pattern.op, tuple(x.op for x in pattern.src))

        def bound(node: Expr, pattern=pattern, axes=axes) -> dict | None:
            bind: dict = {}
            return bind if match_pattern(pattern, node, axes, bind) and len(bind) == len(axes) else None

        def rule(node: Expr, tensor=tensor, t_op=t_op, bound=bound) -> Expr | None:
            b = bound(node)
            return None if b is None else Expr(Op.READ, node.dtype, tuple(b[a] for a in t_op.axes), tensor)

        # (only the later readers of a tensor the pattern reads, where a node of its kind matches)
        for reader in [r for r in readers.get(first, ()) if position[r] > k]:
            old = bodies[reader]
            if not any(bound(n) is not None for n in by_kind(reader, old).get(kind, ())):
                continue
            new = tuple(rewrite(b, {pattern.op: rule}) for b in old)
            if any(a is not b for a, b in zip(new, old)) and check(reader, new):
                bodies[reader] = new


def _factors(e: Expr) -> Iterator[Expr]:
    """The factors of the product ``e``, looking through guards of the index alone (``if_then_else(in
    range, v, 0)``)."""
    if e.op is Op.MUL:
        for s in e.src:
            yield from _factors(s)
    elif e.op in (Op.SELECT, Op.IF_THEN_ELSE) and e.src[2].op is Op.CONST and e.src[2].arg == 0 \
            and not any(n.op is Op.READ for n in walk(e.src[0])):
        yield from _factors(e.src[1])
    else:
        yield e


def _expansion(read: Expr) -> float:
    """How many times the loops around ``read`` read each point of its tensor (inf: a range unknown)."""
    found = expansion(read.src, read.arg.shape, {})
    return math.inf if found is None else found


def _may_fault(value: Expr) -> bool:
    """Whether ``value``, its reads aside, holds an operation that could fault where its guard kept it from
    running (integer division, a data index) or a reduction."""
    return any(n.op in (Op.DATA_INDEX, Op.REDUCE, Op.FLOORDIV, Op.MOD) or (n.op is Op.DIV and is_int(n.dtype))
               for n in walk(replace_reads(value, lambda n: const(0, n.dtype))))


def _windowed_operands(body: Expr, target: Target) -> Iterator[tuple[Expr, Expr, Expr]]:
    """``(factor, its first read, its value over that computed tensor's axes)`` for each factor of the sum
    ``body`` that computes a float pointwise of reads through windows, where computing it once per read
    costs more than a store per point and a load per read."""
    if body.op is not Op.REDUCE or body.arg.combiner.kind != "sum" or len(body.src) != 2:
        return
    for f in _factors(body.src[1]):
        read = pointwise_read(f)
        if read is None or f.op is Op.READ or not isinstance(read.arg.op, ComputeOp) \
                or not is_float(f.dtype) or _may_fault(f):
            continue
        axes = read.arg.op.axes
        value = replace_reads(f, lambda n, axes=axes: Expr(Op.READ, n.dtype, axes, n.arg))
        times = _expansion(read)
        load = recompute_cost(Expr(Op.READ, read.dtype, axes, read.arg), target)
        if times >= 2 and times * recompute_cost(value, target) > (1 + times) * load:
            yield f, read, value


def _stored_operand(t_op: ComputeOp, ops: list[ComputeOp], bodies: dict, target: Target
                    ) -> tuple[ComputeOp, dict] | None:
    """``(op, bodies)``: the op storing the one windowed operand the sums read of ``t_op``, and the bodies
    of every other op, the sums reading the new op instead; ``None`` when the sums read several operands of
    it, or another op reads a point of it more than once (it would compute ``t_op`` each time)."""
    tensor = Tensor(t_op, 0)
    sites = {op: [(f, r, v) for f, r, v in _windowed_operands(bodies[op][0], target) if r.arg == tensor]
             for op in ops if op.is_reduction}
    values = {v for found in sites.values() for _, _, v in found}
    if len(values) != 1:
        return None
    value = values.pop()
    new = ComputeOp(f"{t_op.name}.operand", t_op.tag, t_op.axes, (value,), (), t_op.provenance)
    readers = {op: bs for op, bs in bodies.items() if op is not t_op}
    readers[new] = (value,)
    for op, found in sites.items():
        stored = {f: Expr(Op.READ, f.dtype, r.src, Tensor(new, 0)) for f, r, _ in found}
        readers[op] = tuple(substitute(b, stored) for b in bodies[op]) if stored else bodies[op]
    if any(_expansion(n) > 1 for bs in readers.values() for b in bs for n in walk(b)
           if n.op is Op.READ and n.arg == tensor):
        return None
    return new, readers


def store_operands(ops: list[ComputeOp], bodies: dict, materialized: set[ComputeOp], kept: set,
                   target: Target) -> list[ComputeOp]:
    """``ops`` with each materialized elementwise tensor whose windowed operand is stored in its place (see
    the module docstring) replaced by that operand's new op, after the ops it reads; ``bodies`` and
    ``materialized`` are updated in place.  ``kept``: the ops that keep their buffers (outputs, forced)."""
    read = {r.arg.op for op in ops if op.is_reduction
            for _, r, _ in _windowed_operands(bodies[op][0], target)}
    for t_op in [op for op in ops if op in read and not must_store(op, kept) and op.num_outputs == 1
                 and not any(n.op in EXPENSIVE for n in walk(bodies[op][0]))]:
        stored = _stored_operand(t_op, ops, bodies, target)
        if stored is None:
            continue
        new, readers = stored
        body = bodies.pop(t_op)[0]

        def inline(node: Expr, t_op=t_op, body=body) -> Expr | None:
            return substitute(body, dict(zip(t_op.axes, node.src))) if node.arg.op is t_op else None
        bodies.update({op: tuple(replace_reads(b, inline) for b in bs) for op, bs in readers.items()})
        after = {n.arg.op for n in walk(new.body[0]) if n.op is Op.READ}  # (t_op and the others it reads)
        at = max(k for k, op in enumerate(ops) if op in after) + 1
        ops = [op for op in ops[:at] + [new] + ops[at:] if op is not t_op]
        materialized.discard(t_op)
        materialized.add(new)
    return ops


def inline_bodies(op: ComputeOp, materialized: set[ComputeOp], inputs: set[Tensor]) -> tuple[Expr, ...]:
    """``op``'s bodies with every read of a non-materialized compute replaced by its body."""
    def inline(node: Expr) -> Expr | None:
        t: Tensor = node.arg
        if t in inputs or not isinstance(t.op, ComputeOp) or t.op in materialized:
            return None
        return substitute(t.op.body[t.value_index], dict(zip(t.op.axes, node.src)))

    return tuple(replace_reads(b, inline) for b in op.body)
