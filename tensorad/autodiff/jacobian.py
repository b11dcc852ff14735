"""``jacobian(Y, X)``: the elementwise Jacobian of a tensor by a tensor it reads directly.

``J[i..., jac_i0, ...] = d Y[i...] / d X[jac_i0, ...]``: ``Y``'s body is differentiated with the tangent
rules, a read ``X[idx]`` having the tangent ``select(jac_i == idx, 1, 0)``.  A sum becomes the sum of the
derivatives, any other combiner a reduction over ``(derivative, value)`` pairs.  The result is the raw
Jacobian until ``optimizer`` (the facade's nonzeroness optimizer) removes its zeros."""

from __future__ import annotations

from ..ir.expr import Expr, Op
from ..ir.rewrite import op_reads, rename, tensor_graph
from ..ir.tensor import ComputeOp, Tensor
from .build import Optimizer, axis_vars, check_float, compute, copy_vars, delta, equal_all, identity
from .rules import tangent
from .zero import ZERO, Tangent, materialize


def body_jacobian(body: Expr, x: Tensor, jac: list[Expr]) -> Tangent:
    """The derivative of ``body`` by ``x[jac]`` (``ZERO`` when ``body`` does not read ``x``)."""

    def leaf(node: Expr) -> Tangent:
        return delta(equal_all(jac, node.src), node.dtype) if node.op is Op.READ and node.arg == x else ZERO

    return tangent(body, leaf)


def reads_only_directly(output: Tensor, input: Tensor) -> bool:  # noqa: A002
    """True when ``output`` depends on ``input`` only through its own reads of it (or not at
    all): no other tensor that ``output`` reads depends on ``input``."""
    if not isinstance(output.op, ComputeOp):
        return True
    return not any(t != input and input in tensor_graph([t]) for t in op_reads(output.op))


def direct_jacobian(output: Tensor, input: Tensor, optimizer: Optimizer | None = None) -> Tensor:  # noqa: A002
    """``d output[i...] / d input[j...]`` (shape ``output.shape + input.shape``) from the direct reads of
    ``input`` by ``output``'s body only (``chain.jacobian`` follows every path), then ``optimizer``."""
    check_float(output, "jacobian")
    check_float(input, "jacobian")
    if isinstance(output.op, ComputeOp) and output != input and input not in op_reads(output.op) \
            and input in tensor_graph([output]):
        # the elementwise Jacobian would take the tensors in between as constants: a wrong zero
        raise ValueError(f"Jacobian({output.name}, {input.name}): {output.name} reads {input.name} only "
                         f"through other tensors; Jacobian differentiates one tensor's body -- use "
                         f"JacobianRecursive({output.name}, [{input.name}]) for the whole chain")
    name = f"{output.name}.jacobian"
    if output == input:
        jac = identity(output.shape, output.dtype, name)
    else:
        jvars = axis_vars(input.shape, prefix="jac_i")
        if isinstance(output.op, ComputeOp):
            op = output.op
            mapping = copy_vars(op.axes + op.reduce_axes)
            d = body_jacobian(op.body[output.value_index], input, jvars)
            body = rename(materialize(d, output.dtype), mapping)
            axes = [mapping[a] for a in op.axes]
        else:  # a different placeholder: independent of input
            body, axes = materialize(ZERO, output.dtype), axis_vars(output.shape, prefix="i")
        jac = compute(name, axes + jvars, [body])[0]
    return optimizer(jac) if optimizer is not None else jac
