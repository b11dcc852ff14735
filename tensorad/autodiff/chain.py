"""``jacobian(Y, X)``: the full Jacobian ``d Y / d X``, whichever way ``Y`` depends on ``X``.

When ``Y``'s body is the only place that reads ``X`` the elementwise Jacobian of its body is the
answer (:func:`.jacobian.direct_jacobian`, the seed tutorial's form).  When ``X`` also reaches
``Y`` through other tensors (``Y = f(Z)``, ``Z = g(X)``; or ``Y`` a gradient that reads ``X``
both directly and through the forward's intermediates), the elementwise Jacobian would miss
those paths -- and silently give zeros -- so the chain rule over the tensor DAG is applied
instead: reverse accumulation with the identity head, whose result has the same shape
``Y.shape + X.shape``.
"""

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
