"""``jacobian_recursive``: reverse accumulation over the tensor DAG; ``jacobian``: the full Jacobian.

Tensors between ``output`` and the inputs are visited consumers first; each one's adjoint ``adj_T`` (shape
``prefix + T.shape``) is one compute whose body sums the contributions of its consumers (:mod:`adjoint`).
Only tensors on a path from an input to ``output`` are differentiated; other inputs get zero tensors.

``head`` is ``output``'s adjoint; ``None`` means the identity.  ``override`` maps a tensor to
``fn(tensor, input, adj_tensor)``, replacing its derivative rule; ``optimizer`` runs on each whole adjoint."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from ..ir import dtype as dt
from ..ir.expr import Expr, Op, cast
from ..ir.rewrite import op_reads, tensor_graph
from ..ir.tensor import ComputeOp, Tensor
from .adjoint import AdjointBuilder
from .build import Optimizer, adjoint_of, axis_vars, check_float, compute, identity, zeros
from .jacobian import direct_jacobian, reads_only_directly
from .shifts import cancelling_shifts
from .zero import sum_all

Override = Callable[[Tensor, Tensor, Tensor], Tensor]


def _check_head(output: Tensor, head: Tensor) -> tuple[int, ...]:
    n = output.ndim
    if not isinstance(head, Tensor):
        raise TypeError(f"jacobian_recursive: head must be a Tensor, got {type(head).__name__}")
    check_float(head, "jacobian_recursive (head)")
    if head.ndim < n or tuple(head.shape[head.ndim - n:]) != tuple(output.shape):
        raise ValueError(f"jacobian_recursive: head {head.name!r} has shape {list(head.shape)}, "
                         f"but it must be prefix + the output's shape {list(output.shape)}")
    return tuple(head.shape[:head.ndim - n])


def _relevant(graph: list[Tensor], inputs: set[Tensor], output: Tensor) -> set[Tensor]:
    """Floating-point tensors of ``graph`` that are or depend on inputs, not through a cancelling shift."""
    shifts = cancelling_shifts(graph, [output])
    found: set[Tensor] = set()
    for t in graph:  # producers first
        if t in inputs or (isinstance(t.op, ComputeOp) and dt.is_float(t.dtype) and t not in shifts
                           and any(d in found for d in op_reads(t.op))):
            found.add(t)
    return found


class _Adjoints:
    """Per-tensor lists of terms and the finished adjoint tensors."""

    def __init__(self, prefix: tuple[int, ...], optimizer: Optimizer | None) -> None:
        self.prefix, self.optimizer = prefix, optimizer
        self.axes: dict[Tensor, tuple[list[Expr], list[Expr]]] = {}
        self.terms: dict[Tensor, list[Expr]] = {}
        self.done: dict[Tensor, Tensor] = {}

    def axes_of(self, x: Tensor) -> tuple[list[Expr], list[Expr]]:
        if x not in self.axes:
            n = len(self.prefix)
            self.axes[x] = (axis_vars(self.prefix), axis_vars(x.shape, start=n))
        return self.axes[x]

    def add(self, x: Tensor, terms: Sequence[Expr]) -> None:
        self.terms.setdefault(x, []).extend(terms)

    def finish(self, t: Tensor) -> Tensor | None:
        """The adjoint of ``t`` (all its consumers have contributed), or ``None`` if zero."""
        if t in self.done:
            return self.done[t]
        terms = self.terms.pop(t, [])
        if not terms:
            return None
        p, j = self.axes[t]
        body = sum_all(terms)  # in float32 for a half tensor: one rounding, to t.dtype, at the end
        adj = compute(f"{t.name}.grad", p + j, [cast(t.dtype, body)], adjoint_of(t))[0]
        if self.optimizer is not None:
            adj = self.optimizer(adj)
            body = adj.op.body[adj.value_index] if isinstance(adj.op, ComputeOp) else None
            if body is not None and body.op is Op.CONST and body.arg == 0:  # (cancelling terms, empty head)
                adj = None
        self.done[t] = adj
        return adj


def jacobian_recursive(output: Tensor, inputs: Sequence[Tensor] | Tensor, head: Tensor | None = None,
                       override: Mapping[Tensor, Override] | None = None,
                       optimizer: Optimizer | None = None) -> list[Tensor]:
    """Adjoints of ``inputs`` for ``output`` with the given ``head`` (see the module docstring)."""
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    check_float(output, "jacobian_recursive (output)")
    for x in inputs:
        if not isinstance(x, Tensor):
            raise TypeError(f"jacobian_recursive: inputs must be tensors, got {type(x).__name__}")
        check_float(x, "jacobian_recursive (input)")
    override = dict(override or {})
    for t, fn in override.items():  # a key by name ("Y") would silently never match
        if not isinstance(t, Tensor) or not callable(fn):
            raise TypeError(f"jacobian_recursive: override maps tensors to functions "
                            f"fn(output, input, head) -> adjoint, got {t!r}: {fn!r}")
    if head is None:
        prefix = tuple(output.shape)
        head = identity(output.shape, output.dtype, f"{output.name}.identity")
    else:
        prefix = _check_head(output, head)

    graph = tensor_graph([output])
    # the caller's own tensor objects (API.md: an override receives the originals; a rebuilt one is not)
    original: dict[Tensor, Tensor] = {}
    for t in [*override, *inputs, output, *graph]:
        original.setdefault(t, t)
    relevant = _relevant(graph, set(inputs), output)
    adj = _Adjoints(prefix, optimizer)
    if output in relevant:
        adj.done[output] = head
    ops = list(dict.fromkeys(t.op for t in graph))
    consumers = Counter(x for op in ops if isinstance(op, ComputeOp) for x in op_reads(op))
    builder = AdjointBuilder(exact=optimizer is not None, optimizer=optimizer, read=frozenset(consumers))
    for op in reversed(ops):  # consumers first
        outs = [Tensor(op, v) for v in range(op.num_outputs)]
        heads = {v: a for v, t in enumerate(outs) if t in relevant and (a := adj.finish(t)) is not None}
        if not heads or not isinstance(op, ComputeOp):
            continue
        for x in op_reads(op):
            if x not in relevant:
                continue
            p, j = adj.axes_of(x)
            plain = {}
            for v, h in heads.items():
                fn = override.get(outs[v])
                if fn is None:
                    plain[v] = h
                    continue
                got = fn(original.get(outs[v], outs[v]), original.get(x, x), h)
                want = prefix + tuple(x.shape)
                if not isinstance(got, Tensor) or tuple(got.shape) != want:
                    raise ValueError(f"override for {outs[v].name!r}: the adjoint contribution for "
                                     f"{x.name!r} must be a tensor of shape {list(want)}, got "
                                     f"{list(got.shape) if isinstance(got, Tensor) else got!r}")
                adj.add(x, [cast(dt.compute_dtype(x.dtype), got[tuple(p) + tuple(j)])])
            if plain:
                # (an input's adjoint is only stored; an intermediate's is read by the next adjoints)
                sole = x.is_placeholder and consumers[x] == 1
                adj.add(x, builder.contributions(op, plain, x, p, j, sole))

    results = []
    for x in inputs:
        a = adj.done.get(x)
        if a is None:
            a = zeros(prefix + tuple(x.shape), x.dtype, f"{x.name}.grad", adjoint_of(x))
        elif a.dtype != x.dtype:  # the head itself, when an input is the output
            axes = axis_vars(a.shape)
            a = compute(f"{x.name}.grad", axes, [cast(x.dtype, a[tuple(axes)])], adjoint_of(x))[0]
        results.append(a)
    return builder.reuse_winners(results)


def jacobian(output: Tensor, input: Tensor, optimizer: Optimizer | None = None) -> Tensor:  # noqa: A002
    """``d output[i...] / d input[j...]`` as a tensor of shape ``output.shape + input.shape``, whichever way
    ``output`` depends on ``input``: the elementwise Jacobian of its body when only that reads ``input``
    (:func:`.jacobian.direct_jacobian`), else reverse accumulation with the identity head."""
    check_float(output, "jacobian")
    check_float(input, "jacobian")
    if output == input or reads_only_directly(output, input):
        return direct_jacobian(output, input, optimizer)
    return jacobian_recursive(output, [input], None, optimizer=optimizer)[0]
