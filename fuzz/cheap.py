"""The cheap-gradient principle as a checked invariant.

Reverse mode costs at most a small multiple of the forward computation (the classic bound of
automatic differentiation, with the reads of the inputs and of the head added so that a
gradient that must touch every input element once is never in breach):

    work(gradient of every differentiated input) <= 4 * work(forward) + size(inputs) + size(head)

where ``work`` is ``ta.lower(...).work`` (innermost loop-body executions, exact; an unrolled
reduction counted term by term, :func:`plain_work`), ``size(inputs)`` the elements of every
placeholder the forward reads or is differentiated with respect to, and ``size(head)`` those of
the output.

A violation is a finding: a gradient that does asymptotically more than the forward (a scan
whose adjoint is quadratic), or a constant factor an expert would not pay.  Each one not fixed
yet is named in :data:`ALLOWED` with its reason; :func:`violation` reports every other one.
Programs are named as the work gate names them (``topi-...``, ``bench-...``, ``family-...``,
``tvm-...``) and fuzz programs ``fuzz-<seed>`` (``layer-<seed>`` for ``python -m fuzz --layers``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FACTOR = 4
PINNED_TARGET = "llvm -mcpu=skylake-avx512"  # where a program names no target of its own

_WINNER = "max/min with ties: a tie pass and a routing sum over each window's ties per input element"
_SLICE = "the forward reads a few elements of a larger input or intermediate; the gradient sums all of it"

#: fuzz programs (seeds of the current generator) known to break the invariant, by class
FUZZ_FINDINGS: dict[int, str] = {
    89: f"{_WINNER} (the running max of a custom (sum, max) pair)",
    161: _SLICE,
}

#: programs known to break the invariant, with the class of program and why (one line each)
ALLOWED: dict[str, str] = {f"fuzz-{seed}": why for seed, why in FUZZ_FINDINGS.items()}


@dataclass(frozen=True)
class Cost:
    """The works and sizes the invariant compares, for one program."""

    forward: int
    backward: int
    inputs: int  # elements of every placeholder read or differentiated
    head: int  # elements of the output (the head has its shape)

    @property
    def bound(self) -> int:
        return FACTOR * self.forward + self.inputs + self.head

    @property
    def holds(self) -> bool:
        return self.backward <= self.bound

    @property
    def ratio(self) -> float:
        """The backward's work over the forward's (inf for a forward without work)."""
        return self.backward / self.forward if self.forward else math.inf


def _size(t) -> int:
    return math.prod(t.shape)


#: strategies that fold a reduction's terms into one unrolled body (a convolution's taps): one
#: execution of it is many terms' work
UNROLLING = ("stencil", "taps")


def plain_work(outputs: list, inputs: list, **options) -> int:
    """``ta.lower(outputs, inputs, **options).work`` with the plain ``loops`` candidate taken
    wherever an :data:`UNROLLING` strategy was chosen.  The stencil strategy runs a small
    convolution's 27 taps as one body execution, while its gradient's loops count each term:
    unlike units.  The other strategies keep their choice -- a scan, a scatter or a fused
    epilogue does less work for real."""
    import tensorad as ta

    low = ta.lower(outputs, inputs, **{**options, "variants": True})
    pins = {point: "loops" for point, labels, chosen in low.offered
            if "loops" in labels and chosen.split(":")[0] in UNROLLING}
    if not pins:
        return low.work
    choices = {**dict(options.get("choices", {})), **pins}
    return ta.lower(outputs, inputs, **{**options, "variants": True, "choices": choices}).work


def pinned(spec=PINNED_TARGET):
    """The target of ``spec`` with the typical caches of a named CPU, not this host's: a target whose
    code runs here takes the host's caches, and the strategies chosen with them, so its work counts
    would differ between machines."""
    from dataclasses import replace

    from tensorad.codegen.target import DEFAULT_CACHES, DEFAULT_LINE, DEFAULT_PAGE, parse_target

    l1d, l2, l3 = DEFAULT_CACHES
    return replace(parse_target(spec), l1d=l1d, l2=l2, l3=l3, line=DEFAULT_LINE, page=DEFAULT_PAGE)


def gradient_cost(out, wrt: list, *, grads: list | None = None, head=None, **options) -> Cost:
    """The :class:`Cost` of ``out``'s reverse gradient with respect to ``wrt`` (made here with a
    fresh head, or given as ``grads`` of the placeholder ``head``), both lowered with
    ``options`` (those of ``ta.lower``) for :func:`pinned` ``target``: the same counts on every machine."""
    import tensorad as ta
    from tensorad.ir import placeholders

    options = {**options, "target": pinned(options.get("target", PINNED_TARGET))}
    inputs = placeholders([out])
    everything = inputs + [t for t in wrt if t not in inputs]
    if grads is None:
        head = ta.placeholder(out.shape, out.dtype, "H")
        grads = list(ta.JacobianRecursive(out, list(wrt), head))
    forward = plain_work([out], inputs, **options)
    backward = plain_work(list(grads), inputs + [head], **options)
    return Cost(forward, backward, sum(_size(t) for t in everything), _size(out))


def violation(name: str, cost: Cost) -> str | None:
    """Why program ``name`` breaks the invariant, or ``None`` when it holds or is allowed."""
    if cost.holds or name in ALLOWED:
        return None
    return (f"{name}: gradient work {cost.backward} > {FACTOR} x forward {cost.forward} + inputs "
            f"{cost.inputs} + head {cost.head} = {cost.bound} ({cost.ratio:.3g}x the forward)")
