"""Automatic differentiation of tensor expressions (API.md section 2).

Derivative rules live in one table (:data:`rules.TANGENT_RULES`); gradients are ordinary tensors of the
same IR.  The facade passes the optimizer in as ``optimizer`` (a ``Tensor -> Tensor`` function).

* ``jacobian`` the elementwise Jacobian of a tensor by a tensor it reads; ``reverse`` reverse accumulation
  and the full Jacobian over every path; ``forward`` ``jvp`` and Hessian-vector products;
  ``adjoint`` one consumer's adjoint in head-product form; ``manual`` ``generalized_matmul`` and
  ``inline_non_reductions``; ``gradcheck`` against finite differences;
* ``rules`` one tangent rule per ``Op``; ``combiners`` what autodiff knows of reducers; ``zero`` symbolic
  zeros; ``emptiness`` tangents of empty reductions; ``gathers`` checked gathers in derivatives;
  ``shifts`` stabilizing shifts; ``retype`` a program promoted to float64; ``build`` shared builders."""

from .forward import hessian_vector_product, jvp
from .gradcheck import GradcheckError, gradcheck
from .jacobian import direct_jacobian
from .manual import generalized_matmul, inline_non_reductions
from .reverse import jacobian, jacobian_recursive
from .rules import TANGENT_RULES, partial_by_read, tangent
from .zero import ZERO

__all__ = ["jacobian", "direct_jacobian", "jacobian_recursive", "jvp", "hessian_vector_product", "gradcheck",
           "GradcheckError", "generalized_matmul", "inline_non_reductions", "TANGENT_RULES",
           "tangent", "partial_by_read", "ZERO"]
