"""Code-generation strategies as registered objects, and the driver that chooses among them.

Each way of computing an op is a :class:`Strategy`:

* ``match(op, bodies, ctx)`` -- the candidates it offers (several: variants, which ``tune=True`` measures);
* ``cost(candidate, target)`` -- estimated cycles on one core of ``target``;
* ``lower(candidate, ctx)`` -- a :class:`Plan`: its units (a :class:`Step` of one kind), new ops to plan
  in turn (:class:`Open`), buffers shared between ops (``alias``) and earlier ops it absorbs.

:func:`plan_ops` keeps the first candidate of the first strategy the options force
(:attr:`PlanContext.forced`), else the cheapest (cost minus the plans it absorbs; ties to the strategy
registered first), and expands its plan; it knows no strategy by name.  A candidate is named by its
``Candidate.label``, its op by a *point*: ``Options.choices`` pins a point to a label, and
:attr:`PlanContext.offered` records what was offered."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from tensorad.ir.expr import Expr
from tensorad.ir.tensor import ComputeOp, Tensor

from ..gemm.contraction import Contraction
from ..loops.stripmine import AxisSplit
from ..target import Target
from .epilogue import Epilogue

MAX_DEPTH = 4  # plans nested deeper than this (a piece of a half of ...) are refused


@dataclass(frozen=True, eq=False)
class Step:
    """One unit of the program: ``op`` computed by one nest or micro-kernel call, of a kind below."""

    op: ComputeOp
    bodies: tuple[Expr, ...]

    @property
    def core(self) -> Step:
        """The step whose nest or call computes this one: itself, or an epilogue's reduction."""
        return self


@dataclass(frozen=True, eq=False)
class PointwiseNest(Step):
    """An elementwise op's nest, its axes scanned as digits where ``split`` says."""

    split: AxisSplit | None


@dataclass(frozen=True, eq=False)
class ReductionNest(Step):
    """A reduction's nest: scalar accumulators, or accumulating in ``strips`` of the output."""

    strips: bool = False


class ScanNest(Step):
    """A running reduction carried along an output axis (:mod:`.strategies.scan`)."""


@dataclass(frozen=True, eq=False)
class ScatterNest(Step):
    """Scatter-adds into ``op``'s buffer (:mod:`.strategies.scatter`), reading ``bodies``."""

    specs: tuple  # ScatterSpec, ...


@dataclass(frozen=True, eq=False)
class ProductCall(Step):
    """A micro-kernel call, over the batch points ``(axis, lo, hi)`` of ``batch_range`` or all."""

    gemm: Contraction
    batch_range: tuple | None = None


@dataclass(frozen=True, eq=False)
class EpilogueStep(Step):
    """Elementwise ``op`` stored by its reduction's nest or call, which applies ``epilogue``."""

    epilogue: Epilogue
    reduction: ReductionNest | ProductCall

    @property
    def core(self) -> Step:
        return self.reduction


def kept_outs(step: Step, outs_of) -> list:
    """The buffers of an epilogue's reduction that is an output too (``Epilogue.keep``), else none."""
    return outs_of(step.reduction.op) if isinstance(step, EpilogueStep) and step.epilogue.keep else []


@dataclass(frozen=True, eq=False)
class Open:
    """A new op that the registry plans in turn (its candidates compete like any op's)."""

    op: ComputeOp
    bodies: tuple[Expr, ...]


@dataclass(eq=False)
class Plan:
    steps: list[Step | Open]
    alias: dict[ComputeOp, ComputeOp] = field(default_factory=dict)
    absorbs: tuple[ComputeOp, ...] = ()


@dataclass(frozen=True, eq=False)
class Candidate:
    """One way ``strategy`` offers to compute ``op``; ``data`` is the strategy's own."""

    strategy: Strategy
    op: ComputeOp
    bodies: tuple[Expr, ...]
    data: Any = None
    variant: str = ""
    absorbs: tuple[ComputeOp, ...] = ()
    single_nest: bool = False  # one plain nest computes ``op`` (an epilogue may join it)

    @property
    def label(self) -> str:
        return self.strategy.name + (f":{self.variant}" if self.variant else "")


class Strategy(Protocol):
    name: str

    def match(self, op: ComputeOp, bodies: tuple[Expr, ...], ctx: PlanContext) -> list[Candidate]: ...

    def cost(self, cand: Candidate, ctx: PlanContext) -> float: ...

    def lower(self, cand: Candidate, ctx: PlanContext) -> Plan: ...


@dataclass(eq=False)
class PlanContext:
    """What strategies may read while one program is planned."""

    opts: Any  # options.Options (for lowering)
    target: Target
    outputs: frozenset[Tensor]
    largest: int  # elements of the largest input or output (temporaries stay below it)
    readers: dict[ComputeOp, list[ComputeOp]]  # materialized op -> the ops reading it
    bodies: dict  # op -> its bodies as lowered
    position: dict[ComputeOp, int]  # the program's ops in order
    registry: tuple = ()
    hidden_sums: frozenset[Tensor] = frozenset()  # a one-block kernel's sums over its rows, no program output
    forced: tuple = ()  # strategy classes chosen whatever they cost, the first offered first
    tuning: bool = False  # strategies offer all their variants (tile choices)
    choices: dict[str, str] = field(default_factory=dict)  # point -> candidate label
    chosen: dict[ComputeOp, Candidate] = field(default_factory=dict)
    costs: dict[ComputeOp, float] = field(default_factory=dict)
    offered: list[tuple[str, tuple[str, ...], str]] = field(default_factory=list)
    #: point -> the cost model's cycles for its costliest candidate (what is at stake there:
    #: :mod:`.tune` leaves alone the points too small for a measurement to tell apart)
    estimates: dict[str, float] = field(default_factory=dict)
    #: what several strategies compute for one op, computed once per call (the matrix-product
    #: match of an op is asked by the micro-kernel, padded, split-K and parity strategies); the
    #: call's lowering keeps its isl answers here too (:class:`.lower._LoweringMemo`)
    memo: dict = field(default_factory=dict)

    def candidates(self, op: ComputeOp, bodies: tuple[Expr, ...]) -> list[Candidate]:
        """Every registered strategy's candidates for ``op``."""
        return [c for s in self.registry for c in s.match(op, bodies, self)]

    def net(self, cand: Candidate, own: float) -> float:
        """``cand``'s cost ``own`` less what the plans it absorbs cost (they are then not run)."""
        return own - sum(self.costs.get(a, 0.0) for a in cand.absorbs)


def pieces_then(pieces: list[ComputeOp], last: ComputeOp, op: ComputeOp) -> Plan:
    """``pieces`` planned in turn, then ``last``, which stores into ``op``'s buffer."""
    return Plan([Open(p, p.body) for p in [*pieces, last]], alias={last: op})


def choose(op: ComputeOp, bodies: tuple[Expr, ...], ctx: PlanContext, point: str) -> Candidate:
    cands = ctx.candidates(op, bodies)
    if not cands:
        raise AssertionError(f"no code-generation strategy matches {op.name}")  # (plain loops always do)
    own = [c.strategy.cost(c, ctx) for c in cands]  # (each candidate costed once)
    pinned = ctx.choices.get(point)
    k = next((k for k, c in enumerate(cands) if c.label == pinned), None) if pinned else None
    if k is None:
        k = next((k for s in ctx.forced for k, c in enumerate(cands) if isinstance(c.strategy, s)), None)
    if k is None:  # (min keeps the first of equal costs)
        k = min(range(len(cands)), key=lambda m: ctx.net(cands[m], own[m]))
    best = cands[k]
    if len(cands) > 1:
        ctx.offered.append((point, tuple(c.label for c in cands), best.label))
        ctx.estimates[point] = max(own)
    ctx.chosen[op] = best
    ctx.costs[op] = own[k]
    return best


def plan_ops(ops: list[ComputeOp], bodies: dict, ctx: PlanContext
             ) -> tuple[list[Step], dict[ComputeOp, ComputeOp]]:
    """The units of ``ops`` (in order) and the buffers shared between ops; ``bodies`` gains new ops'."""
    alias: dict[ComputeOp, ComputeOp] = {}
    items_of: dict[ComputeOp, list[Step]] = {}

    def expand(op: ComputeOp, op_bodies: tuple, point: str, depth: int) -> list[Step]:
        if depth > MAX_DEPTH:
            raise AssertionError(f"code-generation plans nest deeper than {MAX_DEPTH} at {point}")
        cand = choose(op, op_bodies, ctx, point)
        plan = cand.strategy.lower(cand, ctx)
        alias.update(plan.alias)
        for a in plan.absorbs:
            items_of[a] = []
        out: list[Step] = []
        for k, step in enumerate(plan.steps):
            bodies[step.op] = step.bodies
            if isinstance(step, Open):
                out.extend(expand(step.op, step.bodies, f"{point}/{k}", depth + 1))
            else:
                out.append(step)
        return out

    for k, op in enumerate(ops):
        items_of[op] = expand(op, bodies[op], f"{op.name}#{k}", 0)
    return [it for op in ops for it in items_of[op]], _resolved(alias)


def _resolved(alias: dict[ComputeOp, ComputeOp]) -> dict[ComputeOp, ComputeOp]:
    """Each op's alias followed to its end: a plan may rewrite an op an outer plan made, and the readers
    name the first op, so the last stores into its buffer."""
    out = {}
    for op, target in alias.items():
        seen = {op}
        while target in alias and target not in seen:
            seen.add(target)
            target = alias[target]
        out[op] = target
    return out
