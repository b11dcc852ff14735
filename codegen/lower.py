"""``ta.lower``: tensors to a loop program (API.md section 3).

Steps: collect the ops between the outputs and the given inputs; choose which get buffers
(:mod:`.inline`); substitute inlined bodies; prove every read of the result in bounds; turn each
materialized op into polyhedral statements (:mod:`.domain`), pick loop order, tiling and parallel
loops (:mod:`.schedule`), and let isl build exact loops (:mod:`.islast`); count the work
(:mod:`.work`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from threading import Lock
from typing import Any

from tensorad.ir.expr import Op
from tensorad.ir.printer import Namer
from tensorad.ir.tensor import ComputeOp, Tensor
from tensorad.lang.bounds import check_op_bounds

from .contraction import match_contraction, worth_it
from .domain import covers_box, op_domain
from .fuse import find_epilogues
from .inline import choose_materialized, graph_ops, inline_bodies
from .islast import build_loops
from .program import Buffer, Loop, Nest, Program, program_text
from .schedule import Options, schedule_nest
from .work import count_work


class LoweredFunc:
    """The loop program ``build`` compiles; ``str()`` shows it, ``.work`` counts its work."""

    def __init__(self, program: Program, options: Options) -> None:
        self.program = program
        self.options = options
        self.text = program_text(program)
        self.work = sum(s.work for s in program.steps if isinstance(s, Nest))

    @property
    def inputs(self) -> list[Buffer]:
        return self.program.inputs

    @property
    def outputs(self) -> list[Buffer]:
        return self.program.outputs

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<LoweredFunc {self.program.name}: work={self.work}>\n{self.text}"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.text)


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


def _check_io(outputs: list[Tensor], inputs: list[Tensor]) -> None:
    if not outputs:
        raise ValueError("lower/build: no outputs given")
    for what, ts in (("outputs", outputs), ("inputs", inputs)):
        seen = set()
        for t in ts:
            if t in seen:
                raise ValueError(f"{what}: tensor {t.name!r} is listed twice")
            seen.add(t)
    for t in outputs:
        if t in set(inputs):
            raise ValueError(f"tensor {t.name!r} is both an input and an output")


_CACHE: OrderedDict = OrderedDict()
_CACHE_LOCK = Lock()
_CACHE_SIZE = 256


def lower(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor = (),
          name: str = "kernel", **options: Any) -> LoweredFunc:
    """The loop nest of ``outputs`` computed from ``inputs`` (see the module docstring).

    Accepts the options of ``build`` (:class:`.schedule.Options`); those that only change
    compilation are ignored here.  Results are cached per (outputs, inputs, options).
    """
    outputs, inputs = as_tensor_list(outputs, "outputs"), as_tensor_list(inputs, "inputs")
    _check_io(outputs, inputs)
    opts = Options.make(options).for_lowering()
    key = (tuple(outputs), tuple(inputs), name, opts)
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is not None:
            _CACHE.move_to_end(key)
            return found
    result = LoweredFunc(_lower_program(outputs, inputs, name, opts), opts)
    with _CACHE_LOCK:
        _CACHE[key] = result
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return result


def _lower_program(outputs: list[Tensor], inputs: list[Tensor], name: str, opts: Options) -> Program:
    input_set = set(inputs)
    tensors = graph_ops(outputs, input_set)
    for t in tensors:
        if t.is_placeholder and t not in input_set:
            raise ValueError(f"tensor {t.name!r} {list(t.shape)} is needed to compute the outputs "
                             f"but is not among the inputs ({', '.join(i.name for i in inputs) or 'none'})")
    materialized = choose_materialized(tensors, outputs, input_set,
                                       set(t.op for t in opts.inline), set(t.op for t in opts.materialize))
    ops = [op for op in dict.fromkeys(t.op for t in tensors if t not in input_set) if op in materialized]
    bodies = {op: inline_bodies(op, materialized, input_set) for op in ops}
    for op in ops:  # the inlined bodies must read in bounds too (passes build ops unchecked)
        check_op_bounds(ComputeOp(op.name, op.tag, op.axes, bodies[op], op.attrs))
    gemms = {op: _is_gemm(op, bodies[op], opts) for op in ops}
    epilogues = {} if not opts.fuse else find_epilogues(
        [op for op in ops if gemms[op] is None], bodies, set(outputs), covers_box)
    fused_into = {e.consumer: r for r, e in epilogues.items()}

    namer = Namer()
    buffers: dict[Tensor, Buffer] = {}
    for kind, ts in (("input", inputs), ("output", outputs)):
        for t in ts:
            buffers[t] = Buffer(namer.tensor(t), t.shape, t.dtype, kind, t)
    temps = []
    for op in ops:
        if op in epilogues:
            continue  # its values go straight into the consumer's buffer
        for t in (Tensor(op, v) for v in range(op.num_outputs)):
            if t not in buffers:
                buffers[t] = Buffer(namer.tensor(t), t.shape, t.dtype, "temp", t)
                temps.append(buffers[t])
    inlined = [namer.tensor(t) for t in tensors
               if isinstance(t.op, ComputeOp) and t not in input_set and t.op not in materialized]

    steps: list = []
    for op in ops:
        if op in epilogues:
            continue  # emitted at its consumer's place
        if op in fused_into:
            epilogue = epilogues[fused_into[op]]
            steps.extend(_lower_op(fused_into[op], bodies, [buffers[Tensor(op, 0)]], epilogue, None, opts))
        else:
            outs = [buffers[Tensor(op, v)] for v in range(op.num_outputs)]
            steps.extend(_lower_op(op, bodies, outs, None, gemms[op], opts))
    return Program(name, [buffers[t] for t in inputs], [buffers[t] for t in outputs], temps, steps,
                   buffers, inlined)


def _lower_op(op: ComputeOp, bodies: dict, outs: list[Buffer], epilogue, gemm, opts: Options) -> list:
    """The steps (fills, then one nest) computing one materialized op."""
    dom = op_domain(op, bodies[op], outs, epilogue)
    stmts, attrs = schedule_nest(op, dom, outs, opts)
    body = build_loops(stmts)
    work = count_work(body)
    body, parallel = mark_parallel(body, attrs, opts, work)
    if parallel:
        attrs["range"] = (int(body[0].lo.arg), int(body[0].hi.arg))
    if gemm is not None:  # printed and counted as the plain loops, emitted as the micro-kernel
        attrs = {"gemm": gemm, "note": gemm.describe(), "range": (0, gemm.blocks)}
        parallel = opts.parallel and gemm.blocks >= 2 and gemm.flops >= 2 * opts.parallel_min_work
    note = "; ".join(n for n in (dom.note, attrs.get("note", "")) if n)
    nest = Nest(op.name, body, tuple(outs), work, note, parallel, dom.accumulators, attrs)
    return [*dom.fills, nest]


def _is_gemm(op: ComputeOp, bodies: tuple, opts: Options):
    """The contraction form of ``op`` when the micro-kernel should compute it."""
    if opts.microkernel is False or not op.is_reduction:
        return None
    spec = match_contraction(op, bodies, opts.tile)
    return spec if spec is not None and worth_it(spec, opts.microkernel) else None


def mark_parallel(body: tuple, attrs: dict, opts: Options, work: int) -> tuple[tuple, bool]:
    """Mark the outermost loop parallel when it is the only top statement, has constant bounds
    and scans the time dimension the schedule declared parallel (an output axis: each
    iteration writes its own elements), and the nest has enough work to share: with less than
    ``opts.parallel_min_work`` waking a second thread costs more than it saves (and on a loaded
    machine a sleeping worker can wait a whole scheduler time slice, ~4 ms)."""
    if not opts.parallel or work < opts.parallel_min_work or len(body) != 1 or not isinstance(body[0], Loop):
        return body, False
    loop = body[0]
    if loop.lo.op is not Op.CONST or loop.hi.op is not Op.CONST or loop.hi.arg - loop.lo.arg < 2:
        return body, False
    if loop.dim != attrs.get("parallel_dim", -1):
        return body, False
    return (Loop(loop.var, loop.lo, loop.hi, loop.body, loop.step, "parallel", loop.dim),), True
