"""Where a program's fills run: fused into the nest that then writes the buffer, or in parallel.

A :class:`~.program.Fill` is one ``memset`` of a whole buffer on one thread.  :func:`place_fills` moves a
fill *into* the first nest that touches its buffer when the nest owns slices of it (a perfect prefix of
loops ``v_0 .. v_{k-1}``, each over its whole axis with step 1, every access having ``v_j`` as index
``j``): each iteration zeroes its own slice first (uncounted stores), bit for bit fill-then-nest.  A fill
that cannot be fused is ``parallel`` when the build may be and it pays (page-aligned chunks per thread)."""

from __future__ import annotations

import dataclasses

from tensorad.ir.expr import Expr, Op, const, var
from tensorad.ir.rewrite import walk

from ..options import Options
from ..program import Fill, Loop, Nest, Program, Store, nest_exprs, stores, walk_stmts
from ..target import Target

HALF = ("float16", "bfloat16")


def place_fills(program: Program, opts: Options, target: Target) -> Program:
    """``program`` with each large fill fused into the nest after it where that nest owns the
    buffer's slices (see the module docstring), else marked parallel when worth sharing."""
    steps = list(program.steps)
    k = 0
    while k < len(steps):
        step = steps[k]
        if not isinstance(step, Fill) or step.buffer.size == 0:
            k += 1
            continue
        worth_sharing = opts.parallel and _fill_work(step, target) >= opts.parallel_min_work
        after = _first_toucher(program, steps, k)
        if after is not None and step.buffer.dtype not in HALF:
            nest = steps[after]
            large = step.buffer.size * step.buffer.itemsize > target.l2
            if large or (worth_sharing and nest.parallel):
                fused = fuse_fill(program, step, nest)
                if fused is not None:
                    steps[after] = fused
                    del steps[k]
                    continue
        if worth_sharing:
            steps[k] = dataclasses.replace(step, parallel=True)
        k += 1
    return program if steps == program.steps else dataclasses.replace(program, steps=steps)


def _fill_work(fill: Fill, target: Target) -> int:
    """A fill's work in the units of ``parallel_min_work``: vector stores."""
    try:
        lanes = target.lanes(fill.buffer.dtype)
    except ValueError:  # (bool, halves: counted per element)
        lanes = 1
    return fill.buffer.size // lanes


def _first_toucher(program: Program, steps: list, k: int) -> int | None:
    """The index of the first step after ``k`` that reads or writes the fill's buffer when it
    is a loop nest (a micro-kernel nest, another fill or nothing: ``None``)."""
    buf = steps[k].buffer
    for j in range(k + 1, len(steps)):
        s = steps[j]
        if isinstance(s, Fill):
            if s.buffer is buf:
                return None
            continue
        if s.attrs.gemm is not None:  # (its packers read what its printed loops do not show)
            return None
        reads = {n.arg for e in nest_exprs(s.body) for n in walk(e) if n.op is Op.READ}
        if any(b is buf for b in s.outputs) or any(program.buffers.get(t) is buf for t in reads):
            return j
    return None


def _accesses(program: Program, buf, stmts: tuple) -> list[tuple[Expr, ...]] | None:
    """The index tuples of every access of ``buf`` in ``stmts`` (``None`` when one goes through
    a tensor of another shape sharing the buffer: a padded chunk)."""
    out: list[tuple[Expr, ...]] = [tuple(s.index) for s in stores(stmts) if s.buffer is buf]
    for n in dict.fromkeys(n for e in nest_exprs(stmts) for n in walk(e) if n.op is Op.READ):
        if program.buffers.get(n.arg) is buf:
            if tuple(n.arg.shape) != tuple(buf.shape):
                return None
            out.append(tuple(n.src))
    return out


def owned_depth(program: Program, buf, nest: Nest) -> tuple[list[Loop], int]:
    """The loops ``v_0 .. v_{k-1}`` of the nest's perfect prefix and ``k``: for ``j < k`` every access of
    ``buf`` has index ``j`` ``v_j``, and loop ``j`` runs over the whole axis."""
    loops: list[Loop] = []
    stmts = nest.body
    while len(stmts) == 1 and isinstance(stmts[0], Loop) and len(loops) < len(buf.shape):
        loop = stmts[0]
        n = buf.shape[len(loops)]
        if not (loop.lo.op is Op.CONST and loop.lo.arg == 0 and loop.hi.op is Op.CONST
                and loop.hi.arg == n and loop.step == 1):
            break
        loops.append(loop)
        stmts = loop.body
    accesses = _accesses(program, buf, nest.body)
    if not accesses:
        return loops, 0
    return loops, next((j for j, loop in enumerate(loops) if any(idx[j] is not loop.var for idx in accesses)),
                       len(loops))


def fuse_fill(program: Program, fill: Fill, nest: Nest) -> Nest | None:
    """``nest`` with ``fill`` moved into it (each iteration of its owning loops fills its slice first), or
    ``None`` when it owns no slices or shares a loop inside a slice's iteration among threads."""
    buf = fill.buffer
    loops, depth = owned_depth(program, buf, nest)
    if depth == 0:
        return None
    shared = [s for s in walk_stmts(nest.body) if isinstance(s, Loop) and s.kind == "parallel"]
    if any(all(p is not loop for loop in loops[:depth]) for p in shared):
        return None  # (every thread runs the loops outside a deeper parallel loop: each would fill)
    prefix = tuple(loop.var for loop in loops[:depth])
    rest = tuple(var(f"z{d}", 0, n) for d, n in enumerate(buf.shape[depth:], start=depth))
    zero: tuple = (Store(buf, prefix + rest, fill.value, counted=False),)
    for v in reversed(rest):
        zero = (Loop(v, const(0), const(v.arg.hi), zero),)
    inner = loops[depth - 1]
    body: tuple = (dataclasses.replace(inner, body=zero + tuple(inner.body)),)
    for loop in reversed(loops[:depth - 1]):
        body = (dataclasses.replace(loop, body=body),)
    note = "; ".join(x for x in (nest.note, f"fills {buf.name} slice by slice") if x)
    # a plain nest of its own body, a renamed one too (:class:`.loops.shared_nests.RenamedNest`)
    return Nest(nest.name, body, nest.outputs, nest.work, note, nest.parallel, nest.accumulators, nest.attrs,
                nest.temps)

