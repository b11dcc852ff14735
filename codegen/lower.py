"""``ta.lower``: tensors to a loop program (API.md section 3).  Steps: collect the ops between the outputs
and the inputs; choose buffers (:mod:`.passes.buffers`) and substitute inlined bodies; run
:data:`PRE_PLANNING_PASSES` in order (proving reads in bounds on the way); plan each op's strategy
(:mod:`.strategies`); build polyhedral statements (:mod:`.loops.domain`), schedules
(:mod:`.loops.schedule`) and isl's loops (:mod:`.loops.isl_ast`); count the work (:mod:`.loops.work`);
block float32 sums (:mod:`.loops.cascade`)."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from tensorad.ir import trace
from tensorad.ir.collect import fewer_collections
from tensorad.ir.expr import Expr, Op, var
from tensorad.ir.intrange import check_index_range
from tensorad.ir.printer import Namer, print_tensor_recursively
from tensorad.ir.rewrite import empty_reduction, kept_walks, tensor_graph, walk
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.lang import make_compute
from tensorad.lang.bounds import OutOfBoundsError, check_op_bounds
from tensorad.lang.tensor_lang import guard_into_domain

from .gemm.contraction import pack_work
from .loops.cascade import cascade_sums
from .loops.coalesce import unit_split
from .loops.domain import covers_box, op_domain
from .loops.fills import place_fills
from .loops.fused_nest import lower_group
from .loops.isl_ast import build_loops
from .loops.nest_groups import Group, Unit, make_unit, order_siblings, plan_groups
from .loops.schedule import ROWS_APART, mark_parallel, restrict_batch, schedule_nest, work_weight
from .loops.shared_nests import SharedLowering, marked
from .loops.strip_groups import lower_strips
from .loops.work import count_work
from .options import Options
from .passes.buffers import choose_materialized, inline_bodies, reuse_materialized, store_operands
from .passes.chains import contract_sums, split_scans
from .passes.choice_factoring import factor_choices
from .passes.copy_elision import elide_copies
from .passes.footprint import shrink_to_footprints, zero_terms_into_domain
from .passes.row_bound import RowBoundError, bound_rows, finished_epilogues
from .passes.shared_packing import share_packed_sides
from .passes.shared_scatters import share_scatter_sums
from .passes.shared_windows import share_windowed_operands
from .passes.speculate import speculate
from .passes.stacked_sums import stack_shared_sides, stack_sums
from .passes.strided_sums import split_digits, unstride
from .passes.transposed_sums import merge_transposed
from .passes.winograd import winograd
from .program import Buffer, Fill, Nest, NestAttrs, Program, program_text, stores
from .strategies.catalog import MICROKERNEL_FIRST, REGISTRY
from .strategies.registry import EpilogueStep, PlanContext, ProductCall, ScanNest, ScatterNest, Step, plan_ops
from .strategies.scan import carried
from .strategies.scatter import lower_scatter
from .target import Target, parse_target


class LoweredFunc:
    """The loop program ``build`` compiles; ``str()`` shows it, ``.work`` counts its work."""

    def __init__(self, program: Program, options: Options, offered: tuple = (),
                 estimates: dict[str, float] | None = None) -> None:
        self.program, self.options = program, options
        #: (point, candidate labels, the label chosen) for every op offered several strategies
        #: (:mod:`.strategies.registry`); ``tune=True`` measures them, ``choices={point: label}`` pins them
        self.offered = offered
        #: ``{point: cycles}``: the cost model's cycles for each point's costliest candidate
        self.estimates = dict(estimates or {})
        self.work = sum(s.work for s in program.steps if isinstance(s, Nest))
        self.row_work, self.once_work = program.row_work, program.once_work  # (:mod:`.passes.row_bound`)

    @cached_property
    def plan(self) -> tuple:
        """What lowering decided, free of extents: each step's name (a nest's, a fill's buffer's) in order,
        the temporaries', the tensors inlined, and the strategy chosen at each point offered several; two
        lowerings of one program at other sizes that share it made the same choices."""
        steps = tuple(s.name if isinstance(s, Nest) else s.buffer.name for s in self.program.steps)
        return steps, tuple(b.name for b in self.program.temps), tuple(self.program.inlined), \
            tuple((point, chosen) for point, _, chosen in self.offered)

    @cached_property
    def text(self) -> str:
        """The loop program as text, printed when first asked for (a build does not need it)."""
        return program_text(self.program)

    @property
    def inputs(self) -> list[Buffer]:
        return self.program.inputs

    @property
    def outputs(self) -> list[Buffer]:
        return self.program.outputs

    @property
    def temporaries(self) -> list[tuple[str, tuple[int, ...], str]]:
        """The buffers a call allocates besides its inputs and outputs: (name, shape, dtype)."""
        return [(b.name, tuple(b.shape), b.dtype) for b in self.program.temps]

    def __str__(self) -> str:
        return self.text

    def text_with(self, names: Namer) -> str:
        """The loop program with buffers named by ``names`` (a :class:`~tensorad.ir.printer.Namer`
        shared with ``PrintTensorRecursively(..., namer=names)``), so that one name means one
        tensor across printouts; ``str()`` uses the names lowering gave."""
        return program_text(self.program, names)

    def __repr__(self) -> str:
        return f"<LoweredFunc {self.program.name}: work={self.work}>\n{self.text}"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.text)

    def _repr_html_(self) -> str:
        """Jupyter display: the loop program with its nest headers (work, schedule) emphasised."""
        lines = []
        for line in self.text.splitlines():
            esc = html.escape(line)
            lines.append(f"<b>{esc}</b>" if line.lstrip().startswith(("# nest", "kernel ")) else esc)
        # long lines wrap (at any character if they must) instead of running off the page
        style = "line-height:1.3; white-space:pre-wrap; overflow-wrap:anywhere; max-width:100%"
        return (f"<pre style='{style}'>" + "\n".join(lines)
                + f"\n<i>work: {self.work}</i></pre>")


def as_tensor_list(x: Any, what: str) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    try:
        items = list(x)
    except TypeError:
        raise TypeError(f"{what} must be a list of tensors, got {type(x).__name__}") from None
    for k, t in enumerate(items):
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}[{k}] must be a tensor, got {type(t).__name__} {t!r}")
    return items


def _copies_of_inputs(outputs: list[Tensor], inputs: list[Tensor]) -> list[Tensor]:
    """An output that is also an input (``build([A], [A])``, an identity kernel) is computed as
    a copy of that input: a new tensor ``A[i...]`` with the input's name, written to the output."""
    given = set(inputs)
    out = []
    for t in outputs:
        if t in given:
            axes = [var(f"ax{d}", 0, s) for d, s in enumerate(t.shape)]
            t = make_compute(t.name, axes, [Expr(Op.READ, t.dtype, tuple(axes), t)], check_bounds=False)[0]
        out.append(t)
    return out


def check_arguments(outputs: Any, inputs: Any, name: Any) -> tuple[list[Tensor], list[Tensor]]:
    """The outputs and inputs of ``lower``/``build`` as lists, checked (``TypeError`` /
    ``ValueError`` naming what is wrong), and the kernel's name."""
    outputs, inputs = as_tensor_list(outputs, "outputs"), as_tensor_list(inputs, "inputs")
    if not outputs:
        raise ValueError("lower/build: no outputs given")
    for what, ts in (("outputs", outputs), ("inputs", inputs)):
        seen: set = set()
        for t in ts:
            if t in seen:
                raise ValueError(f"{what}: tensor {t.name!r} is listed twice")
            seen.add(t)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string, got {name!r}")
    return outputs, inputs


def argument_names(outputs: list[Tensor], inputs: list[Tensor]) -> tuple[list[str], list[str]]:
    """The names lowering gives the input and output buffers (what a kernel's errors print),
    without lowering: a kernel read from the cache takes them from the call's tensors."""
    namer = Namer()
    return [namer.tensor(t) for t in inputs], [namer.tensor(t) for t in _copies_of_inputs(outputs, inputs)]


@fewer_collections()
def lower(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor = (),
          name: str = "kernel", **options: Any) -> LoweredFunc:
    """The loop nest of ``outputs`` computed from ``inputs`` (see the module docstring).

    Accepts the options of ``build`` (:class:`.options.Options`); those that only change compilation are
    ignored.  Each call lowers afresh, with no process-wide memo.  ``tune=True`` lowers with the
    strategies measured fastest (:mod:`.tune`)."""
    outputs, inputs = check_arguments(outputs, inputs, name)
    full = Options.make(options)
    opts = full.for_lowering()
    with trace.stage("lower", name), kept_walks():
        program, *rest = _lower_program(_copies_of_inputs(outputs, inputs), inputs, name, opts)
        finished = opts.finished_sums if opts.fuse else ()  # (epilogues fuse as the static program's do)
        try:
            program = bound_rows(program, opts.rows, opts.row_sums, finished) if opts.rows else \
                finished_epilogues(program, finished) if finished else program
        except RowBoundError:  # (loops over rows fused with another axis: lowered again, kept apart)
            apart = ROWS_APART.set(True)
            try:
                program, *rest = _lower_program(_copies_of_inputs(outputs, inputs), inputs, name, opts)
            finally:
                ROWS_APART.reset(apart)
            program = bound_rows(program, opts.rows, opts.row_sums, finished)
        result = LoweredFunc(share_packed_sides(program), *rest)
    if trace.dumping():
        stem = f"{name}-{trace.short_hash(result.text)}"
        trace.dump(stem, "tensors.txt", lambda: "\n".join(print_tensor_recursively(t) for t in outputs))
        trace.dump(stem, "loops.txt", result.text)
    return result


def _lower_program(outputs: list[Tensor], inputs: list[Tensor], name: str, opts: Options
                   ) -> tuple[Program, Options, tuple, dict[str, float]]:
    input_set = set(inputs)
    tensors = tensor_graph(outputs, stop=input_set)
    for t in tensors:
        if t.is_placeholder and t not in input_set:
            raise ValueError(f"tensor {t.name!r} {list(t.shape)} is needed to compute the outputs "
                             f"but is not among the inputs ({', '.join(i.name for i in inputs) or 'none'})")
    forced = set(t.op for t in opts.materialize)
    materialized = choose_materialized(tensors, outputs, input_set, set(t.op for t in opts.inline), forced)
    ops = [op for op in dict.fromkeys(t.op for t in tensors if t not in input_set) if op in materialized]
    bodies = {op: inline_bodies(op, materialized, input_set) for op in ops}
    target = opts.target or parse_target()
    ops = store_operands(ops, bodies, materialized, {t.op for t in outputs} | forced, target)
    ops = _live_ops(ops, bodies, outputs)
    state = _Rewriting(ops, bodies, frozenset(outputs), opts.fuse, opts.winograd if opts.fastmath else 0,
                      opts.fastmath, target)
    for rewrite in PRE_PLANNING_PASSES:
        rewrite(state)
    ops, bodies = state.ops, state.bodies
    readers: dict[ComputeOp, list[ComputeOp]] = {op: [] for op in ops}
    for op in ops:
        for n in (n for b in bodies[op] for n in walk(b)):
            if n.op is Op.READ and n.arg.op in readers and op not in readers[n.arg.op]:
                readers[n.arg.op].append(op)
    ctx = PlanContext(opts=opts, target=target, outputs=frozenset(outputs),
                      hidden_sums=frozenset(outputs[k] for k in opts.hidden_sums),
                      largest=max(t.size for t in inputs + outputs), readers=readers, bodies=bodies,
                      position={op: k for k, op in enumerate(ops)}, registry=REGISTRY,
                      forced=MICROKERNEL_FIRST if opts.microkernel is True else (),
                      choices=dict(opts.choices), tuning=opts.variants)
    steps, alias = plan_ops(ops, bodies, ctx)
    units = [make_unit(s) for s in steps]
    groups = (plan_groups(order_siblings(units, alias), alias) if opts.fuse
              else [Group([u], 0, [()]) for u in units])
    alone = (ScatterNest, ScanNest)  # a scatter-add or a scan is a nest of its own
    groups = [h for g in groups for h in
              ([Group([u], 0, [()]) for u in g.units] if any(isinstance(u.plan, alone) for u in g.units)
               else [g])]
    memo = _LoweringMemo(ctx.memo)
    while True:  # a group that cannot be fused exactly is lowered member by member
        program, failed = _lower_groups(name, groups, tensors, inputs, outputs, materialized, bodies, opts,
                                        alias, memo)
        if failed is None:
            return place_fills(program, opts, ctx.target), opts, tuple(ctx.offered), ctx.estimates
        groups = groups[:failed] + [Group([u], 0, [()]) for u in groups[failed].units] + groups[failed + 1:]


@dataclass
class _Rewriting:
    """What the pre-planning passes rewrite: the materialized ops in order and their inlined
    bodies (a pass may add ops, drop them, or change bodies)."""

    ops: list[ComputeOp]
    bodies: dict
    outputs: frozenset
    fuse: bool
    winograd: int | None  # the ``winograd`` option (0 with ``fastmath=False``: sums add in the spelled order)
    fastmath: bool
    target: Target


def _each_body(rewrite: Callable[[Expr], Expr]) -> Callable[[_Rewriting], None]:
    def run(state: _Rewriting) -> None:
        state.bodies = {op: tuple(rewrite(b) for b in bs) for op, bs in state.bodies.items()}
    return run


def _new_ops(make: Callable[[_Rewriting], list[ComputeOp]]) -> Callable[[_Rewriting], None]:
    def run(state: _Rewriting) -> None:
        state.ops = make(state)
    return run


def _prove_bounds(state: _Rewriting) -> None:
    """The inlined bodies read in bounds too (the passes above build ops unchecked), and their
    index arithmetic fits 64 bits."""
    for op in state.ops:
        check_op_bounds(ComputeOp(op.name, op.tag, op.axes, state.bodies[op], op.attrs))
        check_index_range(state.bodies[op], op.name)


def _stacked(state: _Rewriting) -> list[ComputeOp]:
    state.ops = stack_sums(state.ops, state.bodies, state.outputs, _reads_in_bounds)
    return stack_shared_sides(state.ops, state.bodies, state.outputs, _reads_in_bounds)


# The rewrites between choosing buffers and planning, in order (:mod:`.passes`): a reduction's guard of its
# identity moved into its domain; a stored transcendental value read instead of recomputed; a sum of a product
# over several variables as nested sums; a running reduction over independent ranges as nested scans;
# temporaries shrunk to the points their readers read; one buffer for a masked sum of scatter-adds read twice;
# a compound operand read through windows computed once; safe if_then_else made select; costly contexts of
# eager choices computed once; a sum spelled twice, once transposed, computed once; several products summed as
# one product over one more axis; 3x3 sums by Winograd's transforms where they pay; an output copying a
# temporary computes it (with fuse); sums over one residue class re-indexed; sums over a flat axis read
# through // and % summed over its digits (not a matrix product's).
PRE_PLANNING_PASSES: tuple[Callable[[_Rewriting], None], ...] = (
    _each_body(guard_into_domain),
    lambda s: reuse_materialized(s.ops, s.bodies, _reads_in_bounds),
    _new_ops(lambda s: contract_sums(s.ops, s.bodies)),
    _new_ops(lambda s: split_scans(s.ops, s.bodies, s.fastmath)),
    lambda s: setattr(s, "bodies", zero_terms_into_domain(s.ops, s.bodies)),
    lambda s: setattr(s, "bodies", shrink_to_footprints(s.ops, s.bodies, {t.op for t in s.outputs})),
    _prove_bounds,
    _new_ops(lambda s: share_scatter_sums(s.ops, s.bodies, s.outputs, _reads_in_bounds)),
    _new_ops(lambda s: share_windowed_operands(s.ops, s.bodies, _reads_in_bounds)),
    _each_body(speculate),
    _each_body(factor_choices),
    _new_ops(lambda s: merge_transposed(s.ops, s.bodies, s.outputs)),
    _new_ops(_stacked),
    _new_ops(lambda s: winograd(s.ops, s.bodies, _reads_in_bounds, s.winograd, s.outputs,
                                s.target.vector_bits)),
    _new_ops(lambda s: elide_copies(s.ops, s.bodies, s.outputs) if s.fuse else s.ops),
    _each_body(unstride),
    lambda s: setattr(s, "bodies", {op: split_digits(op, bs, s.target) for op, bs in s.bodies.items()}),
)


def _live_ops(ops: list[ComputeOp], bodies: dict, outputs: list[Tensor]) -> list[ComputeOp]:
    """The ops that the outputs read, once inlining has settled who reads whom: not the reductions lifted
    out of an output of a multi-output op that nobody reads, nor those of a reduction over an empty box
    (its identity, which reads nothing)."""
    known = set(ops)
    live = {t.op for t in outputs if t.op in known}
    todo = list(live)
    while todo:
        for n in (n for b in bodies[todo.pop()] if not empty_reduction(b) for n in walk(b)):
            if n.op is Op.READ and n.arg.op in known and n.arg.op not in live:
                live.add(n.arg.op)
                todo.append(n.arg.op)
    return [op for op in ops if op in live]


def _reads_in_bounds(op: ComputeOp, bodies: tuple) -> bool:
    try:
        check_op_bounds(ComputeOp(op.name, op.tag, op.axes, bodies, op.attrs))
    except OutOfBoundsError:
        return False
    return True


class _LoweringMemo:
    """What one ``lower`` call keeps between its attempts (an unfusable group is split and the program
    lowered again): the tensors each unit reads, the buffers, and the steps of every group whose buffers
    did not change; ``isl``: the planner's memo (:attr:`.strategies.registry.PlanContext.memo`), which
    also keeps isl's ASTs and the answers planning and lowering both ask isl."""

    def __init__(self, isl: dict) -> None:
        self.reads: dict[Unit, frozenset] = {}
        self.buffers: dict[Tensor, Buffer] = {}
        self.steps: dict[tuple, list | None] = {}
        self.scans = isl  # isl's ASTs by schedule map (:func:`.loops.isl_ast.build_loops`), and more
        self.shared = SharedLowering()  # groups lowered once per name-free key (:mod:`.loops.shared_nests`)

    def unit_reads(self, u: Unit) -> frozenset:
        found = self.reads.get(u)
        if found is None:
            p, core = u.plan, u.plan.core
            sides = (core.gemm.a, core.gemm.b) if isinstance(core, ProductCall) else ()  # (padded copies)
            # a scatter's specs read what its conditions, guards and targets read
            spec = tuple(e for sc in p.specs for e in (*sc.target, sc.value, *sc.sources, sc.cond,
                                                       sc.guard)) if isinstance(p, ScatterNest) else ()
            found = self.reads[u] = frozenset(n.arg for b in {*p.bodies, *core.bodies, *sides, *spec}
                                              for n in walk(b) if n.op is Op.READ)
        return found

    def buffer(self, name: str, t: Tensor, kind: str) -> Buffer:
        """The buffer of ``t`` made by an earlier attempt when it is the same, else a new one."""
        b = self.buffers.get(t)
        if b is None or b.name != name or b.kind != kind:
            b = self.buffers[t] = Buffer(name, t.shape, t.dtype, kind, t)
        return b


def _lower_groups(name: str, groups: list[Group], tensors, inputs, outputs, materialized, bodies: dict,
                  opts: Options, alias: dict, memo: _LoweringMemo) -> tuple[Program | None, int | None]:
    """The program of ``groups``, or the index of a group that could not be fused."""

    def tensor_of(op: ComputeOp, v: int) -> Tensor:  # what a unit's op writes
        return Tensor(alias.get(op, op), v)

    input_set = set(inputs)
    # which tensors need a buffer: outputs, and what a later group reads
    group_of = {u.op: k for k, g in enumerate(groups) for u in g.units}
    read_by: dict[Tensor, set[int]] = {}
    for k, g in enumerate(groups):
        for u in g.units:
            for t in memo.unit_reads(u):
                read_by.setdefault(t, set()).add(k)
    scalar = {op for g in groups if len(g.units) > 1 for op in g.scalar_reductions()
              if covers_box(op, bodies[op])}
    output_set = set(outputs)

    def needs_buffer(t: Tensor) -> bool:
        if t in output_set:
            return True
        readers = read_by.get(t, set())
        if t.op in scalar:
            readers = readers - {group_of[t.op]}
        return bool(readers)

    namer = Namer()
    buffers: dict[Tensor, Buffer] = {t: memo.buffer(namer.tensor(t), t, kind)
                                     for kind, ts in (("input", inputs), ("output", outputs)) for t in ts}
    temps = []
    for g in groups:
        for u in g.units:
            kept = {v for v in range(u.op.num_outputs) if needs_buffer(tensor_of(u.op, v))}
            kept = carried(u.plan.bodies[0].arg.combiner, kept) if isinstance(u.plan, ScanNest) else kept
            if isinstance(u.plan, ScatterNest) and u.plan.specs[0].combiner is not None:
                kept = set(range(u.op.num_outputs))  # (the scatter combines into every value)
            for t in (tensor_of(u.op, v) for v in sorted(kept)):
                if t not in buffers:
                    buffers[t] = memo.buffer(namer.tensor(t), t, "temp")
                    temps.append(buffers[t])
    for op, target in alias.items():  # (reads of a chunk's padded copy name the shared buffer)
        for mine, its in ((Tensor(op, v), Tensor(target, v)) for v in range(op.num_outputs)):
            if mine.shape[1:] != its.shape[1:] or mine.shape[:1] > its.shape[:1] or mine.dtype != its.dtype:
                raise AssertionError(f"{mine.name} {mine.shape} cannot share {its.name}'s buffer {its.shape}")
            if its in buffers:
                buffers.setdefault(mine, buffers[its])
    inlined = [namer.tensor(t) for t in tensors
               if isinstance(t.op, ComputeOp) and t not in input_set and t.op not in materialized]

    def outs_of(op: ComputeOp) -> list[Buffer | None]:
        return [buffers.get(tensor_of(op, v)) for v in range(op.num_outputs)]

    steps: list = []
    for k, g in enumerate(groups):
        key = (g, tuple(tuple(outs_of(u.op)) for u in g.units), frozenset(scalar & {u.op for u in g.units}))
        if key not in memo.steps:
            memo.steps[key] = memo.shared.steps(
                g, bodies, outs_of, scalar, buffers.get,
                lambda g=g: _finished(_lower_one_group(g, bodies, outs_of, scalar, opts, memo.scans, alias),
                                      opts))
        made = memo.steps[key]
        if made is None:
            return None, k
        steps.extend(made)
        temps.extend(b for st in made if isinstance(st, Nest) for b in st.temps)
    return Program(name, [buffers[t] for t in inputs], [buffers[t] for t in outputs], temps, steps,
                   buffers, inlined), None


def _finished(steps: list | None, opts: Options) -> list | None:
    """``steps`` without the nests that store nothing (a nest has no effect but its stores), their float32
    sums accumulated in blocks (:mod:`.loops.cascade`)."""
    storing = None if steps is None else [st for st in steps if not isinstance(st, Nest) or stores(st.body)]
    return None if storing is None else cascade_sums(storing, opts.fastmath)


def _lower_one_group(g: Group, bodies: dict, outs_of, scalar: set, opts: Options,
                     scans: dict | None = None, alias: dict | None = None) -> list | None:
    """The steps of one group (``None``: its members cannot be fused exactly); ``scans``: the call's isl
    ASTs (:func:`.loops.isl_ast.build_loops`); ``alias``: a unit's op -> the op it writes for."""
    if g.strips:
        return lower_strips(g, bodies, outs_of, opts, scans)
    if len(g.units) > 1:
        return lower_group(g, bodies, outs_of, scalar, opts, scans, alias)
    u = g.units[0]
    if isinstance(u.plan, ScatterNest):
        outs = outs_of(u.op)
        if u.plan.specs[0].combiner is not None:  # (a combiner's scatter holds every value: each is kept)
            return lower_scatter(u.op, u.plan.specs, outs, opts)
        return lower_scatter(u.op, u.plan.specs, outs[0], opts) if outs[0] is not None else []
    if isinstance(u.plan, EpilogueStep):  # (a product's epilogue: emitted by the micro-kernel)
        kept = outs_of(u.plan.reduction.op) if u.plan.epilogue.keep else []  # (the reduction an output too)
        return _lower_op(u.plan.reduction, bodies, outs_of(u.op) + kept, opts, u.plan.epilogue, scans=scans)
    split = unit_split(u, bodies[u.op], (), opts.target or parse_target())  # (short rows as one loop)
    made = _lower_op(u.plan, bodies, outs_of(u.op), opts, None, split, scans)
    if u.op.attr("padded_from", 0):  # a later chunk's copy: the shared border is zero already
        made = [st for st in made if not isinstance(st, Fill)]
    return made


def _lower_op(step: Step, bodies: dict, outs: list[Buffer | None], opts: Options, epilogue=None,
              split=None, scans: dict | None = None) -> list:
    """The steps (fills, then one nest) computing one materialized op (a product's
    ``batch_range = (axis, lo, hi)``: only those batch points, see :mod:`.gemm.padding`)."""
    op = step.op
    gemm, batch_range = (step.gemm, step.batch_range) if isinstance(step, ProductCall) else (None, None)
    dom = op_domain(op, bodies[op], outs, epilogue, split, scans)
    stmts, attrs = schedule_nest(op, dom, outs, opts, plan=step)
    if batch_range is not None:
        stmts = restrict_batch(stmts, *batch_range)
    body = build_loops(stmts, scans)
    work = count_work(body)
    body, attrs = mark_parallel(body, attrs, opts, work, work_weight(bodies[op]))
    parallel = attrs.range is not None
    if gemm is not None:  # printed and counted as the plain loops and the packing's evaluations
        packed = pack_work(gemm)
        work += packed
        note = gemm.describe() + (f"; its packing computes {packed} values" if packed else "")
        if batch_range is not None:
            axis, first, stop = batch_range
            note += f" for {axis.name} in {first}..{stop - 1}"
        attrs = NestAttrs(note, range=(0, gemm.blocks, 1), gemm=gemm)
        if epilogue is not None:  # (C is written whole before its consumer runs: nothing to fill)
            dom.fills = []
        parallel = opts.parallel and gemm.blocks >= 2 and gemm.flops >= 2 * opts.parallel_min_work
    if batch_range is not None and batch_range[1] != batch_range[0].lo:
        dom.fills = []  # (made by the first chunk)
    note = "; ".join(n for n in (dom.note, attrs.note) if n)
    nest = Nest(marked(op.name), body, tuple(b for b in outs if b is not None), work, note, parallel,
                dom.accumulators, attrs)
    return [*dom.fills, nest]
