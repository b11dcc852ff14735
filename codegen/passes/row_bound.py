"""A block of rows run at any count up to its own: the loop program of a generic kernel's block
(:class:`~tensorad.codegen.runtime.rows.RowsKernel`) with every loop over its rows bounded by a row count
it reads when it runs, so a call on ``r`` rows touches rows ``[0, r)`` of its arrays only.

The arrays whose leading axis is the rows (the ``rows`` option: positions among the inputs, then the outputs)
are row buffers; so is any buffer a loop over rows stores along one of its axes (rows on a second axis: a
stacked product's; a store whose position reads a row from data, a scatter's, is along no rows), holding row
``r`` at index ``r``, or, a chunk's buffer (fewer rows than the block: a padded copy made per chunk of the
batch), the rows its last writer stored from the row its index 0 is.  A loop is over rows when its variable
``v`` (or ``v // c``, ``v % c``, rows and another axis scanned as one, each plus a constant) indexes a row
buffer along its rows; its upper bound becomes ``min(hi, count - first)`` (times ``c``), or, for ``v % c`` and
any other index of loop variables, the body of the innermost loop it reads runs where the row is below the
count, the count read from the program's last input (``int64[2]``, which the row driver writes before each
call) and clipped to the block's rows; row 0, which every call runs, may be indexed by the constant.  A matrix
product whose rows, columns, batch or sum has the rows as its first axis runs those of them below the count
(:class:`~..gemm.contraction.RowCount`; its ``C`` is then a row buffer, but for a sum); rows among a stacked
product's batch axes (after the stack's) are made its first batch axis. A sum over the rows (``sums``) may
read the count as the factor of a term (``H[j] * n``, a term that reads no row counted over the rows).  Where
rows are reached otherwise (an index of no loop, a product's other axis, a store along rows on an axis no loop
over rows indexes, a sum over the rows with a term that reads no row buffer, nor the count, nor a temporary
that loops over rows only add to (a fused pass's partial columns, a blocked sum's partial sums), the count
read elsewhere), :class:`RowBoundError` says where."""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Any

from tensorad.simplify.algebra.consts import evaluate_scalar

from tensorad.ir.expr import Expr, Op, binary, compare, const, data_index, logical, var
from tensorad.ir.rewrite import fold, walk
from tensorad.ir.tensor import Tensor

from ..gemm.contraction import Contraction, RowCount, column_block, computes, packed_elements
from ..gemm.descriptor import BATCH, KGROUP, OUTER
from ..loops.work import count_work
from ..program import Assign, Buffer, Fill, If, Loop, Nest, Program, Store, nest_exprs, stmt_exprs, walk_stmts

EVALUATED = 1 << 12  # the most points of a loop whose index along rows is matched point by point


class RowBoundError(ValueError):
    """A loop program whose rows do not all take a runtime count (the message says where)."""


def finished_epilogues(program: Program, finished: tuple[int, ...], once: set[int] | None = None) -> Program:
    """``program`` with the epilogues of its finished sums as bookkeeping, as a fused epilogue is: of each
    input at a position of ``finished`` (a sum over a generic kernel's rows that an earlier stage finished),
    the stores that alone read it, each at its own index into a buffer of its shape (an elementwise tensor
    of the sum, as batch norm's ``1 / sqrt(var + eps)``), where they run once: in a nest of ``once`` (ids,
    a part's first block; ``None``: any nest).  The static program computes it as the sum's epilogue."""
    readers: dict[Tensor, list] = {program.inputs[k].tensor: [] for k in finished}
    for nest in (s for s in program.steps if isinstance(s, Nest)):
        for st in walk_stmts(nest.body):
            for t in {n.arg for e in stmt_exprs(st) for n in walk(e) if n.op is Op.READ and n.arg in readers}:
                readers[t].append((st, nest))

    def own(st, t: Tensor) -> bool:  # (a store of t's shape that reads t at its own index only)
        return st.buffer.shape == tuple(t.shape) and not any(n.arg is t for e in st.index for n in walk(e)) \
            and all(n.arg is not t or all(a is b for a, b in zip(n.src, st.index, strict=True))
                    for n in walk(st.value) if n.op is Op.READ)
    marked = {id(st) for t, reads in readers.items()
              if len({id(getattr(st, "buffer", st)) for st, _ in reads}) == 1
              and all(isinstance(st, Store) and st.counted and nest.attrs.gemm is None and own(st, t)
                      and (once is None or id(nest) in once) for st, nest in reads) for st, _ in reads}

    def mark(stmts: tuple) -> tuple:
        return tuple(replace(s, body=mark(s.body)) if isinstance(s, Loop) else
                     replace(s, then=mark(s.then), orelse=mark(s.orelse)) if isinstance(s, If) else
                     replace(s, counted=False) if id(s) in marked else s for s in stmts)
    return replace(program, steps=[
        replace(s, body=mark(s.body), work=count_work(mark(s.body)),
                note="; ".join(x for x in (s.note, "epilogue of a finished sum") if x))
        if isinstance(s, Nest) and any(id(st) in marked for st in walk_stmts(s.body)) else s
        for s in program.steps])


def bound_rows(program: Program, carriers: tuple[int, ...], sums: tuple[int, ...] = (),
               finished: tuple[int, ...] = ()) -> Program:
    """``program`` with its loops over rows bounded by a runtime count (see the module docstring): its last
    input, ``int64[2]``.  ``sums``: the positions among the outputs of sums over the rows, each of which
    must add its terms under a loop over rows, or count them by the count; ``finished``: of the inputs,
    sums an earlier stage finished, whose epilogues its first block runs (:func:`finished_epilogues`)."""
    args = program.inputs + program.outputs
    extent = args[carriers[0]].shape[0]
    count = program.inputs[-1] if program.inputs else None
    if count is None or (count.shape, count.dtype) != ((2,), "int64") \
            or any(args[k] is count for k in carriers):
        raise ValueError("bound_rows: the last input must be the count of rows and a first block's flag")
    rows = _Rows(extent, {id(args[k]): (args[k], 0) for k in carriers})
    steps = list(program.steps)
    while True:  # (a buffer stored along rows is a row buffer: to a fixed point)
        known = (len(rows.axis), len(rows.vars), len(rows.products), len(rows.guarded))
        rows.offsets.clear()  # (a chunk's buffer holds the rows its last writer stored, in program order)
        steps = [_filled(s, rows.axis[id(s.buffer)][1]) if isinstance(s, Fill) and rows.full(s.buffer)
                 else s for s in steps]
        for step in steps:
            if isinstance(step, Nest) and step.attrs.gemm is not None:
                _scan_product(step, program.buffers, rows)
            elif isinstance(step, Nest):
                _scan(step, program.buffers, rows)
        if (len(rows.axis), len(rows.vars), len(rows.products), len(rows.guarded)) == known:
            break
    for step in steps:  # (a loop over the rows that is also another axis of a row buffer, as a pass over the
        # rows of a block of 8 fused with a column sum over 8 features: a count would cut that axis short)
        for buf, index in _accesses(step, program.buffers) if isinstance(step, Nest) else ():
            axis = rows.axis.get(id(buf), (None, None))[1]
            if axis is not None and (v := next((i for k, i in enumerate(index) if k != axis and i in rows.vars
                                                and rows.vars[i][0] is i), None)) is not None:
                raise RowBoundError(f"nest {step.name}: loop {v.name} runs the rows and another axis of "
                                    f"{buf.name}")
    summed = {id(program.outputs[k]) for k in sums}
    under = {**rows.vars, **rows.guards, **dict.fromkeys(rows.guarded)}  # (a product runs the count)
    partial = _partial_sums(steps, under, rows)
    for step in steps if extent > 1 else ():  # (a block of one row has no loop over rows: its count is 1)
        if isinstance(step, Nest) and id(step) in rows.products:
            if any(n.op is Op.READ and n.arg is count.tensor for e in _product_exprs(step.attrs.gemm)
                   for n in walk(e)):
                raise RowBoundError(f"nest {step.name}: a matrix product reads the count of rows")
        elif isinstance(step, Nest) and not _sums_under_rows(step.body, summed, under, count.tensor, partial):
            raise RowBoundError(f"nest {step.name}: a sum over the rows with terms that read no row buffer, "
                                f"or the count of rows other than as a sum's count")
    bound = data_index(count.tensor(0), extent + 1, "clip")
    row_work = sum(_row_work(s, rows) for s in steps if isinstance(s, Nest))
    once = _once(steps, program, rows, summed)
    if finished:
        marked = finished_epilogues(replace(program, steps=steps), finished, once).steps
        once = {id(m) for s, m in zip(steps, marked) if id(s) in once}
        steps = marked
    once_work = sum(s.work for s in steps if id(s) in once and isinstance(s, Nest))
    steps = [_nest(n := _filled(s, 0) if isinstance(s, Fill) else s, n.body,
                   replace(n.attrs, first_block=True)) if id(s) in once
             else s if isinstance(s, Fill) else _bounded_nest(s, rows, bound) for s in steps]
    return replace(program, steps=steps, row_work=row_work, once_work=once_work)


def _once(steps: list, program: Program, rows: _Rows, summed: set[int]) -> set[int]:
    """The steps a part runs in its first block of a call only, whose stores later blocks read as they are:
    nests (serial, parallel or products) touching no row buffer, sum over the rows or count (a max pool's
    count of windows over each position, a batch norm's mean of channel sums, a Winograd transform of the
    weights) nor what other nests store, and their fills."""
    def stored(s: Nest) -> set[int]:  # (a product's C or its epilogue's consumer too)
        spec = s.attrs.gemm
        c = spec and (Tensor(spec.epilogue.consumer, 0) if spec.epilogue else spec.c)
        return {id(b) for b, _ in _accesses(s, program.buffers, reads=False)} | \
            ({id(program.buffers.get(c))} if c else set())
    touched = {id(s): {id(b) for b, _ in _accesses(s, program.buffers)} | stored(s) | {
        id(program.buffers.get(n.arg)) for e in (_product_exprs(s.attrs.gemm) if s.attrs.gemm else ())
        for n in walk(e) if n.op is Op.READ} if isinstance(s, Nest) else {id(s.buffer)} for s in steps}
    rowed = {id(None), id(program.inputs[-1]), *rows.axis, *summed}  # (and reads of no buffer)
    once, kept = None, {id(s) for s in steps if isinstance(s, Nest) and not touched[id(s)] & rowed}
    while kept != once:  # (a buffer that a nest run in every block stores is read as each block leaves it)
        once, every = kept, {b for s in steps if isinstance(s, Nest) and id(s) not in kept for b in stored(s)}
        kept = {k for k in once if not touched[k] & every}
    return once | {id(s) for s in steps if isinstance(s, Fill) and any(id(s.buffer) in touched[k]
                                                                   for k in once)}


def _row_work(nest: Nest, rows: _Rows) -> int:
    """The work of ``nest`` a call runs once per row below the count: that of a product over rows, but
    for the packing of its side without rows; of any other nest, its work less its work at no rows (the
    mean of a batch norm's block, stored once per channel, runs at every count)."""
    if id(nest) in rows.products:
        spec = nest.attrs.gemm
        return nest.work - (packed_elements(spec)[1] * computes(spec.b) if rows.products[id(nest)][0] == OUTER
                            else 0)
    if not any(isinstance(s, Loop) and (s.var in rows.vars or s.var in rows.guards)
               for s in walk_stmts(nest.body)):
        return 0
    return count_work(nest.body) - count_work(_bounded(nest.body, rows, const(0, "int64")))


class _Rows:
    """What :func:`bound_rows` knows of a program's rows: each row buffer's axis of rows, the rows a
    chunk's buffer (fewer rows than the block) holds now, each loop over rows and each product over them."""

    def __init__(self, extent: int, axis: dict[int, tuple[Buffer, int]]) -> None:
        self.extent, self.axis = extent, axis  # id(buffer) -> (buffer, its axis of rows)
        self.offsets: dict[int, int] = {}  # id(a chunk's buffer) -> the row its first holds
        self.vars: dict[Expr, tuple[Expr, int]] = {}  # loop variable v -> (v, v // c or v % c; row at 0)
        self.products: dict[int, tuple[int, int, Expr]] = {}  # id(nest) -> (group, first row, axis)
        self.guards: dict[Expr, set[tuple[Expr, int]]] = {}  # loop variable -> rows its body runs below
        self.guarded: set[Expr] = set()  # the loop variables those rows read

    def full(self, buf: Buffer) -> bool:
        found = self.axis.get(id(buf))
        return found is not None and buf.shape[found[1]] == self.extent

    def at(self, buf: Buffer, index: tuple) -> tuple[Expr, int] | None:
        """``(index along the rows, the row its 0 is)`` of an access of a row buffer, else ``None``."""
        found = self.axis.get(id(buf))
        return None if found is None or not index else (index[found[1]], self.offsets.get(id(buf), 0))


def _first_row(index: Expr, first: int) -> bool:
    """Whether ``index`` is row 0 of the block, which every call runs, where index 0 is row ``first``."""
    return index.op is Op.CONST and index.arg + first == 0


def _filled(fill: Fill, axis: int) -> Nest:
    """A fill of a row buffer (its rows along ``axis``) as a loop nest (whose loop over rows can then be
    bounded)."""
    buf = fill.buffer
    index = tuple(var(f"f{d}", 0, n) for d, n in enumerate(buf.shape))
    body: tuple = (Store(buf, index, fill.value, counted=False),)
    for v, n in reversed(list(zip(index, buf.shape))):
        body = (Loop(v, const(0), const(n), body),)
    return Nest(f"fill_{buf.name}", body, (buf,))


def _scan(nest: Nest, buffers: dict, rows: _Rows) -> None:
    """Marks the loops over rows of ``nest`` and the buffers it stores along them; an index along rows of
    another form guards the body of the innermost loop it reads; raises where rows are reached otherwise."""
    depth = {s.var: d for s, d in _loops(nest.body, 0)}
    bounds = {s.var: (s.lo.arg, s.hi.arg) if s.lo.op is Op.CONST and s.hi.op is Op.CONST else None
              for s, _ in _loops(nest.body, 0)}
    reads, stores = _accesses(nest, buffers, stores=False), _accesses(nest, buffers, reads=False)
    for buf, index in reads + [(b, i) for b, i in stores if rows.full(b)]:  # (a chunk's: rows its store says)
        found = rows.at(buf, index) if buf is not None else None
        if found is None or _first_row(*found):
            continue
        row = _row_expr(found[0], bounds)
        mark = None if row is None else (row[1], row[2] + found[1])
        known = rows.vars.setdefault(row[0], mark) if mark is not None else None
        if known is None or known[0] is not mark[0] or known[1] != mark[1]:
            free = [n for n in walk(found[0]) if n in depth]
            if not free:
                raise RowBoundError(f"nest {nest.name}: {buf.name} is indexed along its rows by {found[0]}, "
                                    f"not by a loop")
            rows.guards.setdefault(max(free, key=depth.__getitem__), set()).add(found)
            rows.guarded.update(free)
    for buf, index in stores:  # (a row read from data, a scatter's, stores along no rows)
        if not rows.full(buf) and any(n in rows.vars or n in rows.guarded
                                      for i in index for n in _indexing(i)):
            _stored(nest.name, buf, index, bounds, rows)


def _accesses(nest: Nest, buffers: dict, reads: bool = True, stores: bool = True) -> list[tuple[Any, tuple]]:
    """``(buffer, index)`` of each read (``None``: of no buffer) and store of ``nest``."""
    return [(buffers.get(n.arg), n.src) for e in (nest_exprs(nest.body) if reads else ()) for n in walk(e)
            if n.op is Op.READ] + [(s.buffer, s.index) for s in (walk_stmts(nest.body) if stores else ())
                                   if isinstance(s, Store)]


def _indexing(e: Expr) -> list[Expr]:
    """The nodes of ``e`` outside its reads of data (the terms of a position, not the data it reads)."""
    if e.op is Op.READ:
        return [e]
    return [e, *(n for s in e.src for n in _indexing(s))]


def _loops(stmts: tuple, d: int):
    """Each loop among ``stmts`` (inside their loops and ifs too) and its depth."""
    for s in stmts:
        if isinstance(s, Loop):
            yield s, d
            yield from _loops(s.body, d + 1)
        elif isinstance(s, If):
            yield from _loops(s.then + s.orelse, d)


def _stored(nest: str, buf: Buffer, index: tuple, loops: dict, rows: _Rows) -> None:
    """Records a store along rows: a new row buffer (its rows along the one axis indexed by a loop over
    rows), a full one's rows at their own index, a chunk's (fewer rows than the block) from the row its
    index 0 is."""
    at = {k: row for k, i in enumerate(index) if (row := _row_expr(i, loops)) is not None
          and rows.vars.get(row[0], (None,))[0] is row[1]}
    guarded = {e: first for found in rows.guards.values() for e, first in found}
    at.update({k: (None, i, 0) for k, i in enumerate(index) if k not in at and i in guarded})
    known = rows.axis.get(id(buf))
    axis = known[1] if known is not None else next(iter(at)) if len(at) == 1 else None
    if axis not in at:
        raise RowBoundError(f"nest {nest}: {buf.name} is stored along the rows on its axes "
                            f"{[k for k, i in enumerate(index) if any(n in rows.vars for n in walk(i))]}")
    row = at[axis]
    first = guarded[row[1]] if row[0] is None else rows.vars[row[0]][1] - row[2]
    rows.axis[id(buf)] = (buf, axis)
    if buf.shape[axis] < rows.extent:
        rows.offsets[id(buf)] = first
    elif first:
        raise RowBoundError(f"nest {nest}: {buf.name} is stored along the rows {first} rows off")


def _under_rows(stmts: tuple, row_vars: dict[Expr, int], under: bool = False):
    """Each statement among ``stmts`` and inside them, before its body, with whether a loop over rows
    holds it."""
    for s in stmts:
        yield s, under
        if isinstance(s, Loop):
            yield from _under_rows(s.body, row_vars, under or s.var in row_vars)
        elif isinstance(s, If):
            yield from _under_rows(s.then + s.orelse, row_vars, under)


def _partial_sums(steps: list, row_vars: dict[Expr, int], rows) -> set[Tensor]:
    """The temporaries (no row buffer) holding sums over the rows: that only loops over rows store to, each
    store adding to its element (a fused pass's partial columns); a product's ``C`` over rows as its sum (no
    epilogue); those zero filled whose stores map such sums linearly (a Winograd output transform)."""
    nests = [step for step in steps if isinstance(step, Nest)]
    stored: dict[int, tuple[Tensor, list]] = {}  # id(temporary) -> (its tensor, (value, adds to itself)...)
    for s, under in (pair for nest in nests for pair in _under_rows(nest.body, row_vars)):
        if isinstance(s, Store) and (b := s.buffer).kind == "temp" and id(b) not in rows.axis:
            adds = under and s.value.op is Op.ADD and Expr(Op.READ, b.dtype, s.index, b.tensor) in s.value.src
            stored.setdefault(id(b), (b.tensor, []))[1].append((s.value, adds))
    partial = {t for t, stores in stored.values() if all(adds for _, adds in stores)}
    partial |= {n.attrs.gemm.c for n in nests if rows.products.get(id(n), (0,))[0] == KGROUP
                and n.attrs.gemm.epilogue is None}
    filled = {id(f.buffer) for f in steps if type(f) is Fill and (f.value.op, f.value.arg) != (Op.CONST, 0)}
    while grown := [t for k, (t, stores) in stored.items() if t not in partial and k not in filled and all(
            _from(v, {n for n in walk(v) if n.op is Op.READ and n.arg in partial}) for v, _ in stores)]:
        partial.update(grown)
    return partial


def _sums_under_rows(body: tuple, summed: set[int], row_vars: dict[Expr, int], count: Tensor,
                     partial: set[Tensor] = frozenset()) -> bool:
    """Whether every store of ``body`` to a sum over the rows (``summed``) runs under a loop over rows or
    stores a value that each of its terms takes from accumulators only such loops add to, from ``partial``
    sums (:func:`_partial_sums`), or from the ``count`` of rows as a factor (a constant, an initial value,
    aside), and the count is read nowhere else: a term without one (``H * 8`` of ``sum_i H * (X[i] + 1)``, its
    count factored out at the block's rows) counts the block's rows, not the call's."""
    flagged = list(_under_rows(body, row_vars))
    linear = {n for e in nest_exprs(body) for n in walk(e) if n.op is Op.READ and n.arg in partial}
    added = [(t, under or v.op is Op.ADD and t in v.src and _from(v, linear | {t}))  # (a sum of partial sums)
             for s, under in flagged if type(s) is Assign and s.counted for t, v in zip(s.targets, s.values)]
    outside = {t for t, under in added if not under}
    inside = {t for t, under in added if under}
    for s, _ in flagged:  # (a blocked sum's partial sums added into its total: ``acc = acc + acc.0``)
        if isinstance(s, Assign) and not s.counted:
            inside |= {t for t, v in zip(s.targets, s.values)
                       if t not in outside and v.op is Op.ADD and t in v.src and _from(v, inside | {t})}
    counts = {n for e in nest_exprs(body) for n in walk(e) if n.op is Op.READ and n.arg is count}
    inside |= {n for s, _ in flagged if isinstance(s, Store) for n in walk(s.value)
               if n.op is Op.READ and n.arg in partial}
    for s, under in flagged:
        if isinstance(s, Store) and id(s.buffer) in summed and not under and s.value.op is not Op.CONST:
            accs = {n for n in walk(s.value) if n in inside or n in outside}
            if accs & outside or not _from(s.value, inside | counts) or _degree(s.value, counts) > 1:
                return False
        elif counts and any(n in counts for e in stmt_exprs(s) for n in walk(e)):
            return False  # (the count read other than by a sum's store)
    return True


def _from(e: Expr, accs: set) -> bool:
    """Whether every term of ``e`` is a factor or quotient of one of ``accs``, so that ``e`` adds nothing
    where they are zero."""
    if e in accs:
        return True
    if e.op in (Op.ADD, Op.SUB, Op.SELECT, Op.IF_THEN_ELSE):
        return all(_from(a, accs) for a in e.src[e.op in (Op.SELECT, Op.IF_THEN_ELSE):])
    if e.op is Op.MUL:
        return any(_from(a, accs) for a in e.src)
    return e.op in (Op.NEG, Op.CAST, Op.DIV) and _from(e.src[0], accs)


def _degree(e: Expr, counts: set) -> float:
    """The degree of ``e`` as a polynomial in the reads ``counts`` (infinite where it is none)."""
    def visit(n: Expr, *kids: float) -> float:
        if n in counts:
            return 1
        if n.op in (Op.ADD, Op.SUB, Op.NEG, Op.CAST):
            return max(kids, default=0)
        if n.op is Op.MUL:
            return sum(kids)
        if n.op is Op.DIV:
            return kids[0] if not kids[1] else math.inf
        if n.op in (Op.SELECT, Op.IF_THEN_ELSE):
            return max(kids[1:]) if not kids[0] else math.inf
        return 0 if not any(kids) else math.inf
    return fold(e, visit)


def _row_expr(index: Expr, loops: dict) -> tuple[Expr, Expr, int] | None:
    """``(v, g, o)`` where ``index`` is ``g + o``, ``g`` the loop variable ``v``, ``v // c`` or ``v % c`` (a
    loop over rows and another axis as one, :mod:`..loops.coalesce`) and ``o`` a constant: as written, or
    at each point of ``v``'s loop (``loops``: each loop variable's ``(lo, hi)`` where constant)."""
    o = 0
    if index.op in (Op.ADD, Op.SUB) and index.src[1].op is Op.CONST and isinstance(index.src[1].arg, int):
        index, o = index.src[0], index.src[1].arg * (1 if index.op is Op.ADD else -1)
    if index in loops:
        return index, index, o
    if index.op in (Op.FLOORDIV, Op.MOD) and index.src[0] in loops and index.src[1].op is Op.CONST \
            and index.src[1].arg > 0:
        return index.src[0], index, o
    free = {n for n in walk(index) if n in loops}
    v = free.pop() if len(free) == 1 else None
    lo, hi = loops.get(v) or (0, 0)
    if not 1 < hi - lo <= EVALUATED:  # (one loop of known, few points: its values name the form)
        return None
    at = [evaluate_scalar(index, {v: x}) + o for x in range(lo, hi)]
    steps = [k for k in range(1, len(at)) if at[k] != at[0]]
    repeats = [k for k in range(1, len(at)) if at[k] == at[0]]
    for g in (v, binary(Op.FLOORDIV, v, const(steps[0] if steps else 1, v.dtype)),
              binary(Op.MOD, v, const(repeats[0] if repeats else 1, v.dtype))):
        first = at[0] - evaluate_scalar(g, {v: lo})
        if all(evaluate_scalar(g, {v: x}) + first == y for x, y in zip(range(lo, hi), at)):
            return v, g, first
    return None


def _scan_product(nest: Nest, buffers: dict, rows: _Rows) -> None:
    """Records the group of the product of ``nest`` whose first axis indexes its row buffers, and the row
    its first point is (and marks its ``C`` a row buffer, but for a sum over the rows); raises where
    another axis does."""
    s: Contraction = nest.attrs.gemm
    c = Tensor(s.epilogue.consumer, 0) if s.epilogue is not None else s.c
    exprs = _product_exprs(s)
    axes = dict.fromkeys(s.batch + s.m + s.n + s.k)
    accesses = [(buffers.get(n.arg), n.src) for e in exprs for n in walk(e) if n.op is Op.READ]
    if rows.full(buffers[c]):
        accesses.append((buffers[c], s.c_at))
    found: dict = {}
    for buf, index in accesses:
        at = rows.at(buf, index) if buf is not None else None
        if at is not None and not _first_row(*at):
            row = _row_expr(at[0], axes)
            mark = (row[0], row[2] + at[1]) if row is not None and row[0] is row[1] else (None, 0)
            found[id(mark[0]), mark[1]] = mark
    if not found:
        return
    axis, first = found.popitem()[1] if len(found) == 1 else (None, 0)  # (one axis, one first row)
    firsts = [axis if axis in s.batch else None, *(group[0] if group else None for group in (s.m, s.k, s.n))]
    if axis is None or axis not in firsts:
        raise RowBoundError(f"nest {nest.name}: a matrix product reaches the rows other than as the first "
                            f"axis of its batch, rows, columns or sum")
    group = firsts.index(axis)
    if group != KGROUP:  # (C is stored along the rows)
        rows.vars[axis] = (axis, first)
        _stored(nest.name, buffers[c], s.c_at, axes, rows)
    rows.products[id(nest)] = (group, first, axis)


def _product_exprs(s: Contraction) -> list[Expr]:
    """The expressions a product reads: its sides, its exact term, its epilogue."""
    exprs = [s.a, s.b, *([s.exact] if s.exact is not None else [])]
    return exprs + ([s.epilogue.apply(s.c_at, var("value", dtype=s.dtype))] if s.epilogue is not None else [])


def _bounded_nest(nest: Nest, rows: _Rows, bound: Expr) -> Nest:
    if id(nest) in rows.products:
        group, first, axis = rows.products[id(nest)]
        count = bound  # (the product's points along the rows: those below the count)
        if first + axis.lo or axis.extent != rows.extent:
            count = binary(Op.MAXIMUM, binary(Op.MINIMUM, bound - const(first + axis.lo, bound.dtype),
                                              const(axis.extent, bound.dtype)), const(0, bound.dtype))
        spec = nest.attrs.gemm
        if spec.row_parts > 1:  # (parts of a fixed count of rows: the columns in blocks again)
            spec = replace(spec, row_parts=1, nc=column_block(spec.N, spec.batches, spec.nr))
        spec = replace(spec, rows=RowCount(group, count))
        if group == BATCH:  # (the rows first among the batch axes: the points below the count lead)
            spec = replace(spec, batch=(axis, *(a for a in spec.batch if a is not axis)))
        return _nest(nest, nest.body, replace(nest.attrs, gemm=spec, range=(0, spec.blocks, 1)))
    return _nest(nest, _bounded(nest.body, rows, bound), nest.attrs)


def _nest(nest: Nest, body: tuple, attrs) -> Nest:
    """A plain nest of ``nest``'s fields (a renamed twin's body as it reads), with ``body`` and ``attrs``."""
    return Nest(nest.name, body, nest.outputs, nest.work, nest.note, nest.parallel, nest.accumulators, attrs,
                nest.temps)


def _below(row: Expr, first: int, bound: Expr) -> Expr:
    """``row + first < bound``: an index along rows whose 0 is row ``first`` below the count."""
    return compare(Op.LT, row, bound - const(first, bound.dtype) if first else bound)


def _guarded(body: tuple, conds: list[tuple[Expr, Expr]], affine: bool) -> tuple:
    """``body`` with each run of its statements under the tests of ``conds`` (``(index along rows, its test
    against the count)``) whose rows they reach, a loop or if whose parts reach different rows tested inside
    it: a statement on a row within the count, fused beside one on a row past it, still runs."""
    def tests(s) -> list[Expr]:
        seen = {n for e in nest_exprs((s,)) for n in walk(e)}
        return [test for row, test in conds if row in seen]

    out: list = []
    for s in body:
        mine = tests(s)
        parts = s.body if isinstance(s, Loop) else s.then + s.orelse if isinstance(s, If) else ()
        own = {n for e in stmt_exprs(s) for n in walk(e)} if parts else set()  # (a loop's bounds, a test)
        if mine and parts and not own & {row for row, _ in conds} and any(tests(x) != mine for x in parts):
            inside = functools.partial(_guarded, conds=conds, affine=affine)
            s, mine = (replace(s, body=inside(s.body)) if isinstance(s, Loop) else
                       replace(s, then=inside(s.then), orelse=inside(s.orelse))), []
        last = out[-1] if out else None
        if mine and isinstance(last, tuple) and last[0] == mine:
            last[1].append(s)
        else:
            out.append((mine, [s]) if mine else s)
    return tuple(If(functools.reduce(lambda a, b: logical(Op.AND, a, b), x[0]), tuple(x[1]), affine=affine)
                 if isinstance(x, tuple) else x for x in out)


def _bounded(stmts: tuple, rows: _Rows, bound: Expr, enclosing: frozenset = frozenset()) -> tuple:
    """(A guard goes on the innermost of its loops where they enclose it: a variable's loops lie at several
    depths, a blocked sum's and its remainder's.)"""
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            inner = enclosing | {s.var}
            row, first = rows.vars.get(s.var, (None, 0))
            hi, body = s.hi, _bounded(s.body, rows, bound, inner)
            count = bound - const(first, bound.dtype) if first else bound  # (rows from the loop's 0)
            conds = [(row, _below(row, first, bound))] if row is not None and row.op is Op.MOD else []
            guards = {g for found in rows.guards.values() for g in found
                      if s.var in (free := {n for n in walk(g[0]) if n.op is Op.VAR}) and free <= inner}
            conds += [(e, _below(e, f, bound)) for e, f in sorted(guards, key=str)]
            body = _guarded(body, conds, bound.op is Op.CONST)
            if row is not None and row.op is not Op.MOD:
                hi = binary(Op.MINIMUM, s.hi, count if row is s.var else binary(Op.MUL, count, row.src[1]))
            out.append(replace(s, hi=hi, body=body))
        elif isinstance(s, If):
            out.append(replace(s, then=_bounded(s.then, rows, bound, enclosing),
                               orelse=_bounded(s.orelse, rows, bound, enclosing)))
        else:
            out.append(s)
    return tuple(out)
