"""``jacobian(Y, X)``: the full Jacobian ``d Y / d X``, whichever way ``Y`` depends on ``X``.

When only ``Y``'s body reads ``X``, the elementwise Jacobian of its body is the answer
(:func:`.jacobian.direct_jacobian`).  When ``X`` also reaches ``Y`` through other tensors, it is reverse
accumulation with the identity head (the same shape ``Y.shape + X.shape``)."""

from __future__ import annotations

from ..ir.tensor import Tensor
from .build import check_float
from .jacobian import Optimizer, direct_jacobian, reads_only_directly
from .reverse import jacobian_recursive


def jacobian(output: Tensor, input: Tensor, optimizer: Optimizer | None = None) -> Tensor:  # noqa: A002
    """``d output[i...] / d input[j...]`` as a tensor of shape ``output.shape + input.shape``."""
    check_float(output, "jacobian")
    check_float(input, "jacobian")
    if output == input or reads_only_directly(output, input):
        return direct_jacobian(output, input, optimizer)
    return jacobian_recursive(output, [input], None, optimizer=optimizer)[0]
