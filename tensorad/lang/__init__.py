"""The user's tensor-expression language (API.md section 1).

Modules: ``tensor_lang`` placeholders, compute, reduce axes, scalar functions; ``bounds``
definition-time bounds checking; ``batching`` a program with a batch axis in front (``vmap``); ``sizes``
size variables, and binding a symbolic program to integer sizes."""

from .bounds import OutOfBoundsError, check_op_bounds
from .sizes import size_var
from .tensor_lang import (
                          abs,
                          cast,
                          compute,
                          const,
                          cos,
                          erf,
                          exp,
                          if_then_else,
                          log,
                          make_compute,
                          max_value,
                          maximum,
                          min_value,
                          minimum,
                          placeholder,
                          power,
                          reduce_axis,
                          select,
                          sigmoid,
                          sin,
                          sqrt,
                          tanh,
)

__all__ = ["OutOfBoundsError", "check_op_bounds", "size_var", "abs", "cast", "compute", "const", "cos", "erf",
           "exp", "if_then_else", "make_compute", "log", "max_value", "maximum", "min_value", "minimum",
           "placeholder", "power", "reduce_axis", "select", "sigmoid", "sin", "sqrt", "tanh"]
