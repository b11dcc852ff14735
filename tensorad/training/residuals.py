"""Which forward values a backward reads from the forward, and which it recomputes.

A reverse-mode gradient ``grads = J^T heads`` is a tensor program over the inputs and the heads.
The part of it that does not depend on a head (the forward's own values: a matrix product, a
softmax's row sums, max pooling's winner) can be computed by the forward and *saved*, or
recomputed by the backward.  A checkpoint policy decides per tensor, as JAX's
``checkpoint_policies`` do:

* ``"default"``: save reductions and the outputs (the forward computes those anyway), recompute
  elementwise values (cheaper to recompute inside the backward's loops than to store and read),
  except a transcendental value the forward computes anyway and the backward would compute
  again, where the target's cost model says a load is cheaper (:mod:`.training.saved_values`:
  log-softmax's ``exp(z - m)``, computed by the forward's row sum);
* ``"save_all"``: save every forward value the backward reads (the values of
  :mod:`.training.saved_values` too);
* ``"recompute_all"``: save nothing; the backward starts again from the inputs;
* a function ``policy(tensor) -> bool`` (True: save it).

The plan cuts the backward's tensor graph at the saved tensors: the backward kernel takes them
as inputs (so it never recomputes what was saved: a saved reduction is not in its loops), and
only the saved tensors that the cut graph still reaches are kept.  Example, ``Y = exp(X W^T) /
rowsum(exp(X W^T))`` with grads for X and W: the default saves ``X W^T`` (the dense) and the
row sums; the backward reads them, X, W and the head, and recomputes ``exp`` elementwise.
"""

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
    """Whether the backward compares values with ``t`` to make a discrete choice: a reduction
    that is not a sum (a max's winner and tie count, a product's zero count).  Its gradient
    tests ``source == winner`` (or ``source == 0``) at points it computes again."""
    return isinstance(t.op, ComputeOp) and t.op.is_reduction and any(
        b.op is Op.REDUCE and classify(b.arg.combiner)[0] != "sum" for b in t.op.body)


def _same_pass(chosen: set[Tensor], on_head: set[Tensor]) -> set[Tensor]:
    """The tensors to save beside ``chosen`` so that the backward compares the forward's bits.

    A saved winner ``W = argmax_k f(R[k])`` is compared in the backward with ``f(R[k])``
    computed there.  If ``R`` is recomputed -- by another build (other options: another
    summation order, FMA contraction), or by another strategy in the backward's kernel -- its
    bits may differ, no point equals the winner and the gradient is lost
    (a triangular product ``R`` read by a saved min's winner, forward and backward built with
    different targets).  So every tensor such a ``W`` reads is saved too, unless recomputing
    it is exact: an elementwise body of reads, choices and one rounding
    (:func:`~.autodiff.adjoint.recomputes_exactly`) over tensors that are themselves saved,
    placeholders, or exact (followed back)."""
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
    """What the forward saves for the backward.

    ``inputs``: the inputs the backward reads (indices into the function's inputs);
    ``saved``: the forward tensors it reads instead of recomputing them, in graph order
    (producers first); ``extras``: those of ``saved`` that are not outputs (the forward computes
    them beside its outputs); ``outputs``: the function's outputs as the forward with residuals
    computes them; ``grads``: the gradients as the backward computes them (both read the
    shared values of :mod:`.training.saved_values` where the policy saves them).  The residuals are the
    values of ``inputs`` then ``saved``.  ``original``: each tensor so rewritten -> the given
    tensor it stands for.
    """

    inputs: tuple[int, ...]
    saved: tuple[Tensor, ...]
    extras: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    grads: tuple[Tensor, ...] = ()
    original: Mapping[Tensor, Tensor] = field(default_factory=dict)

    @cached_property
    def sources(self) -> tuple[tuple[str, int], ...]:
        """Where each residual comes from: ``("input", i)``, ``("output", k)``, ``("extra", j)``
        (found once: a call only reads it)."""
        extras: dict[Tensor, int] = {}
        outputs: dict[Tensor, int] = {}
        for j, t in enumerate(self.extras):
            extras.setdefault(t, j)
        for k, t in enumerate(self.outputs):
            outputs.setdefault(t, k)
        return (*(("input", i) for i in self.inputs),
                *(("extra", extras[t]) if t in extras else ("output", outputs[t]) for t in self.saved))

    @cached_property
    def positions(self) -> tuple[int, ...]:
        """Each residual's position in ``(*outputs, *extras, *inputs)`` (:meth:`residuals`)."""
        first = {"output": 0, "extra": len(self.outputs), "input": len(self.outputs) + len(self.extras)}
        return tuple(first[kind] + k for kind, k in self.sources)

    def residuals(self, arrays: Sequence, outputs: Sequence, extras: Sequence) -> tuple:
        """The residuals among the function's input ``arrays``, its ``outputs`` and the
        ``extras`` the forward saved beside them."""
        if len(outputs) != len(self.outputs) or len(extras) != len(self.extras):
            raise ValueError(f"residuals: expected {len(self.outputs)} outputs and {len(self.extras)} "
                             f"saved values, got {len(outputs)} and {len(extras)}")
        pool = (*outputs, *extras, *arrays)
        return tuple(map(pool.__getitem__, self.positions))


def same_values(y: Tensor, w: Tensor) -> bool:
    """Whether ``w`` (one value of a tuple reduction) holds exactly the values of the
    reduction ``y``: the same box, condition and source, and a combiner whose element is
    ``y``'s own combiner (its update reads only its own operands).  Max pooling's winner
    reduction carries the maximum as its first value; a forward that saves the winner then
    need not compute the maximum a second time."""
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
    """The plan for ``grads`` (tensors over ``inputs`` and ``heads``) under ``policy``.

    ``worth(value)``: the target's cost model for sharing a transcendental value between the
    forward and the backward (:mod:`.training.saved_values`; ``None``: never shared).  Used by the
    ``"default"`` and ``"save_all"`` policies."""
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
    # a value the backward compares with a saved tensor made from it (a max's tie test reads
    # ``Y.tie`` and the winner computed from it) comes from the same pass: saved with it
    chosen |= {r for t in chosen if isinstance(t.op, ComputeOp) for r in op_reads(t.op)
               if _must_share(r) and r not in on_head}
    chosen |= _same_pass(chosen, on_head)
    cut = tensor_graph(grads, stop=chosen)
    in_cut = set(cut)
    saved = tuple(t for t in cut if t in chosen)
    extras = tuple(t for t in saved if t not in set(outputs))
    return ResidualPlan(tuple(k for k, x in enumerate(inputs) if x in in_cut), saved, extras,
                        tuple(outputs), tuple(grads), original)
