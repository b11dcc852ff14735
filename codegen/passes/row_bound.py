"""A block of rows run at any count up to its own: the loop program of a generic kernel's block
(:class:`~tensorad.codegen.runtime.rows.RowsKernel`) with every loop over its rows bounded by a row count
it reads when it runs, so a call on ``r`` rows touches rows ``[0, r)`` of its arrays only.

The arrays whose leading axis is the rows (the ``rows`` option: positions among the inputs, then the
outputs) are row buffers; so is any buffer a loop over rows stores along its leading axis.  A loop is over
rows when its variable ``v`` (or ``v // c``, rows and another axis scanned as one) indexes a row buffer
along its leading axis; its upper bound becomes
``min(hi, count)``, the count read from the program's last temporary (``int64[1]``, which the row driver
writes before each call) and clipped to the block's rows; row 0, which every call runs, may be indexed
by the constant.  A matrix product whose rows, batch or sum has the rows as its first axis runs that
many of them (:class:`~..gemm.contraction.RowCount`; its ``C`` is then a row buffer, but for a sum).
Where rows are reached otherwise (an index that is not one loop variable, a product's other axis, a
loop over rows storing across another buffer's other axes, a sum over the rows, ``sums``, with a term that
reads no row buffer (a count of the block's rows)), :class:`RowBoundError` says where."""

from __future__ import annotations

from dataclasses import replace

from tensorad.ir.expr import Expr, Op, binary, const, data_index, var
from tensorad.ir.rewrite import walk
from tensorad.ir.tensor import Tensor
from tensorad.lang import placeholder

from ..gemm.contraction import Contraction, RowCount
from ..gemm.descriptor import KGROUP
from ..program import Assign, Buffer, Fill, If, Loop, Nest, Program, Store, nest_exprs, walk_stmts


class RowBoundError(ValueError):
    """A loop program whose rows do not all take a runtime count (the message says where)."""


def bound_rows(program: Program, carriers: tuple[int, ...], sums: tuple[int, ...] = ()) -> Program:
    """``program`` with its loops over rows bounded by a runtime count (see the module docstring); the
    count's buffer is its last temporary.  ``sums``: the positions among the outputs of sums over the
    rows, each of which must add its terms under a loop over rows."""
    args = program.inputs + program.outputs
    rows = {id(args[k]): args[k] for k in carriers}
    extent = args[carriers[0]].shape[0]
    steps = list(program.steps)
    row_vars: dict[Expr, int] = {}  # a loop over rows: its steps per row
    groups: dict[int, int] = {}  # id(a product's nest) -> the group of its axes the rows are first of
    while True:  # (a buffer stored along rows is a row buffer: to a fixed point)
        known = (len(rows), len(row_vars), len(groups))
        steps = [_filled(s) if isinstance(s, Fill) and id(s.buffer) in rows else s for s in steps]
        for step in steps:
            if isinstance(step, Nest) and step.attrs.gemm is not None:
                _scan_product(step, program.buffers, rows, groups, extent)
            elif isinstance(step, Nest):
                _scan(step, program.buffers, rows, row_vars, extent)
        if (len(rows), len(row_vars), len(groups)) == known:
            break
    summed = {id(program.outputs[k]) for k in sums}
    for step in steps if extent > 1 else ():  # (a block of one row has no loop over rows)
        if isinstance(step, Nest) and id(step) not in groups \
                and not _sums_under_rows(step.body, summed, row_vars):  # (a product runs the count)
            raise RowBoundError(f"nest {step.name}: a sum over the rows with terms that read no row buffer")
    count_tensor = placeholder((1,), "int64", name="rows")
    count = Buffer("rows", (1,), "int64", "temp", count_tensor)
    bound = data_index(count_tensor(0), extent + 1, "clip")
    steps = [s if isinstance(s, Fill) else _bounded_nest(s, row_vars, bound, groups) for s in steps]
    return replace(program, temps=[*program.temps, count], steps=steps,
                   buffers={**program.buffers, count_tensor: count})


def _is_zero(e: Expr) -> bool:
    return e.op is Op.CONST and e.arg == 0


def _filled(fill: Fill) -> Nest:
    """A fill of a row buffer as a loop nest (whose loop over rows can then be bounded)."""
    buf = fill.buffer
    index = tuple(var(f"f{d}", 0, n) for d, n in enumerate(buf.shape))
    body: tuple = (Store(buf, index, fill.value, counted=False),)
    for v, n in reversed(list(zip(index, buf.shape))):
        body = (Loop(v, const(0), const(n), body),)
    return Nest(f"fill_{buf.name}", body, (buf,))


def _scan(nest: Nest, buffers: dict, rows: dict, row_vars: dict[Expr, int], extent: int) -> None:
    """Marks the loops over rows of ``nest`` and the buffers it stores along them; raises where rows are
    reached otherwise."""
    loops = {s.var for s in walk_stmts(nest.body) if isinstance(s, Loop)}
    reads = [(buffers.get(n.arg), n.src) for e in nest_exprs(nest.body) for n in walk(e) if n.op is Op.READ]
    stores = [(s.buffer, s.index) for s in walk_stmts(nest.body) if isinstance(s, Store)]
    for buf, index in reads + stores:
        if buf is not None and id(buf) in rows:
            if index and _is_zero(index[0]):  # (a block runs at least one row)
                continue
            found = _row_var(index[0], loops) if index else None
            if found is None or row_vars.get(found[0], found[1]) != found[1]:
                raise RowBoundError(f"nest {nest.name}: {buf.name} is indexed along its rows by "
                                    f"{index[0] if index else 'nothing'}, not by one loop")
            row_vars[found[0]] = found[1]
    for buf, index in stores:
        along = [k for k, i in enumerate(index) if any(n in row_vars for n in walk(i))]
        if along and id(buf) not in rows:
            found = _row_var(index[0], loops)
            if found is None or row_vars.get(found[0]) != found[1] or buf.shape[0] != extent:
                raise RowBoundError(f"nest {nest.name}: {buf.name} is stored along the rows on its axes "
                                    f"{along}")
            rows[id(buf)] = buf


def _sums_under_rows(body: tuple, summed: set[int], row_vars: dict[Expr, int]) -> bool:
    """Whether every store of ``body`` to a sum over the rows (``summed``) runs under a loop over rows
    or stores a value that each of its terms takes from accumulators only such loops add to (a constant,
    an initial value, aside): a term without one (``H * 8`` of ``sum_i H * (X[i] + 1)``, its count
    factored out at the block's rows) counts the block's rows, not the call's."""
    flagged: list = []  # (statement, under a loop over rows)

    def visit(stmts: tuple, under: bool) -> None:
        for s in stmts:
            flagged.append((s, under))
            if isinstance(s, Loop):
                visit(s.body, under or s.var in row_vars)
            elif isinstance(s, If):
                visit(s.then + s.orelse, under)
    visit(body, False)
    added = [(t, under) for s, under in flagged if isinstance(s, Assign) and s.counted for t in s.targets]
    outside = {t for t, under in added if not under}
    inside = {t for t, under in added if under}
    for s, under in flagged:
        if isinstance(s, Store) and id(s.buffer) in summed and not under and s.value.op is not Op.CONST:
            accs = {n for n in walk(s.value) if n in inside or n in outside}
            if accs & outside or not _from(s.value, inside):
                return False
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


def _row_var(index: Expr, loops: set[Expr]) -> tuple[Expr, int] | None:
    """``(v, c)`` where ``index`` is the loop variable ``v`` (``c`` 1) or ``v // c`` (a loop over rows and
    another axis as one, :mod:`..loops.coalesce`)."""
    if index in loops:
        return index, 1
    if index.op is Op.FLOORDIV and index.src[0] in loops and index.src[1].op is Op.CONST \
            and index.src[1].arg > 0:
        return index.src[0], int(index.src[1].arg)
    return None


def _scan_product(nest: Nest, buffers: dict, rows: dict, groups: dict[int, int], extent: int) -> None:
    """Records in ``groups`` the group of the product of ``nest`` whose first axis indexes its row
    buffers (and marks its ``C`` a row buffer, but for a sum over the rows); raises where another does."""
    s: Contraction = nest.attrs.gemm
    c = Tensor(s.epilogue.consumer, 0) if s.epilogue is not None else s.c
    exprs = [s.a, s.b, *([s.exact] if s.exact is not None else [])]
    if s.epilogue is not None:
        exprs.append(s.epilogue.apply(s.c_at, var("value", dtype=s.dtype)))
    found = {n.src[0] for e in exprs for n in walk(e) if n.op is Op.READ and id(buffers.get(n.arg)) in rows}
    found |= {s.c_at[0]} if id(buffers.get(c)) in rows else set()
    found = {i for i in found if not _is_zero(i)}  # (a block runs at least one row)
    firsts = [axes[0] if axes else None for axes in (s.batch, s.m, s.k)]
    if not found:
        return
    axis = found.pop() if len(found) == 1 else None
    if axis not in firsts or axis.lo != 0 or axis.extent != extent:
        raise RowBoundError(f"nest {nest.name}: a matrix product reaches the rows other than as the first "
                            f"axis of its batch, rows or sum")
    group = firsts.index(axis)
    if group != KGROUP:  # (C is stored along the rows)
        if s.c_at[0] is not axis or buffers[c].shape[0] != extent:
            raise RowBoundError(f"nest {nest.name}: {c.name} is stored along the rows on another axis")
        rows[id(buffers[c])] = buffers[c]
    groups[id(nest)] = group


def _bounded_nest(nest: Nest, row_vars: dict[Expr, int], bound: Expr, groups: dict[int, int]) -> Nest:
    if id(nest) in groups:
        spec = replace(nest.attrs.gemm, rows=RowCount(groups[id(nest)], bound))
        return replace(nest, attrs=replace(nest.attrs, gemm=spec))
    return replace(nest, body=_bounded(nest.body, row_vars, bound))


def _bounded(stmts: tuple, row_vars: dict[Expr, int], bound: Expr) -> tuple:
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            scale = row_vars.get(s.var)
            hi = s.hi if scale is None else binary(Op.MINIMUM, s.hi, bound if scale == 1 else
                                                   binary(Op.MUL, bound, const(scale, bound.dtype)))
            out.append(replace(s, hi=hi, body=_bounded(s.body, row_vars, bound)))
        elif isinstance(s, If):
            out.append(replace(s, then=_bounded(s.then, row_vars, bound),
                               orelse=_bounded(s.orelse, row_vars, bound)))
        else:
            out.append(s)
    return tuple(out)
