"""Which forward values a backward reads from the forward, and which it recomputes.

The part of a gradient ``J^T heads`` that does not depend on a head is *saved* by the forward or
recomputed by the backward, per tensor by a checkpoint policy, as JAX's ``checkpoint_policies``:
``"default"`` saves reductions, the outputs and the transcendental values :mod:`.training.saved_values`
finds cheaper to load; ``"save_all"`` every forward value the backward reads; ``"recompute_all"`` nothing;
a function ``policy(tensor) -> bool`` what it returns True for.  The plan cuts the backward's graph at the
saved tensors (the backward kernel's inputs), keeping those the cut graph still reaches."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ..autodiff.adjoint import recomputes_exactly
from ..autodiff.combiners import classify
from ..ir.expr import Expr, Op
from ..ir.rewrite import free_vars, op_reads, substitute, tensor_graph
from ..ir.tensor import ComputeOp, Role, Tensor
from .saved_values import share_values

Policy = str | Callable[[Tensor], bool]
POLICIES = ("default", "save_all", "recompute_all")


def check_policy(policy: Policy) -> None:
    if callable(policy) and not isinstance(policy, str):
        return
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(map(repr, POLICIES))} or a function "
                         f"tensor -> bool, got {policy!r}")


def _must_share(t: Tensor) -> bool:
    return isinstance(t.op, ComputeOp) and t.op.provenance.role is Role.SAVED


def _decides_by_comparing(t: Tensor) -> bool:
    """Whether the backward compares values with ``t`` to make a discrete choice: a reduction that is not
    a sum (a max's winner and ties, a product's zero count or exclusive scans)."""
    return isinstance(t.op, ComputeOp) and t.op.is_reduction and any(
        b.op is Op.REDUCE and classify(b.arg.combiner)[0] != "sum" for b in t.op.body)


def _same_pass(chosen: set[Tensor], on_head: set[Tensor]) -> set[Tensor]:
    """The tensors to save beside ``chosen`` so that the backward compares the forward's bits: what a
    saved winner ``W = argmax_k f(R[k])`` reads is saved too (recomputed, ``R`` may round differently),
    unless recomputing is exact (:func:`~.autodiff.adjoint.recomputes_exactly`, over saved, placeholder or
    exact tensors)."""
    todo = [r for t in chosen if _decides_by_comparing(t) for r in op_reads(t.op)]
    seen: set[Tensor] = set()
    more: set[Tensor] = set()
    while todo:
        r = todo.pop()
        if r in seen or r.is_placeholder or r in chosen or r in on_head:
            continue
        seen.add(r)
        if isinstance(r.op, ComputeOp) and not r.op.is_reduction \
                and all(recomputes_exactly(b) for b in r.op.body):
            todo.extend(op_reads(r.op))
        else:
            more.add(r)
    return more


def _chooser(policy: Policy, outputs: set[Tensor]) -> Callable[[Tensor], bool]:
    if policy == "default":
        return lambda t: t in outputs or _must_share(t) or (isinstance(t.op, ComputeOp) and t.op.is_reduction)
    if policy == "save_all":
        return lambda t: True
    if policy == "recompute_all":
        return lambda t: False

    def ask(t: Tensor) -> bool:
        answer = policy(t)
        if not isinstance(answer, bool):
            raise TypeError(f"policy({t.name!r}) must return True (save) or False (recompute), "
                            f"got {answer!r}")
        return answer
    return ask


@dataclass(frozen=True)
class ResidualPlan:
    """What the forward saves for the backward.  ``inputs``: the inputs the backward reads (indices into
    the function's inputs); ``saved``: the forward tensors it reads instead of recomputing, producers
    first; ``extras``: those of ``saved`` that are not outputs; ``outputs`` and ``grads``: the forward's
    outputs and the gradients as computed with residuals (reading :mod:`.training.saved_values`'s shared
    values where saved).  The residuals are the values of ``inputs`` then ``saved``.  ``original``: each
    rewritten tensor -> the given tensor it stands for."""

    inputs: tuple[int, ...]
    saved: tuple[Tensor, ...]
    extras: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    grads: tuple[Tensor, ...] = ()
    original: Mapping[Tensor, Tensor] = field(default_factory=dict)

    @cached_property
    def sources(self) -> tuple[tuple[str, int], ...]:
        """Where each residual comes from: ``("input", i)``, ``("output", k)`` or ``("extra", j)``."""
        extras: dict[Tensor, int] = {}
        outputs: dict[Tensor, int] = {}
        for j, t in enumerate(self.extras):
            extras.setdefault(t, j)
        for k, t in enumerate(self.outputs):
            outputs.setdefault(t, k)
        return (*(("input", i) for i in self.inputs),
                *(("extra", extras[t]) if t in extras else ("output", outputs[t]) for t in self.saved))


def same_values(y: Tensor, w: Tensor) -> bool:
    """Whether ``w`` (one value of a tuple reduction) holds exactly the values of the reduction ``y``: the
    same box, condition and source, and a combiner whose element is ``y``'s own (max pooling's winner
    carries the maximum: the forward need not compute it twice)."""
    if not (isinstance(y.op, ComputeOp) and isinstance(w.op, ComputeOp) and y.op.is_reduction
            and w.op.is_reduction) or y.op is w.op or y.shape != w.shape or y.dtype != w.dtype:
        return False
    a, b = y.op.body[y.value_index], w.op.body[w.value_index]
    ca, cb = a.arg.combiner, b.arg.combiner
    if ca.arity != 1 or a.arg.value_index != 0 or b.arg.value_index != 0:
        return False
    if not (cb.lhs[0] is ca.lhs[0] and cb.rhs[0] is ca.rhs[0] and cb.result[0] is ca.result[0]
            and cb.identity[0] is ca.identity[0]):
        return False
    if set(free_vars(cb.result[0])) - {ca.lhs[0], ca.rhs[0]}:
        return False
    ra, rb = a.arg.axes, b.arg.axes
    if len(ra) != len(rb) or any((u.lo, u.hi) != (v.lo, v.hi) for u, v in zip(ra, rb)) \
            or any((u.lo, u.hi) != (v.lo, v.hi) for u, v in zip(y.op.axes, w.op.axes)):
        return False
    m = dict(zip(tuple(w.op.axes) + tuple(rb), tuple(y.op.axes) + tuple(ra)))
    return all(substitute(s, m) is t for s, t in zip(b.src[:2], a.src[:2])) and a.op is Op.REDUCE


def plan_residuals(outputs: Sequence[Tensor], inputs: Sequence[Tensor], heads: Sequence[Tensor],
                   grads: Sequence[Tensor], policy: Policy,
                   worth: Callable[[Expr], bool] | None = None) -> ResidualPlan:
    """The plan for ``grads`` (tensors over ``inputs`` and ``heads``) under ``policy``; ``worth(value)``:
    the target's cost model for sharing a transcendental value between the passes
    (:mod:`.training.saved_values`; ``None``: never shared)."""
    values: tuple[Tensor, ...] = ()
    original: dict[Tensor, Tensor] = {}
    if worth is not None and policy in ("default", "save_all"):
        shared = share_values(outputs, grads, worth)
        outputs, grads, values, original = shared.outputs, shared.grads, shared.values, shared.original
    graph = tensor_graph(grads)
    on_head: set[Tensor] = set(heads)
    for t in graph:  # producers first
        if isinstance(t.op, ComputeOp) and any(d in on_head for d in op_reads(t.op)):
            on_head.add(t)
    grad_set = set(grads)
    choose = _chooser(policy, set(outputs))
    chosen = {t for t in graph if not t.is_placeholder and t not in on_head and t not in grad_set
              and (t in values or choose(t))}
    # a value the backward compares with a saved tensor made from it is saved with it
    chosen |= {r for t in chosen if isinstance(t.op, ComputeOp) for r in op_reads(t.op)
               if _must_share(r) and r not in on_head}
    chosen |= _same_pass(chosen, on_head)
    cut = tensor_graph(grads, stop=chosen)
    in_cut = set(cut)
    saved = tuple(t for t in cut if t in chosen)
    extras = tuple(t for t in saved if t not in set(outputs))
    return ResidualPlan(tuple(k for k, x in enumerate(inputs) if x in in_cut), saved, extras,
                        tuple(outputs), tuple(grads), original)
