"""Broadcasting binary arithmetic between tensors and Python scalars (NumPy's rules): shapes aligned at
their last axes, a size-1 axis read at index 0 (``A [3, 1]`` plus ``B [4]`` is
``Y[i, j] = A[i, 0] + B[j]``), a Python number a constant of the tensor's dtype.  These also give
``Tensor`` its ``+ - * /`` and unary ``-`` (``tensorad.ir.tensor.TENSOR_OPERATORS``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tensorad.ir import Expr, Tensor
from tensorad.ir.expr import Op, is_size
from tensorad.ir.rewrite import walk
from tensorad.lang import tensor_lang as lang

from ._util import check_tensor, new_compute


def broadcast_shape(a: Sequence[int], b: Sequence[int], op: str = "broadcast") -> tuple[int, ...]:
    """The NumPy broadcast of two shapes, or a ``ValueError`` naming both."""
    a, b = tuple(a), tuple(b)
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"{op}: shapes {a} and {b} cannot be broadcast together "
                             f"(sizes {x} and {y} differ and neither is 1)")
        out.append(y if x == 1 else x)
    return tuple(out)


def broadcast_index(x: Tensor, out_axes: Sequence[Expr]) -> Expr:
    """Read ``x`` at output index ``out_axes`` under broadcasting (size-1 axes read at 0)."""
    axes = tuple(out_axes)[len(out_axes) - x.ndim:]
    return x[tuple(0 if s == 1 and ax.hi != 1 else ax for s, ax in zip(x.shape, axes))]


def broadcast_to(x: Tensor, shape: Sequence[int], name: str = "broadcast_to") -> Tensor:
    """``X`` repeated along its size-1 (and missing leading) axes to ``shape``."""
    check_tensor(x, name)
    shape = tuple(shape)
    if broadcast_shape(x.shape, shape, name) != shape:
        raise ValueError(f"{name}: cannot broadcast shape {x.shape} to {shape}")
    return new_compute(shape, lambda ax: broadcast_index(x, ax), name, "broadcast")


def _is_number(x: Any) -> bool:
    """A Python or NumPy number, or a scalar in size variables (``-1.0 / n``)."""
    if isinstance(x, Expr):
        return all(n.op is not Op.READ and (n.op is not Op.VAR or is_size(n)) for n in walk(x))
    return isinstance(x, (int, float)) and not isinstance(x, bool) or \
        (hasattr(x, "item") and hasattr(x, "dtype") and x.ndim == 0)


def _binary(fn: Callable[[Any, Any], Expr], name: str):
    def op(a: Any, b: Any, name: str = name) -> Tensor:
        for x, side in ((a, "lhs"), (b, "rhs")):
            if not isinstance(x, Tensor) and not _is_number(x):
                raise TypeError(f"{name}: {side} must be a tensor, a Python number or a scalar in sizes, got "
                                f"{type(x).__name__} {x!r}")
        if not isinstance(a, Tensor) and not isinstance(b, Tensor):
            raise TypeError(f"{name}: at least one operand must be a tensor")
        # NumPy scalars count as Python numbers: they adopt the tensor's dtype.
        a, b = (x.item() if hasattr(x, "item") and not isinstance(x, (Tensor, Expr)) else x for x in (a, b))
        sa = a.shape if isinstance(a, Tensor) else ()
        sb = b.shape if isinstance(b, Tensor) else ()
        shape = broadcast_shape(sa, sb, name)

        def body(ax: tuple[Expr, ...]) -> Expr:
            x = broadcast_index(a, ax) if isinstance(a, Tensor) else a
            y = broadcast_index(b, ax) if isinstance(b, Tensor) else b
            return fn(x, y)

        return new_compute(shape, body, name, "broadcast")

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"Broadcasting elementwise ``{name}`` of two tensors, or of a tensor and a number or a "
                  f"scalar in sizes.")
    return op


add = _binary(lambda x, y: x + y, "add")
subtract = _binary(lambda x, y: x - y, "subtract")
multiply = _binary(lambda x, y: x * y, "multiply")
divide = _binary(lambda x, y: x / y, "divide")
power = _binary(lang.power, "power")
maximum = _binary(lang.maximum, "maximum")
minimum = _binary(lang.minimum, "minimum")
