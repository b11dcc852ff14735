"""The operator library ``ta.topi`` (API.md section 5), written in the tensor language.

Every operator is one or a few ``compute`` definitions built from reads, scalar functions,
reducers and ``if_then_else``: nothing here is opaque to autodiff or the optimizer, which see
exactly what a user would have written by hand.

Its operators are the names of ``__all__`` here and in ``nn``; an operator on half tensors returns a
half tensor, and ``Tensor``'s ``+ - * /``, unary ``-`` and views (``X[:, 1:-1]``) are operators here.

Modules: ``nn`` (dense, convolution, pooling, softmax, activations), ``spatial`` (transposed
convolution, upsampling), ``norm``, ``attention``, ``loss``, ``gather``, ``linalg``,
``broadcast``, ``math``, ``reduction``, ``transform``; ``_util`` shared argument checks."""

from tensorad.ir.tensor import TENSOR_OPERATORS

from . import nn
from ._util import keeps_storage
from .broadcast import add, broadcast_shape, broadcast_to, divide, maximum, minimum, multiply, power, subtract
from .gather import embedding, embedding_bag, index_select, take
from .linalg import matmul
from .math import (
    abs,
    cast,
    cos,
    erf,
    exp,
    full,
    full_like,
    log,
    negative,
    ones,
    ones_like,
    sigmoid,
    sin,
    sqrt,
    tanh,
    zeros,
    zeros_like,
)
from .norm import mean, var
from .reduction import max, min, prod, sum
from .transform import concatenate, expand_dims, index, reshape, split, squeeze, strided_slice, transpose

__all__ = [
    "nn", "add", "subtract", "multiply", "divide", "power", "maximum", "minimum",
    "broadcast_shape", "broadcast_to", "matmul", "abs", "cast", "cos", "exp", "log", "negative",
    "sigmoid", "sin", "sqrt", "tanh", "erf", "mean", "var", "full", "full_like", "ones", "ones_like", "zeros",
    "zeros_like", "sum", "max", "min", "prod", "reshape", "transpose", "concatenate", "split",
    "strided_slice", "expand_dims", "squeeze", "take", "index_select", "embedding", "embedding_bag",
]

# an operator on half tensors stores its result in their dtype (``cast`` says its own dtype)
for _name in [n for n in __all__ if n not in ("nn", "cast", "broadcast_shape")]:
    globals()[_name] = keeps_storage(globals()[_name])
for _name in nn.__all__:
    setattr(nn, _name, keeps_storage(getattr(nn, _name)))

TENSOR_OPERATORS.update(add=add, subtract=subtract, multiply=multiply, divide=divide,
                        negative=negative, getitem=keeps_storage(index))
