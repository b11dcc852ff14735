"""Forward mode: ``jvp`` (tangent propagation over the DAG) and Hessian-vector products.

``jvp(Y, inputs, tangents)`` gives every tensor ``T`` between the inputs and ``Y`` a tangent tensor
``dT``, producers first: the tangent of ``T``'s body in which a read ``S[idx]`` becomes ``dS[idx]``.  Sums
stay sums; other reductions become ``(derivative, value)`` pair reductions.  ``hessian_vector_product`` is
forward-over-reverse: the jvp of a scalar's gradients along ``vectors``."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir.expr import Expr, Op, cast, choice, const
from ..ir.rewrite import substitute, tensor_graph, walk
from ..ir.tensor import ComputeOp, Tensor
from .build import Optimizer, axis_vars, check_float, compute, compute_each, copy_vars, rename, zeros
from .gathers import unchecked_read_index, unguarded_reads
from .reverse import jacobian_recursive
from .rules import FORWARD_RULES, tangent
from .shifts import cancelling_shifts
from .zero import ZERO, Tangent, zero_branch


def _as_list(x: Sequence[Tensor] | Tensor) -> list[Tensor]:
    return [x] if isinstance(x, Tensor) else list(x)


def _check_pairs(inputs: list[Tensor], vectors: list[Tensor], what: str) -> None:
    if len(inputs) != len(vectors):
        raise ValueError(f"{what}: {len(inputs)} inputs but {len(vectors)} tangents")
    for x, v in zip(inputs, vectors):
        check_float(x, f"{what} (input)")
        if not isinstance(v, Tensor) or tuple(v.shape) != tuple(x.shape):
            shape = list(v.shape) if isinstance(v, Tensor) else repr(v)
            raise ValueError(f"{what}: the tangent of {x.name!r} must be a tensor of shape "
                             f"{list(x.shape)}, got {shape}")
        check_float(v, f"{what} (tangent)")  # (a float tangent of another dtype is read as its input's)


def jvp(output: Tensor, inputs: Sequence[Tensor] | Tensor, tangents: Sequence[Tensor] | Tensor,
        optimizer: Optimizer | None = None) -> Tensor:
    """``sum_m J_m . tangents[m]``: the directional derivative of ``output``, of its shape."""
    inputs, tangents = _as_list(inputs), _as_list(tangents)
    check_float(output, "jvp (output)")
    _check_pairs(inputs, tangents, "jvp")
    return _jvps([output], inputs, tangents, optimizer)[0]


def _jvps(outputs: list[Tensor], inputs: list[Tensor], tangents: list[Tensor],
          optimizer: Optimizer | None) -> list[Tensor]:
    """The jvp of each of ``outputs`` in one pass over their common graph (one tangent per tensor)."""
    dot: dict[Tensor, Tensor] = dict(zip(inputs, tangents))
    gates: dict[Tensor, tuple[Expr, int, list[Expr]]] = {}  # see _index_gate
    graph = tensor_graph(outputs)
    shifts = {t.op for t in cancelling_shifts(graph, outputs)}  # no tangent flows through them
    for op in dict.fromkeys(t.op for t in graph):  # producers first
        outs = [Tensor(op, v) for v in range(op.num_outputs)]
        if not isinstance(op, ComputeOp) or all(t in dot for t in outs) or op in shifts:
            continue

        everywhere = set().union(*(unguarded_reads(b) for b in op.body))

        def leaf(node: Expr, everywhere: set = everywhere) -> Tangent:
            if node.op is Op.READ and node.arg in dot:
                # (a guard the optimizer lifts out of a sum may fail: checked gathers clipped, .gathers)
                index = node.src if node in everywhere else unchecked_read_index(
                    node.src, node.arg.shape, node.arg.name)
                read = cast(node.dtype, dot[node.arg][index])
                gate = gates.get(node.arg)
                if gate is None:
                    return read
                cond, k, axes = gate
                cond = substitute(cond, dict(zip(axes, node.src)))
                zero = const(0, read.dtype)
                return choice(Op.SELECT, cond, zero, read) if k == 1 else choice(Op.SELECT, cond, read, zero)
            return ZERO

        ders = [tangent(b, leaf, FORWARD_RULES) for b in op.body]
        if all(d is ZERO for d in ders):
            continue
        live = [v for v, d in enumerate(ders) if d is not ZERO]
        m = copy_vars(op.axes + op.reduce_axes)
        made = compute_each(f"{op.name}.jvp", [m[a] for a in op.axes], [rename(ders[v], m) for v in live])
        if optimizer is not None and len(made) == 1:
            made = (optimizer(made[0]),)
        for v, made_t in zip(live, made):
            if outs[v] not in dot and (gate := _index_gate(ders[v])) is not None:
                gates[outs[v]] = (gate[0], gate[1], list(op.axes))
            dot.setdefault(outs[v], made_t)
    return [_tangent_of(output, dot) for output in outputs]


def _index_gate(d: Tangent) -> tuple[Expr, int] | None:
    """``(cond, k)`` when tangent ``d`` is a zero-branch gate on a condition of indices alone (branch
    ``k`` of ``select(cond, ., .)`` the strong zero, :mod:`.emptiness`): a read of the tensor storing
    ``d`` carries the same gate."""
    if d is ZERO or (k := zero_branch(d)) is None:
        return None
    return None if any(n.op in (Op.READ, Op.REDUCE, Op.DATA_INDEX) for n in walk(d.src[0])) else (d.src[0], k)


def _tangent_of(output: Tensor, dot: dict[Tensor, Tensor]) -> Tensor:
    out = dot.get(output)
    if out is None:
        return zeros(output.shape, output.dtype, f"{output.name}.jvp")
    if out.dtype != output.dtype:  # output is an input whose tangent has another dtype
        axes = axis_vars(output.shape)
        out = compute(f"{output.name}.jvp", axes, [cast(output.dtype, out[tuple(axes)])])[0]
    return out


def hessian_vector_product(output: Tensor, inputs: Sequence[Tensor] | Tensor,
                           vectors: Sequence[Tensor] | Tensor,
                           optimizer: Optimizer | None = None) -> list[Tensor]:
    """``H v`` for each input of a scalar ``output``, as the jvp of its gradients along ``vectors``."""
    inputs, vectors = _as_list(inputs), _as_list(vectors)
    if output.ndim != 0:
        raise ValueError(f"hessian_vector_product: the output must be a scalar (shape ()), "
                         f"{output.name!r} has shape {list(output.shape)}")
    _check_pairs(inputs, vectors, "hessian_vector_product")
    grads = jacobian_recursive(output, inputs, optimizer=optimizer)
    for g in grads:
        check_float(g, "jvp (output)")
    return _jvps(list(grads), inputs, vectors, optimizer)  # shared tangents made once
