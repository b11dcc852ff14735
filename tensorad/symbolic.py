"""Programs with size variables at the facade: ``evaluate``, ``lower`` and ``build`` bind the sizes
(``tensorad.lang.sizes``), and everything below them sees a static program.

A built kernel of a program of independent rows over one size (:func:`~tensorad.lang.sizes.row_plan`)
is generic: it compiles once, at a few block sizes, and runs every size (:class:`RowsKernel`); with other
sizes too, it is one such kernel for each value of the others (a sequence length).  A program of such
rows that reads a sum over the rows after it is made, or the size as a value, runs as stages of generic
kernels (:class:`StagedKernel`, :func:`staged`), or, at a count of rows up to :data:`BLOCK`, as one
block of one kernel whose sums complete in it (:func:`_one_block`).  Any other built kernel reads its
sizes from its arrays' shapes and keeps one static kernel per size in a bounded cache it owns.
``ta.function`` (and the bridges, ``value_and_grad``) of a symbolic program is a :class:`GenericFunction`:
differentiated once, each kernel built once so, run at each size through a :class:`SizedFunction`.  A
derivative of a symbolic program is optimized over its sizes, per case of a size's values where a
choice of the optimizer depends on it (:func:`deferred`); where the cases do not settle it either, it
is the raw derivative until its sizes are bound: binding redoes the differentiation on the static
program."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from .bridges.signatures import DEFAULT_MAX_SIGNATURES, SignatureCache
from .codegen import ExportError, Kernel, KernelArgumentError, LoweredFunc
from .codegen import build as _build
from .codegen import lower as _lower
from .codegen import prepare as _prepare
from .codegen.passes.row_bound import RowBoundError
from .codegen.runtime.blocks import Layout
from .codegen.runtime.kernel import given_outputs
from .codegen.runtime.rows import SIZES_KEPT, RowsCall, RowsKernel, refuse_export
from .codegen.strategies.cost import worth_saving
from .codegen.target import parse_target
from .ir.dtype import numpy_dtype
from .ir.expr import TRUE, Expr, Op, SizeDecisionError, cast, fresh_uid
from .ir.rewrite import op_reads, tensor_graph, walk
from .ir.tensor import Provenance, Role, Tensor
from .lang import compute, placeholder
from .lang.sizes import RowKind, bind_program, check_size, program_sizes, read_sizes, row_plan
from .poly.affine import size_cases
from .reference import evaluate as _evaluate
from .training.function import Function, Residuals, ValueAndGrad, gradients, head_array
from .training.residuals import ResidualPlan, plan_residuals

MAX_SIZES = 8  # static kernels a symbolic kernel keeps, least recently used first out
ROWS = (256, 64, 8, 4)  # the blocks of a generic kernel, in rows rounded to multiples of its size's unit
BLOCK = 64  # the most rows (rounded as a block's) a staged program runs as one block (:func:`_one_block`)
ONE_BLOCKS = (8, 16, 32, BLOCK)  # its one-block kernels' rows; one between the least and the most is built
BLOCK_GAIN = 0.9  # where the cost model prices its code per row below this share of the next larger one's
Part = Callable[[Any, Any, dict], Any]  # ``make(outputs, inputs, options)`` of a block (:func:`row_parts`)
# set by :func:`_cases` while it makes a case: a derivative that a case defers again is given up at once
_MAKING_CASE: ContextVar[bool] = ContextVar("making_case", default=False)


def listed(tensors: Any) -> list:
    """A call's tensor, or list or tuple of tensors, as a list (``None``: empty; any other object: itself,
    for the call to report)."""
    return [] if tensors is None else list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]


def symbolic(*groups: Any) -> bool:
    """Whether the program of the tensors in ``groups`` (tensors, lists, tuples) has size variables."""
    tensors = [t for g in groups for t in listed(g) if isinstance(t, Tensor)]
    return bool(tensors) and bool(program_sizes(tensors))


def _like(tensors: Any, new: dict[Tensor, Tensor]) -> Any:
    """``tensors`` (a tensor, list or tuple) with each tensor replaced by its image in ``new``."""
    if isinstance(tensors, Tensor):
        return new.get(tensors, tensors)
    if tensors is None:
        return None
    out = [new.get(t, t) if isinstance(t, Tensor) else t for t in tensors]
    return tuple(out) if isinstance(tensors, tuple) else out


@dataclass(frozen=True, eq=False)
class DeferredCall:
    """A differentiation of a symbolic program: ``redo(image)`` makes it on the static program, where
    ``image`` maps the call's arguments (tensors, lists, ``None``) to their static images."""

    redo: Callable[[Callable[[Any], Any]], list[Tensor]]


@dataclass(frozen=True, eq=False)
class CasesCall:
    """A differentiation of a symbolic program optimized per case of the values of ``size``: each case
    ``(lo, hi, derivatives)`` holds for ``lo <= size <= hi`` (``hi`` ``None``: unbounded), its derivatives
    over the program's own tensors; ``redo`` makes it where ``size`` stays unbound (:class:`DeferredCall`)."""

    size: Expr
    cases: tuple[tuple[int, int | None, tuple[Tensor, ...]], ...]
    redo: Callable[[Callable[[Any], Any]], list[Tensor]]

    def at(self, value: int) -> tuple[Tensor, ...]:
        return next(c for lo, hi, c in self.cases if lo <= value and (hi is None or value <= hi))


def deferred(make: Callable[[], list[Tensor]], raw: Callable[[], list[Tensor]],
             redo: Callable[[Callable[[Any], Any]], list[Tensor]]) -> list[Tensor]:
    """The optimized derivatives of a symbolic program made over its sizes (``make``).  Where a decision
    of the optimizer depends on a size (``SizeDecisionError``), a copy of each raw derivative of ``raw()``
    of role ``DEFERRED``, whose binding gives the ``k``-th derivative of the case that holds, each case of
    the decision's values made by ``redo`` over that case's sizes (:class:`CasesCall`), or, where the
    cases do not hold a size either, the ``k``-th result of ``redo`` on the static program."""
    try:
        return make()
    except SizeDecisionError as e:
        if _MAKING_CASE.get():  # (its deferred derivatives would end the case: :func:`_cases`)
            raise
        call = _cases(e.condition, redo) or DeferredCall(redo)
    return [_deferred_copy(g, call, k) for k, g in enumerate(raw())]


def _stand_ins(tensors: Sequence[Tensor]) -> dict[Tensor, Tensor]:
    """Each computed tensor of ``tensors`` -> a placeholder of its shape, dtype and name."""
    return {t: placeholder(t.shape, t.dtype, name=t.name) for t in tensors if not t.is_placeholder}


def _cut(tensors: Sequence[Tensor], cuts: Mapping[Tensor, Tensor]) -> list[Tensor]:
    """``tensors`` reading each tensor of ``cuts`` as its image there (a placeholder)."""
    new = bind_program(list(tensors), {v.name: v for v in program_sizes(list(tensors))}, None, dict(cuts))
    return [new[t] for t in tensors]


def _deferred_copy(g: Tensor, call: DeferredCall | CasesCall, k: int) -> Tensor:
    """A copy of raw derivative ``g`` of role ``DEFERRED``: bound, the ``k``-th derivative of ``call``."""
    t = compute(g.shape, lambda *i: g[i], name=g.name)
    return Tensor(replace(t.op, provenance=Provenance(Role.DEFERRED, source=(call, k))), 0)


def _cases(condition: Expr | None, redo: Callable[[Callable[[Any], Any]], list[Tensor]]) -> CasesCall | None:
    """The derivatives of ``redo`` for each interval of values of the one size that ``condition`` is
    about (:func:`~tensorad.poly.affine.size_cases`): at the value of a one-value interval, over a
    narrowed size variable of a longer one, then read back over the program's own tensors; ``None`` where
    the condition does not split so, or a case is not made over its sizes."""
    split = None if condition is None else size_cases(condition)
    if split is None or len(split[1]) < 2 or split[0].arg.case_of is not None:  # (a case is not split)
        return None
    v, cases = split
    made = []
    for lo, hi in cases:
        value = lo if lo == hi else Expr(Op.VAR, v.dtype, (), replace(v.arg, uid=fresh_uid(), min=lo, max=hi,
                                                                       case_of=v))
        new: dict[Tensor, Tensor] = {}
        making = _MAKING_CASE.set(True)
        try:
            derivatives = redo(_image({v.name: value}, new, None))
        except SizeDecisionError:
            return None
        finally:
            _MAKING_CASE.reset(making)
        if any(not t.is_placeholder and t.op.provenance.role is Role.DEFERRED
               for t in tensor_graph(derivatives)):
            return None
        back = {b: t for t, b in new.items()}  # (then each size by name; the case's is read as ``v``)
        bind_program(derivatives, {**{s.name: s for s in program_sizes(derivatives)}, v.name: v}, None, back)
        made.append((lo, hi, tuple(back[d] for d in derivatives)))
    return CasesCall(v, tuple(made), redo)


def _image(sizes: Mapping[str, int | Expr], new: dict[Tensor, Tensor],
           resolve: Callable[[Tensor, dict[Tensor, Tensor]], Tensor] | None,
           counts: Mapping[str, Expr] | None = None) -> Callable[[Any], Any]:
    """A call's arguments (tensors, lists, ``None``) to their images at ``sizes`` (by name; a size not
    named keeps itself; ``counts``: as :func:`~tensorad.lang.sizes.bind_program`'s), bound into ``new``."""
    def image(x: Any) -> Any:
        ts = listed(x)
        bind_program(ts, {s.name: sizes.get(s.name, s) for s in program_sizes(ts)}, resolve, new, counts)
        return _like(x, new)
    return image


def bind_all(tensors: Sequence[Tensor], sizes: Mapping[str, int], counts: Mapping[str, Expr] | None = None,
             new: dict[Tensor, Tensor] | None = None, strict: bool = False) -> dict[Tensor, Tensor]:
    """:func:`~tensorad.lang.sizes.bind_program`, each deferred derivative redone once at ``sizes``, or,
    made per case of a size's values, its case that holds there bound (the size given an integer) or
    every case bound (the size left itself); ``counts``: sizes whose value in bodies is an index
    expression (a generic kernel's count of rows); ``new``: images found before, extended in place;
    ``strict``: as ``bind_program``'s."""
    made: dict[DeferredCall | CasesCall, list[Tensor]] = {}
    kept: dict[CasesCall, CasesCall] = {}

    def at(x: Any) -> Any:
        ts = listed(x)
        return _like(x, bind_all(ts, {s.name: sizes.get(s.name, s) for s in program_sizes(ts)}, counts))

    def resolve(t: Tensor, new: dict[Tensor, Tensor]) -> Tensor:
        call, k = t.op.provenance.source
        if isinstance(call, CasesCall) and sizes[call.size.name] is call.size:
            # (its size stays free: its cases bound at the other sizes, no derivative made again)
            image = _image(sizes, new, resolve, counts)
            if call not in kept:
                cases = tuple((lo, hi, tuple(image(list(c)))) for lo, hi, c in call.cases)
                kept[call] = CasesCall(call.size, cases, lambda im: call.redo(lambda x: im(at(x))))
            return _deferred_copy(image(op_reads(t.op)[0]), kept[call], k)
        if call not in made:
            if isinstance(call, CasesCall) and not isinstance(sizes[call.size.name], Expr):
                made[call] = list(call.at(sizes[call.size.name]))
                _image(sizes, new, resolve, counts)(made[call])
            else:
                made[call] = call.redo(_image(sizes, new, resolve, counts))
        return new.get(made[call][k], made[call][k])
    return bind_program(tensors, sizes, resolve, new, counts, strict)


def bind(tensors: Tensor | Sequence[Tensor], feed: Mapping[Tensor, Any] | None = None, **sizes: int) -> Any:
    """The static program of ``tensors`` (a tensor, or a list or tuple, returned alike) at ``sizes``,
    given by name (``n=7``) or read from the arrays of ``feed`` (placeholder to array)."""
    if feed:
        sizes = {**read_sizes(list(feed), list(feed.values()), "bind"), **sizes}
    return _like(tensors, bind_all(listed(tensors), sizes, strict=True))


def evaluate(outputs: Tensor | Sequence[Tensor], feed: dict) -> Any:
    """``ta.evaluate``: a symbolic program runs at the sizes its fed arrays have."""
    if not isinstance(feed, dict) or not symbolic(outputs, list(feed)):
        return _evaluate(outputs, feed)
    keys = [k for k in feed if isinstance(k, Tensor)]
    new = bind_all(listed(outputs) + keys, read_sizes(keys, [feed[k] for k in keys], "evaluate"))
    return _evaluate(_like(outputs, new), {new.get(k, k): v for k, v in feed.items()})


class SymbolicLowered:
    """``ta.lower`` of a symbolic program without sizes: ``work_at(n=...)`` lowers at those sizes;
    ``generic`` and ``why`` say what ``ta.build`` of it makes."""

    def __init__(self, outputs: Any, inputs: Any, options: dict) -> None:
        self.outputs, self.inputs, self.options = outputs, inputs, options
        self.sizes = [v.name for v in program_sizes(listed(outputs) + listed(inputs))]

    def at(self, **sizes: int) -> LoweredFunc:
        """The static program's lowering at ``sizes``."""
        return lower(self.outputs, self.inputs, sizes=sizes, **self.options)

    def work_at(self, **sizes: int) -> int:
        """The exact work at ``sizes`` (each new size lowers once more)."""
        return self.at(**sizes).work

    @property
    def why(self) -> str:
        """What ``kernel.why`` of ``ta.build`` of the program says: why it compiles once per size, or why
        blocks of a generic kernel run whole (lowering each block); ``""``: neither."""
        outputs, inputs = listed(self.outputs), listed(self.inputs)
        size, kinds, blocks, why = row_blocks(outputs, inputs, self.options)
        options = {k: v for k, v in self.options.items() if k != "name"}
        others = over_one_size(size, outputs, inputs)[1]
        if others:
            return others
        if size is None:
            stages = staged(outputs, inputs, lambda o, i, **opts: lower(o, i, **options, **opts))
            return stages or why if isinstance(stages, str) else \
                "; ".join(w for _, _, case in stages[1] for k, _, _ in case if (w := getattr(k, "why", "")))
        return row_parts(outputs, inputs, size, kinds, blocks,
                         lambda o, i, opts: _lower(o, i, **{**options, **opts}))[2]

    @property
    def generic(self) -> bool:
        """Whether ``ta.build`` of the program makes one kernel for every size (``kernel.generic``)."""
        outputs, inputs = listed(self.outputs), listed(self.inputs)
        size = row_blocks(outputs, inputs, self.options)[0]
        if over_one_size(size, outputs, inputs)[0] is not None:
            return False
        if size is None:
            options = {k: v for k, v in self.options.items() if k != "name"}
            stages = staged(outputs, inputs, lambda o, i, **opts: lower(o, i, **options, **opts))
            return not isinstance(stages, str)
        return True

    @property
    def work(self) -> int:
        raise TypeError(f"the work of a program with sizes {', '.join(self.sizes)} depends on them: "
                        f"ask for it at given sizes, .work_at({', '.join(f'{s}=...' for s in self.sizes)})")


def outputs_not_inputs(outputs: Any, inputs: Any, what: str) -> None:
    """Refuse a computed output listed among ``inputs`` (TVM's argument lists name outputs there): read
    as an input, it would not be computed.  Another computed tensor may be an input (the kernel reads it
    as a buffer instead of computing it), and a placeholder may be both (the kernel copies it)."""
    outs = {id(t) for t in listed(outputs)}
    for t in listed(inputs):
        if isinstance(t, Tensor) and not t.is_placeholder and id(t) in outs:
            raise TypeError(f"{what}: {t.name!r} is both an output and an input; list an output among the "
                            f"outputs only (a computed tensor among the inputs is read, not computed)")


def lower(outputs: Any, inputs: Any = (), name: str = "kernel", *, sizes: dict[str, int] | None = None,
          **options: Any) -> LoweredFunc | SymbolicLowered:
    """``ta.lower``: a symbolic program is lowered at ``sizes``, or, without them, waits for
    ``.work_at(...)``."""
    outputs_not_inputs(outputs, inputs, "lower")
    if sizes is None:
        return SymbolicLowered(outputs, inputs, {"name": name, **options}) if symbolic(outputs, inputs) \
            else _lower(outputs, inputs, name, **options)
    new = bind_all(listed(outputs) + listed(inputs), sizes, strict=True)
    return _lower(_like(outputs, new), _like(inputs, new), name, **options)


class SizedCallable:
    """A kernel or function of a symbolic program: each call reads the sizes from its arrays, and
    runs the static callable made for them (made once per size, kept in a bounded cache).  ``generic``
    is false: ``why`` says why one compile cannot serve every size."""

    generic = False

    def __init__(self, make: Callable[[dict[Tensor, Tensor]], Any], roots: list[Tensor],
                 inputs: list[Tensor], name: str, max_sizes: int = MAX_SIZES, why: str = "",
                 free: Expr | None = None) -> None:
        self.make, self.roots, self.inputs, self.name, self.why = make, roots, inputs, name, why
        self.free = free  # a size ``make`` is given unbound (its callable serves every value of it)
        self.names = {v.name for v in program_sizes(roots) if v is not free}  # (the sizes ``at`` reads)
        self.static: SignatureCache[Any] = SignatureCache(max_sizes)

    def at(self, **sizes: int) -> Any:
        """The static kernel or function at ``sizes`` (made on first use); only ``names`` are read."""
        free = {} if self.free is None else {self.free.name: self.free}
        sizes = {k: v for k, v in sizes.items() if k in self.names}
        return self.static.get(tuple(sorted(sizes.items())),
                               lambda: self.make(bind_all(self.roots, {**sizes, **free})))

    def __call__(self, *arrays: Any, **kwargs: Any) -> Any:
        return self.at(**read_sizes(self.inputs, arrays, self.name))(*arrays, **kwargs)

    def export(self, path: str) -> str:
        """Refused: a library is the code of one size (:class:`ExportError` says how to make it)."""
        sizes = ", ".join(f"{v.name}=..." for v in program_sizes(self.roots))
        raise ExportError(f"export: a kernel of a symbolic program compiles once per size and has no "
                          f"library of its own to export ({path}); export the kernel of one size: "
                          f"kernel.at({sizes}).export(path)")


def build(outputs: Any, inputs: Any = (), *args: Any, **options: Any) -> Any:
    """``ta.build``: a symbolic program of independent rows gives one :class:`RowsKernel` for every size
    (:func:`row_blocks`), or, with other sizes, a :class:`SizedCallable` over one for each value of the
    others; any other a :class:`SizedCallable` over static kernels."""
    outputs_not_inputs(outputs, inputs, "build")
    if not symbolic(outputs, inputs):
        return _build(outputs, inputs, *args, **options)
    options = {**dict(zip(("target", "name", "cache"), args)), **options}
    roots, ins = listed(outputs) + listed(inputs), listed(inputs)

    def make(new: dict[Tensor, Tensor]) -> Any:
        return _build(_like(outputs, new), _like(inputs, new), **options)

    size, kinds, blocks, why = row_blocks(listed(outputs), ins, options)
    free, others = over_one_size(size, listed(outputs), ins)
    if free is not None:
        return SizedCallable(lambda new: build(_like(outputs, new), _like(inputs, new), **options),
                             roots, ins, "ta.build", why=others, free=free)
    if size is None:
        stages = staged(listed(outputs), ins, lambda o, i, **opts: build(o, i, **{**options, **opts}),
                        lambda o, i, opts: _prepare(o, i, **{**options, **opts}))
        return SizedCallable(make, roots, ins, "ta.build", why=stages or why) if isinstance(stages, str) \
            else StagedKernel(*stages, ins, listed(outputs))
    carried = [kinds[t] is RowKind.ROWS for t in ins + listed(outputs)]
    parts, bounded, why = row_parts(outputs, inputs, size, kinds, blocks,
                                    lambda o, i, opts: _build(o, i, **{**options, **opts}))
    return RowsKernel(size, parts, carried[:len(ins)], [kinds[t] for t in listed(outputs)],
                      [t.name for t in ins], bounded, why)


def staged(outputs: list[Tensor], inputs: list[Tensor], make: Callable[..., Any],
           part: Part | None = None) -> tuple[Expr, list[tuple[int, int | None, list]], Tensor] | str:
    """A program of rows over one size ``n`` that reads sums over the rows after they are made, or ``n``
    as a float value (``row_plan(..., staged=True)``), as ``(n, cases, count)``: for each case of ``n``'s
    values that its derivatives are optimized for (:class:`CasesCall`; one case without), ``(lo, hi,
    stages)``, each stage ``(kernel, inputs, outputs)`` made by ``make(outputs, inputs, **options)`` and
    run in turn (:func:`_stages`); a case of one value is its static program.  With ``part`` (``make`` of
    :func:`row_parts` giving a build to price and make, :func:`~tensorad.codegen.prepare`), the counts of
    rows of a case up to :data:`BLOCK` run the whole program as one block (:func:`_one_blocks`), a case of
    their own, and one row its static program (whose passes fuse over the row's other axes, as a block's
    cannot).  Else why a stage is not
    generic, or ``""`` where the program is not such stages."""
    size, _, _ = row_plan(outputs, inputs, staged=True)
    graph = tensor_graph(outputs + inputs)
    calls = {t.op.provenance.source[0] for t in graph
             if not t.is_placeholder and t.op.provenance.role is Role.DEFERRED}
    bounds = {tuple((lo, hi) for lo, hi, _ in c.cases) if isinstance(c, CasesCall) and c.size is size else ()
              for c in calls}
    if size is None or row_plan(outputs, inputs)[0] is not None or len(program_sizes(outputs + inputs)) > 1 \
            or any(t in inputs and not t.is_placeholder for t in graph) or len(bounds) > 1 or () in bounds:
        return ""
    count = placeholder((1,), "int64", name=size.name)
    cases = []
    for i, (lo, hi) in enumerate(next(iter(bounds)) if bounds else [(size.arg.min, size.arg.max)]):
        if lo == hi and calls:
            new = bind_all(outputs + inputs, {size.name: lo})
            cases.append((lo, hi, [(make(_like(outputs, new), _like(inputs, new)), inputs, outputs)]))
            continue
        images = _case(outputs, size, i) if calls else outputs
        stages = _stages(images, outputs, inputs, size, count, make)
        if isinstance(stages, str):
            return stages
        # (one stage: its generic kernel runs a call of up to BLOCK rows as one block already)
        one_row = max(lo, 1) == 1 and size.arg.multiple_of == 1  # (the static program, passes fused)
        ones = [] if part is None else [(BLOCK, stages[0])] if len(stages) == 1 else \
            _one_blocks(images, outputs, inputs, size, count, part, max(lo, 1 + one_row))
        if not ones or max(lo, 1) > (ones[-1][0] if hi is None else min(ones[-1][0], hi)):
            cases.append((lo, hi, stages))
            continue
        single = []
        if one_row:
            new = bind_all(outputs + inputs, {size.name: 1})
            single = [(1, 1, [(make(_like(outputs, new), _like(inputs, new)), inputs, outputs)])]
        blocks, start = [], max(lo, 1 + len(single))
        for rows, one in ones:  # (each the calls of more rows than the one before, up to its own)
            blocks.append((start, rows if hi is None else min(rows, hi), [one]))
            start = blocks[-1][1] + 1
        cases += [c for c in ((lo, 0, stages), *single, *blocks, (start, hi, stages))
                  if c[1] is None or c[0] <= c[1]]
    return size, cases, count


def _one_blocks(outputs: list[Tensor], named: list[Tensor], inputs: list[Tensor], size: Expr, count: Tensor,
                part: Part, first: int) -> list:
    """The one-block kernels (:func:`_one_block`) at the rows of :data:`ONE_BLOCKS`, fewest first: the
    least and the most, and each between whose code the cost model prices per row below
    :data:`BLOCK_GAIN` of the next larger kept one's (a tensor inlined at 64 rows, stored at 16); each
    runs the counts of rows above the one before it (the first from ``first``), and where lowering at
    fewer of them decides otherwise (its build's ``plan``: products stacked from 8 rows), a block of the
    rows below the least count that decides as the block does runs those (:func:`_decided_alike`).
    Each is lowered at most once, to price, compare and compile it, and not at all where the disk cache
    holds its estimate, its plan and its code."""
    kept: list = []  # (rows, estimated cycles per row, the block), most rows first
    for most in reversed(ONE_BLOCKS):
        one = _one_block(outputs, named, inputs, size, count, part, most)
        if not one or kept and one[0] >= kept[-1][0]:
            continue
        try:
            cost = one[1].estimate / one[0]
        except RowBoundError:  # (lowering refuses the count of rows)
            continue
        if not kept or most == ONE_BLOCKS[0] or cost < BLOCK_GAIN * kept[-1][1]:
            kept.append((one[0], cost, one))
    made: list = []
    for _, _, one in reversed(kept):
        made += _decided_alike(one, lambda most: _one_block(outputs, named, inputs, size, count, part, most),
                               made[-1][0] + 1 if made else first)
    return [(rows, block()) for rows, _, block in made]


def _decided_alike(one: tuple, at: Callable[[int], Any], first: int) -> list:
    """Block ``one`` (``(rows, prepared, block)``: :func:`_one_block`) for the counts of rows from
    ``first`` up to its rows, as blocks, fewest rows first, each of whose counts lowering at that count
    decides as the block does: where it decides otherwise at ``first``, the least count that decides as
    the block does is found by halving (the decisions of fewer rows taken to hold up to a count), and
    the block of the rows below it (``at(rows)``, made alike) runs the counts below."""
    upper: list = []  # (the blocks of more rows, fewest first)
    while True:
        rows, prepared, _ = one
        low = at(first) if first < rows else None
        if low is None or low[0] >= rows:
            return [one, *upper]
        try:
            plan = prepared.plan
            if low[1].plan == plan:
                return [one, *upper]
            below, alike = low, rows  # (``below`` decides otherwise, ``alike`` as the block)
            while True:
                mid = at((below[0] + alike) // 2)
                if mid is None or not below[0] < mid[0] < alike:
                    break
                if mid[1].plan == plan:
                    alike = mid[0]
                else:
                    below = mid
        except RowBoundError:  # (lowering refuses the count of rows)
            return [one, *upper]
        upper.insert(0, one)
        under = at(alike - 1)
        one = under if under is not None and below[0] <= under[0] < alike else below


def _one_block(outputs: list[Tensor], named: list[Tensor], inputs: list[Tensor], size: Expr, count: Tensor,
               part: Part, most: int = BLOCK) -> Any:
    """The program of ``outputs`` (known to the caller as ``named``) as one block of a generic kernel
    whose rows hold every row of a call, ``(rows, prepared, block)``: ``rows`` ``most`` rounded to the
    size's unit, ``prepared`` its part's build (by ``part``), ``block()`` making ``(kernel, inputs,
    outputs)``; a call of at most ``rows`` rows runs it once, its sums over the rows complete in the block
    and read there (each one an output too, so that its terms are proved added under the loops over rows
    only), ``size`` read in bodies from ``count`` as the stages read it.  ``None`` where a sum read in
    the block has terms that read no row (the loop of its terms would run the block's rows)."""
    _, kinds, _ = row_plan(outputs, inputs, staged=True)
    graph = tensor_graph(outputs + inputs)
    read = {p for t in graph if not t.is_placeholder for p in op_reads(t.op)}
    sums = [t for t in graph if not t.is_placeholder and kinds[t] is RowKind.SUM]
    info = size.arg
    rows = min(info.multiple_of * -(-most // info.multiple_of), (info.max or most) - (info.max or most)
               % info.multiple_of)
    if rows < 1 or any(t in read and _counted(t, size) is not t for t in sums):
        return None
    outs = list(dict.fromkeys(outputs + sums))
    new = bind_program(outs, {size.name: size}, None, None, {size.name: count(0)})
    images, reads = [new[t] for t in outs], set(tensor_graph([new[t] for t in outs]))
    ins = [t for t in [*inputs, count] if t in reads]
    kinds = {**{new.get(t, t): k for t, k in kinds.items()}, count: RowKind.WHOLE}
    parts, bounded, _ = row_parts(images, ins, size, kinds, (rows,), part, len(dict.fromkeys(outputs)))
    if not parts:  # (lowering, which ``tune=True`` runs first, refuses the count of rows)
        return None
    key = dict(zip(outputs, named))

    def block() -> tuple[RowsKernel, list[Tensor], list[Tensor]]:  # (the count its own, the sums not shown)
        counted, shown = count in ins, len(dict.fromkeys(outputs))
        kernel = RowsKernel(size, [(rows, parts[0][1].kernel())], [kinds[t] is RowKind.ROWS for t in ins],
                            [kinds[t] for t in images], [t.name for t in ins], bounded, "", counted, shown)
        return kernel, ins[:len(ins) - counted], [key.get(t, t) for t in outs[:shown]]
    return rows, parts[0][1], block


def _case(tensors: list[Tensor], size: Expr, i: int) -> list[Tensor]:
    """``tensors`` with each deferred derivative the one of case ``i`` of its :class:`CasesCall`."""
    def resolve(t: Tensor, new: dict[Tensor, Tensor]) -> Tensor:
        call, k = t.op.provenance.source
        bind_program([d := call.cases[i][2][k]], {size.name: size}, resolve, new)  # (none where d lacks it)
        return new[d]
    new = bind_program(tensors, {size.name: size}, resolve)
    return [new[t] for t in tensors]


def _stages(outputs: list[Tensor], named: list[Tensor], inputs: list[Tensor], size: Expr, count: Tensor,
            make: Callable[..., Any]) -> list[tuple[Any, list, list]] | str:
    """The stages of a program of rows over ``size`` (``outputs``, known to the caller as ``named``):
    a tensor that reads a sum over the rows is of a later stage than the sum, which its own stage
    outputs and the later one reads as an input, a finished sum (option ``finished_sums``: an elementwise
    tensor of it alone, its epilogue, runs once after its last block, as the static program's fused
    epilogue runs); ``size`` in bodies reads ``count``."""
    _, kinds, why = row_plan(outputs, inputs, staged=True)
    if why:
        return why
    stage: dict[Tensor, int] = {}
    for t in tensor_graph(outputs + inputs):
        stage[t] = 0 if t.is_placeholder else \
            max((stage[p] + (kinds[p] is RowKind.SUM) for p in op_reads(t.op)), default=0)
    cuts = {p: placeholder(p.shape, p.dtype, name=p.name) for t in stage if not t.is_placeholder
            for p in op_reads(t.op) if kinds[p] is RowKind.SUM and stage[p] < stage[t]}
    key = {**dict(zip(outputs, named)), **{c: p for p, c in cuts.items()}}
    cut = {c for p, c in cuts.items() if p not in outputs}  # (a program output is no epilogue's, as static)
    made = []
    for k in range(max(stage[t] for t in outputs) + 1):
        outs = list(dict.fromkeys([t for t in outputs if stage[t] == k] + [p for p in cuts if stage[p] == k]))
        if not outs:
            continue
        new = bind_program(outs, {size.name: size}, None, {p: c for p, c in cuts.items() if stage[p] < k},
                           {size.name: count(0)})
        images, reads = [new[t] for t in outs], set(tensor_graph([new[t] for t in outs]))
        ins = [t for t in [*inputs, *cuts.values(), count] if t in reads]
        finished = tuple(k for k, t in enumerate(ins) if t in cut)  # (sums the stages before finished)
        kernel = make(images, ins, **{"finished_sums": finished} if finished else {})
        if not getattr(kernel, "generic", True):
            return f"stage {k} of a sum over {size.name} rows read after it is made: {kernel.why}"
        if isinstance(kernel, RowsKernel) and ins[-1] is count:  # (the count its own)
            kernel, ins = RowsKernel(*kernel.made[:-2], True), ins[:-1]
        name = [key.get(key.get(t, t), key.get(t, t)) for t in ins]  # (a cut: its sum, or the output it is)
        made.append((kernel, name, [key.get(t, t) for t in outs]))
    return made


class StagedKernel(RowsCall):
    """``kernel(*arrays)`` of a program of rows over size ``size`` whose sums over the rows are read after
    they are made, or that reads ``size`` as a value (:func:`staged`), built once for every size: for the
    case of ``cases`` (``(lo, hi, stages)``) that holds the call's size, its stages, each a generic
    kernel (or a static one), run in turn.  ``count``: the input of the stages that holds the call's
    count of rows; ``inputs`` and ``outputs``: the program's.  What a call of a count of rows needs is
    kept by count (:meth:`make`)."""

    generic = True

    def __init__(self, size: Expr, cases: list[tuple[int, int | None, list]], count: Tensor,
                 inputs: list[Tensor], outputs: list[Tensor]) -> None:
        self.size, self.cases, self.count, self.inputs, self.outputs = size, cases, count, inputs, outputs
        self.parts = [k for _, _, stages in cases for k, _, _ in stages]
        slots = {t: k for k, t in enumerate([*inputs, count])}  # (each stage's arrays by position)
        for t in (t for _, _, stages in cases for _, _, outs in stages for t in outs):
            slots.setdefault(t, len(slots))
        self.plans = [(lo, hi, [(k, [slots[t] for t in ins], [slots[t] for t in outs])
                                for k, ins, outs in stages]) for lo, hi, stages in cases]
        self.width, self.results = len(slots), [slots[t] for t in outputs]
        self.pad = [None] * (self.width - len(inputs) - 1)
        self.rowed = [(k, t.name) for k, t in enumerate(inputs) if t.shape and t.shape[0] is size]
        self.first, self.by_size = (self.rowed[0][0] if self.rowed else 0), {}
        self.why = "; ".join(k.why for k in self.parts if getattr(k, "why", ""))
        self.bounded = [b for k in self.parts for b in getattr(k, "bounded", ())]

    def __reduce__(self):
        return StagedKernel, (self.size, self.cases, self.count, self.inputs, self.outputs)

    def export(self, path: str) -> str:
        """Refused: a library is the code of one size (:class:`ExportError` says how to make it)."""
        refuse_export(self.size, path)

    @property
    def num_threads(self) -> int:
        """The threads of each stage's parallel loops (settable)."""
        return self.parts[0].num_threads

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        for k in self.parts:
            k.num_threads = n

    def stages(self, n: int) -> list[tuple[Any, list[int], list[int]]]:
        """The stages of the case that holds at ``n`` rows, each ``(kernel, its inputs, its outputs)`` by
        position among the program's inputs, the count and the stages' outputs."""
        n = check_size(self.size, n)
        return next(stages for lo, hi, stages in self.plans if lo <= n and (hi is None or n <= hi))

    def work_at(self, n: int) -> int:
        """The work of a call of ``n`` rows: each stage's."""
        return sum(k.work_at(n) if isinstance(k, RowsKernel) else k.work for k, _, _ in self.stages(n))

    def make(self, n: int) -> tuple:
        """``(stages, count, direct, n)`` for a call of ``n`` rows: its stages (:meth:`stages`), the count of
        rows as an array, and where one kernel runs the call on the program's arrays, returning the
        program's outputs, that kernel (else ``None``)."""
        stages, count = self.stages(n), np.array([n], np.int64)
        kernel, ins, outs = stages[0]
        one = len(stages) == 1 and outs == self.results and ins == [*range(len(self.inputs))]
        return stages, count, kernel if one else None, n

    def taken(self, arrays: tuple) -> tuple:
        """``arrays``, as many as the program's inputs (else a :class:`KernelArgumentError`)."""
        if len(arrays) != len(self.inputs):
            raise KernelArgumentError(f"kernel takes {len(self.inputs)} input arrays "
                                      f"({', '.join(t.name for t in self.inputs)}), got {len(arrays)}")
        return arrays

    def __call__(self, *arrays: Any, out: Any = None) -> Any:
        try:  # (:meth:`sized`, its usual case inline)
            stages, count, direct, n = self.by_size[arrays[self.first].shape[0]]
        except (AttributeError, IndexError, KeyError, TypeError):
            stages, count, direct, n = self.sized(self.taken(arrays))
        if direct is not None:  # (its kernel checks every array, and their count)
            try:
                return direct(*arrays) if out is None else direct(*arrays, out=out)
            except KernelArgumentError:
                self.rows(self.taken(arrays))  # (arrays that disagree on the size say so first)
                raise
        values = [*self.taken(arrays), count, *self.pad]
        for k, _ in self.rowed:  # (each stage checks the arrays it reads: they agree on the count of rows)
            if getattr(arrays[k], "shape", (n,))[:1] != (n,):
                self.rows(arrays)
        names, specs = [t.name for t in self.inputs], None if out is None else self.out_specs(n)
        given = [] if specs is None else given_outputs(out, specs, list(arrays), names)[1]
        place = dict(zip(self.results, given))  # (a stage whose outputs are all results writes them in place)
        for kernel, ins, outs in stages:
            to = {"out": tuple(place[k] for k in outs)} if place and all(k in place for k in outs) else {}
            made = kernel(*[values[k] for k in ins], **to)
            for k, a in zip(outs, made if isinstance(made, tuple) else (made,)):
                values[k] = a
        res = [values[k] for k in self.results]
        if out is not None:
            specs = [(t.name, r.shape, r.dtype) for t, r in zip(self.outputs, res)] if not given else specs
            for a, r in zip(given or given_outputs(out, specs, list(arrays), names)[1], res):
                if a is not r:
                    np.copyto(a, r)
            res = list(out) if isinstance(out, (tuple, list)) else [out]
        return res[0] if len(res) == 1 else tuple(res)

    def out_specs(self, n: int) -> list[tuple[str, tuple, Any]] | None:
        """Each output's name, shape and dtype at ``n`` rows (``None`` where an extent is not an int or the
        size, or a dtype not NumPy's: a call then copies its results into ``out=``)."""
        specs = [(t.name, tuple(n if d is self.size else d for d in t.shape), t.dtype) for t in self.outputs]
        if all(type(d) is int for _, s, _ in specs for d in s) and all(hasattr(np, d) for _, _, d in specs):
            return [(name, s, np.dtype(d)) for name, s, d in specs]
        return None


def row_parts(outputs: Any, inputs: Any, size: Expr, kinds: dict[Tensor, RowKind], blocks: tuple[int, ...],
              make: Part, shown: int | None = None) -> tuple[list[tuple[int, Any]], list[bool], str]:
    """The parts of a generic kernel over ``size`` (:class:`RowsKernel`), each made by ``make(outputs,
    inputs, options)`` at a block of ``blocks`` rows, its last input the count of rows: ``(parts,
    bounded, why)``.  A part runs any count of rows up to its block (``bounded``) where lowering with
    the ``rows`` options takes it (the count is then also each sum's count of a term that reads no
    row); else, the first refusal said in ``why``, it runs whole blocks only, and is left out below the
    largest bounded part (whose short block runs what is left); with ``shown`` (a one-block kernel's
    outputs a call sees, the sums after them read by the block only), it is left out."""
    kinds_of = [kinds[t] for t in listed(outputs)]
    outputs = [_counted(t, size) if kind is RowKind.SUM else t for t, kind in zip(listed(outputs), kinds_of)]
    roots, ins = outputs + listed(inputs), listed(inputs)
    carried = [kinds[t] is RowKind.ROWS for t in ins] + [k is RowKind.ROWS for k in kinds_of]
    count = placeholder((2,), "int64", name="rows")  # (and whether the block is its part's first of a call)
    at = {size.name: count(0)}
    sums = tuple(k for k, kind in enumerate(kinds_of) if kind is RowKind.SUM)
    rows_opts = {"rows": tuple(k + (k >= len(ins)) for k, on in enumerate(carried) if on), "row_sums": sums,
                 "hidden_sums": () if shown is None else tuple(k for k in sums if k >= shown)}
    made: list[tuple[int, Any, str]] = []
    for rows in blocks:
        new = bind_all(roots, {size.name: rows}, at)
        try:
            made.append((rows, make(_like(outputs, new), [*_like(ins, new), count], rows_opts), ""))
        except RowBoundError as e:
            made.append((rows, None, str(e)))
    top = next((rows for rows, _, refused in made if not refused), 0)
    parts, bounded, whole = [], [], []
    for rows, part, refused in made:
        if refused and rows > top and shown is None:
            new = bind_all(roots, {size.name: rows})
            part = make(_like(outputs, new), [*_like(ins, new), count], {})
            whole.append((rows, refused))
        if part is not None:
            parts.append((rows, part))
            bounded.append(not refused)
    why = "" if not whole else (f"blocks of {', '.join(str(rows) for rows, _ in whole)} rows run whole, "
                                f"taking no count of rows: {whole[0][1]}")
    return parts, bounded, why


def _counted(t: Tensor, size: Expr) -> Tensor:
    """A sum over the rows of ``size`` whose terms read no row (``sum_{i < n} W[j]``) as its term times
    ``n`` (which a generic kernel's block reads as its count of rows); any other tensor as it is."""
    red = t.op.body[0]
    if len(t.op.body) != 1 or red.op is not Op.REDUCE or len(red.arg.axes) != 1 or red.src[0] is not TRUE:
        return t
    r = red.arg.axes[0]
    if any(n is r for e in red.src[1:] for n in walk(e)) or len(red.src) != 2:
        return t
    body = cast(red.dtype, size) * red.src[1]
    return Tensor(replace(t.op, body=(body,)), t.value_index)


def over_one_size(size: Expr | None, outputs: list[Tensor], inputs: list[Tensor]) -> tuple[Expr | None, str]:
    """``(n, why)`` for a program over several sizes that is one kernel over ``n`` for each value of the
    others: ``size``, along which its rows are independent, or, where they are along none, the size of
    its stages (:func:`staged`: a Transformer's mean loss over a batch and a sequence length);
    ``(None, "")`` for any other."""
    if size is None and row_plan(outputs, inputs)[0] is None:
        size = row_plan(outputs, inputs, staged=True)[0]
    sizes = program_sizes(outputs + inputs) if size is not None else []
    others = ", ".join(v.name for v in sizes if v is not size)
    return (size, f"rows are independent along {size.name}, not along {others}: a generic kernel over "
                  f"{size.name} for each value of {others}") if others else (None, "")


def row_blocks(outputs: list[Tensor], inputs: list[Tensor], options: dict
               ) -> tuple[Any, dict[Tensor, RowKind], tuple[int, ...], str]:
    """``(size, kinds, blocks, "")``: for a program of independent rows of ``size`` read from an input, each
    tensor's :class:`~tensorad.lang.sizes.RowKind` (:func:`~tensorad.lang.sizes.row_plan`) and the rows of
    each block of a generic kernel, largest first, the last the size's unit; else ``(None, {}, (), why)``."""
    size, kinds, why = row_plan(outputs, inputs)
    if size is None:
        return None, {}, (), why
    info = size.arg
    unit, most = info.multiple_of, info.max or max(ROWS)
    sums = sorted({t.dtype for t in outputs if kinds[t] is RowKind.SUM} - {"float32", "float64"})
    for bad, says in ((all(kinds[t] is not RowKind.ROWS for t in inputs), f"no input has {size.name} rows"),
                      (unit < info.min, f"size {size.name}'s unit {unit} is below its least value"),
                      (sums, f"a sum over {size.name} rows of {', '.join(sums)} (float32 and float64 add)")):
        if bad:
            return None, {}, (), says
    rounded = (min(unit * -(-rows // unit), most - most % unit) for rows in ROWS)
    return size, kinds, tuple(dict.fromkeys([*rounded, unit])), ""


def per_size(make: Callable[..., Any], outputs: Any, inputs: Any, wrt: Any, name: str, **options: Any) -> Any:
    """``make(outputs, inputs, wrt)`` (a bridge's function of a program; ``options``: ``ta.function``'s);
    for a symbolic program, a :class:`SizedViews` that makes it at each call's sizes around the
    :class:`SizedFunction` there of one :class:`GenericFunction` (``make(..., function=view)``), whose
    kernels serve every size."""
    if not symbolic(outputs, inputs):
        return make(outputs, inputs, wrt)
    return SizedViews(GenericFunction(outputs, inputs, wrt, **options), make, name)


class SizedViews(SizedCallable):
    """A bridge's function of a symbolic program: at each call's sizes, ``make(outputs, inputs, wrt,
    function=view)`` around the :class:`SizedFunction` of ``function`` (a :class:`GenericFunction`) there,
    made once per size and kept as many sizes as an op keeps signatures; the kernels are the generic
    function's, each built once (``function.generic``)."""

    def __init__(self, function: GenericFunction, make: Callable[..., Any], name: str) -> None:
        def made(v: SizedFunction) -> Any:
            return make(v.outputs, v.inputs, v.wrt, function=v)
        super().__init__(lambda sizes: made(function.at(**sizes)), [*function.outputs, *function.inputs],
                         function.inputs, name, DEFAULT_MAX_SIGNATURES)
        self.function = function

    def at(self, **sizes: int) -> Any:
        """The bridge's callable at ``sizes`` (made on first use)."""
        return self.static.get(tuple(sorted(sizes.items())), lambda: self.make(sizes))


def function(outputs: Any, inputs: Any, wrt: Any = None, policy: Any = "default",
             **build_options: Any) -> Any:
    """``ta.function``: a symbolic program gives a :class:`GenericFunction`, each kernel built once."""
    if not symbolic(outputs, inputs):
        return Function(outputs, inputs, wrt, policy, **build_options)
    return GenericFunction(outputs, inputs, wrt, policy, **build_options)


class GenericFunction(Function):
    """``ta.function`` of a symbolic program: its gradients differentiated once over the sizes (deferred
    where the optimizer's choices depend on them, :func:`deferred`), and its forward, forward with
    residuals and backward each built once by :func:`build` (a generic kernel where the program's rows
    allow; else one per size, ``why`` says why).  ``forward`` runs at its arrays' sizes through the
    :class:`SizedFunction` of those sizes (:meth:`at`: static shapes for the bridges, the kernels
    shared), kept in a bounded cache; so are the functions of other ``wrt`` (:meth:`for_wrt`)."""

    def __init__(self, outputs: Any, inputs: Any, wrt: Any = None, policy: Any = "default",
                 **build_options: Any) -> None:
        super().__init__(outputs, inputs, wrt, policy, **build_options)
        self.sized: SignatureCache[SizedFunction] = SignatureCache(DEFAULT_MAX_SIGNATURES)
        self.variants: SignatureCache[GenericFunction] = SignatureCache(DEFAULT_MAX_SIGNATURES)
        self.by_shapes: dict[tuple, SizedFunction] = {}  # (:meth:`forward`'s, up to SIZES_KEPT)
        self.cuts: dict[Tensor, Tensor] = {}  # (set by :attr:`plan`: saved tensor -> its backward's input)

    @cached_property
    def grads(self) -> list[Tensor]:
        outs, wrt = self.outputs, self.wrt
        heads = [h for h in self.heads if h is not None]

        def over(im: Callable[[Any], Any], optimize: bool = True) -> list[Tensor]:
            given = iter(im(heads))
            return gradients(im(outs), [None if h is None else next(given) for h in self.heads], im(wrt),
                             optimize)
        return deferred(lambda: over(lambda x: x), lambda: over(lambda x: x, False), over)

    @cached_property
    def plan(self) -> ResidualPlan:
        """The residual plan of each case of the sizes that the gradients are optimized for: the widest
        case's (sharing transcendental values between the passes), each other's saving only what it
        saves (so that the forward computes no more), the gradients those cases' reading them; else
        :class:`Function`'s."""
        calls = {t.op.provenance.source for t in self.grads if t.op.provenance.role is Role.DEFERRED}
        call = next(iter(calls))[0] if calls else None
        if not isinstance(call, CasesCall) or calls != {(call, k) for k in range(len(self.grads))}:
            plan = Function.plan.func(self)  # (a gradient made again at each size may read any input)
            if calls:
                return replace(plan, inputs=tuple(range(len(self.inputs))))
            self.cuts = _stand_ins(plan.saved)
            return replace(plan, grads=tuple(_cut(plan.grads, self.cuts)))
        heads = [h for h in self.heads if h is not None]
        target = parse_target(self.build_options.get("target", "llvm"))
        widest = max(range(len(call.cases)), key=lambda i: (call.cases[i][1] is None, call.cases[i][1] or 0))
        main = plan_residuals(self.outputs, self.inputs, heads, list(call.cases[widest][2]), self.policy,
                              lambda v: worth_saving(v, target))
        kept = set(main.saved)  # (the other cases save of it only, so that the forward saves no more)
        plans = [main if i == widest else plan_residuals(self.outputs, self.inputs, heads, list(grads),
                                                         lambda t: t in kept)
                 for i, (_, _, grads) in enumerate(call.cases)]
        saved = tuple(dict.fromkeys(t for p in [main, *plans] for t in p.saved))
        self.cuts = _stand_ins(saved)
        cases = CasesCall(call.size, tuple((lo, hi, tuple(_cut(p.grads, self.cuts)))
                                           for (lo, hi, _), p in zip(call.cases, plans)), call.redo)
        raw = _cut([op_reads(g.op)[0] for g in self.grads], self.cuts)
        grads = tuple(_deferred_copy(g, cases, k) for k, g in enumerate(raw))
        return ResidualPlan(tuple(sorted({i for p in plans for i in p.inputs})), saved,
                            tuple(t for t in saved if t not in set(main.outputs)), main.outputs, grads,
                            main.original)

    @property
    def backward_inputs(self) -> list[Tensor]:
        """:class:`Function`'s, each computed saved tensor the placeholder the gradients read it as."""
        plan = self.plan  # (which sets the cuts)
        return [self.inputs[i] for i in plan.inputs] + [self.cuts.get(t, t) for t in plan.saved] + \
            [h for h in self.heads if h is not None]

    def _built(self, outputs: list[Tensor], inputs: list[Tensor], name: str) -> Any:
        """:func:`build`; over several sizes, of gradients made again at each (:class:`DeferredCall`),
        one kernel per size (its gradients made there)."""
        redone = any(isinstance(t.op.provenance.source[0], DeferredCall) for t in tensor_graph(outputs)
                     if not t.is_placeholder and t.op.provenance.role is Role.DEFERRED)
        if len(program_sizes(outputs + inputs)) == 1 or not redone:
            return build(outputs, inputs, name=name, **self.build_options)
        def make(new: dict[Tensor, Tensor]) -> Any:
            return _build(_like(outputs, new), _like(inputs, new), name=name, **self.build_options)
        return SizedCallable(make, outputs + inputs, inputs, "ta.function",
                             why="gradients over several sizes optimized at each")

    @cached_property
    def forward_kernel(self) -> Any:
        return self._built(self.outputs, self.inputs, "forward")

    @cached_property
    def residual_kernel(self) -> Any:
        return self._built(self._residual_outputs(), self.inputs, "forward_res") if self.plan.extras \
            else self.forward_kernel

    @cached_property
    def backward_kernel(self) -> Any:
        return self._built(self.backward_grads, self.backward_inputs, "backward")

    def lower_forward(self) -> SymbolicLowered:
        return lower(self._residual_outputs(), self.inputs, **self.lower_options)

    def lower_backward(self) -> SymbolicLowered:
        return lower(self.backward_grads, self.backward_inputs, **self.lower_options)

    @property
    def generic(self) -> bool:
        """Whether each kernel built so far serves every size (one compile each)."""
        return all(getattr(self.__dict__[k], "generic", True) for k in
                   ("forward_kernel", "residual_kernel", "backward_kernel") if k in self.__dict__)

    @property
    def why(self) -> str:
        """Why a kernel built so far compiles once per size (``""``: none does)."""
        return "; ".join(dict.fromkeys(w for k in ("forward_kernel", "residual_kernel", "backward_kernel")
                                       if (w := getattr(self.__dict__.get(k), "why", ""))))

    def for_wrt(self, wrt: Sequence[Tensor]) -> GenericFunction:
        key = tuple(self.inputs.index(x) for x in wrt)
        return self.variants.get(key, lambda: GenericFunction(self.outputs, self.inputs, list(wrt),
                                                              self.policy, **self.build_options))

    def at(self, **sizes: int) -> SizedFunction:
        """The function at ``sizes`` (by name), running this function's kernels."""
        return self.sized.get(tuple(sorted(sizes.items())), lambda: SizedFunction(self, sizes))

    def forward(self, *arrays: Any) -> tuple[Any, Residuals]:
        try:  # (the function of sizes seen before, by the arrays' shapes)
            view = self.by_shapes[tuple([a.shape for a in arrays])]
        except (AttributeError, KeyError, TypeError):
            view = self.at(**read_sizes(self.inputs, arrays, "ta.function"))
            if len(self.by_shapes) >= SIZES_KEPT:
                self.by_shapes.clear()
            self.by_shapes[tuple([getattr(a, "shape", None) for a in arrays])] = view
        return view.forward(*arrays)

    def backward(self, residuals: Sequence, *heads: Any, out: Sequence | None = None) -> tuple:
        """The gradients, by the :class:`SizedFunction` that made ``residuals`` (residuals of no forward of
        this function: at the sizes they and the heads give)."""
        if type(residuals) is Residuals and isinstance(residuals.maker, SizedFunction) \
                and residuals.maker.parent is self:
            return residuals.maker.backward(residuals, *heads, out=out)
        if not isinstance(residuals, (tuple, list, Residuals)):
            return Function.backward(self, residuals, *heads, out=out)  # (which says what it takes)
        given = [*residuals, *heads]
        sizes = read_sizes(self.backward_inputs[:len(given)], given, "ta.function")
        return self.at(**sizes).backward(tuple(residuals), *heads, out=out)


class SizedFunction(Function):
    """:class:`GenericFunction` ``parent`` at ``sizes``: its program's static shapes (what the bridges
    and the checks of heads read) and residual plan bound there, its kernels the parent's.  The saved
    values that are not outputs are one block per forward, laid out for these sizes."""

    def __init__(self, parent: GenericFunction, sizes: Mapping[str, int]) -> None:
        plan, heads = parent.plan, [h for h in parent.heads if h is not None]
        roots = [*parent.outputs, *parent.inputs, *heads, *plan.outputs, *plan.saved]
        self.images = new = bind_all(roots, sizes, strict=True)  # (the gradients bound into it when asked)
        self.parent, self.sizes = parent, dict(sizes)
        self.inputs, self.outputs = [new[x] for x in parent.inputs], [new[t] for t in parent.outputs]
        self.wrt, self.single, self.policy = [new[x] for x in parent.wrt], parent.single, parent.policy
        self.build_options, self.lower_options = parent.build_options, parent.lower_options
        self.heads = [None if h is None else new[h] for h in parent.heads]
        self.head_names = [None if h is None else h.name for h in self.heads]
        self.plan = ResidualPlan(plan.inputs, *(tuple(new[t] for t in ts) for ts in
                                                (plan.saved, plan.extras, plan.outputs)))
        self.plan.__dict__["sources"] = plan.sources  # (the parent's: its backward kernel's order)

    forward_kernel = property(lambda self: self.parent.forward_kernel)  # type: ignore[assignment]
    residual_kernel = property(lambda self: self.parent.residual_kernel)  # type: ignore[assignment]
    backward_kernel = property(lambda self: self.parent.backward_kernel)  # type: ignore[assignment]

    @cached_property
    def grads(self) -> list[Tensor]:
        return _like(self.parent.grads, bind_all(self.parent.grads, self.sizes, None, self.images))

    def lower_forward(self) -> LoweredFunc:
        return self.parent.lower_forward().at(**self.sizes)

    def lower_backward(self) -> LoweredFunc:
        return self.parent.lower_backward().at(**self.sizes)

    def for_wrt(self, wrt: Sequence[Tensor]) -> SizedFunction:
        return self.parent.for_wrt([self.parent.inputs[self.inputs.index(x)] for x in wrt]).at(**self.sizes)

    @cached_property
    def layout(self) -> Layout:
        line = parse_target(self.build_options.get("target", "llvm")).line
        return Layout([(tuple(t.shape), numpy_dtype(t.dtype)) for t in self.plan.extras], line)

    @cached_property
    def _out_specs(self) -> list[tuple[tuple[int, ...], Any]]:
        """The shape and NumPy dtype of each output of the forward with residuals that is not in the block."""
        outs = self._residual_outputs()
        return [(tuple(t.shape), numpy_dtype(t.dtype)) for t in outs[:len(outs) - len(self.plan.extras)]]

    @cached_property
    def _rows(self) -> tuple[int, int] | None:
        """Where the forward with residuals is generic: the input it reads the count from, and the count."""
        kernel = self.residual_kernel
        if not isinstance(kernel, RowsKernel) or kernel.counted or not kernel.rowed:
            return None
        return kernel.first, self.inputs[kernel.first].shape[0]

    def forward_block(self, *arrays: Any) -> tuple[list, np.ndarray | None]:
        block = self.layout.new() if self.plan.extras else None
        outs = [np.empty(s, d) for s, d in self._out_specs]
        given, rows = [*outs, *([] if block is None else self.layout.views(block))], self._rows
        try:  # (outputs of this size made here: unchecked where the arrays have its rows)
            fresh = rows is not None and arrays[rows[0]].shape[0] == rows[1]
        except (AttributeError, IndexError, TypeError):
            fresh = False
        self.residual_kernel(*arrays, out=given, **{"fresh": True} if fresh else {})
        for k, j in self._copied_in_order:
            outs.insert(k, np.array(self.layout.view(block, j), copy=True))
        return outs, block

    def backward(self, residuals: Sequence, *heads: Any, out: Sequence | None = None) -> tuple:
        specs = self._head_specs
        if len(heads) != len(specs):
            raise ValueError(f"backward takes one head per output ({len(specs)}), got {len(heads)}")
        if not isinstance(residuals, (tuple, list, Residuals)) or len(residuals) != len(self.plan.sources):
            raise ValueError(f"backward: residuals must be the {len(self.plan.sources)} values that "
                             f"forward returned")
        if not self.wrt:
            return ()
        given = [Kernel.check_input(head_array(h, spec), (name, spec[0], spec[1]))
                 for h, spec, name in zip(heads, specs, self.head_names) if spec is not None]
        run = k.at(**self.sizes) if isinstance(k := self.backward_kernel, SizedCallable) else k
        res = run(*residuals, *given, out=out)  # (at these sizes: its arrays may hold none of them)
        return res if isinstance(res, tuple) else (res,)


def value_and_grad(loss: Tensor, params: Any, inputs: Any = None, policy: Any = "default",
                   **build_options: Any) -> ValueAndGrad:
    """``ta.value_and_grad``: see :class:`~tensorad.training.function.ValueAndGrad`; a symbolic loss
    runs its generic function at each call's sizes (:func:`function`)."""
    return ValueAndGrad(loss, params, inputs, policy, make=function, **build_options)


for _wrapper, _base in ((evaluate, _evaluate), (lower, _lower), (build, _build), (function, Function)):
    _wrapper.__doc__ = f"{_base.__doc__}\n\n    {_wrapper.__doc__}"
