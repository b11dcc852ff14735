"""``ta.jax.function``: a tensorad program as a JAX function with a custom VJP.

    conv = ta.jax.function(Y, [X, W])
    y = jax.jit(conv)(x, w)                      # jit, grad, vmap compose as with any JAX function

The function is a ``jax.custom_vjp``: its forward calls the kernel that computes the outputs and
the saved values of :class:`tensorad.vjp.Function` (the residuals of the VJP), its backward
calls the kernel that reads them, each through ``jax.pure_callback`` (with the shapes and dtypes
declared, so ``jit`` traces through it).  Under ``vmap`` the callbacks run once per batch element
(``vmap_method="sequential"``): correct for any program, not batched.  The callbacks receive
NumPy arrays; kernels read them in place.  Importing this module imports JAX; ``import
tensorad`` does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from .ir import dtype as dt
from .ir.tensor import Tensor
from .residuals import Policy
from .vjp import Function


def _struct(t: Tensor) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(t.shape), np.dtype(t.dtype))


def _callback(fn, shapes: list[jax.ShapeDtypeStruct], *args):
    return jax.pure_callback(fn, shapes, *args, vmap_method="sequential")


class JaxFunction:
    """A callable on JAX arrays (see the module docstring); ``.function`` is the tensorad
    :class:`Function` behind it."""

    def __init__(self, outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor,
                 wrt: Sequence[Tensor] | Tensor | None = None, policy: Policy = "default",
                 **build_options: Any) -> None:
        self.function = Function(outputs, inputs, wrt, policy, **build_options)
        self._call = self._custom_vjp()

    def _custom_vjp(self):
        f = self.function
        n = len(f.outputs)
        out_shapes = [_struct(o) for o in f.outputs]

        def run_forward(*arrays):
            res = f.forward_kernel(*arrays)
            return list(res) if isinstance(res, tuple) else [res]

        def run_forward_parts(*arrays):
            outs, extras = f.forward_parts(*arrays)
            return outs + extras

        def run_backward(*arrays):
            k = len(f.plan.sources)
            return list(f.backward(list(arrays[:k]), *self._heads(arrays[k:])))

        @jax.custom_vjp
        def call(*args):
            return tuple(_callback(run_forward, out_shapes, *args))

        def fwd(*args):
            shapes = out_shapes + [_struct(t) for t in f.plan.extras]
            values = _callback(run_forward_parts, shapes, *args)
            outs, extras = values[:n], values[n:]
            return tuple(outs), f.plan.residuals(args, outs, extras)

        def bwd(residuals, cotangents):
            heads = [c for c, ph in zip(cotangents, f.heads) if ph is not None]
            grads = _callback(run_backward, [_struct(x) for x in f.wrt], *residuals, *heads) if f.wrt else []
            result: list[Any] = [None] * len(f.inputs)
            for x, g in zip(f.wrt, grads):
                result[f.inputs.index(x)] = g
            for k, x in enumerate(f.inputs):  # inputs outside wrt get zero cotangents
                if result[k] is None:
                    dtype = np.dtype(x.dtype) if dt.is_float(x.dtype) else jax.dtypes.float0
                    result[k] = np.zeros(x.shape, dtype)
            return tuple(result)

        call.defvjp(fwd, bwd)
        return call

    def _heads(self, given: Sequence[np.ndarray]) -> list[np.ndarray | None]:
        """One head per output: the given cotangents of the float outputs, ``None`` elsewhere."""
        it = iter(given)
        return [next(it) if ph is not None else None for ph in self.function.heads]

    def __call__(self, *arrays: Any) -> Any:
        f = self.function
        if len(arrays) != len(f.inputs):
            names = ", ".join(x.name for x in f.inputs)
            raise TypeError(f"function takes {len(f.inputs)} arrays ({names}), got {len(arrays)}")
        for a, x in zip(arrays, f.inputs):
            if not hasattr(a, "shape") or not hasattr(a, "dtype"):
                a = np.asarray(a)
            shape, dtype = tuple(a.shape), np.dtype(a.dtype)
            if dtype != np.dtype(x.dtype):
                raise TypeError(f"input {x.name}: expected dtype {x.dtype}, got {dtype}")
            if shape != tuple(x.shape):
                raise ValueError(f"input {x.name}: expected shape {list(x.shape)}, got {list(shape)}")
        outs = self._call(*arrays)
        return outs[0] if f.single else outs


def function(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor,
             **options: Any) -> JaxFunction:
    """``ta.jax.function`` (API.md section 6): options are those of ``ta.function``
    (``wrt``, ``policy``) and of ``ta.build``."""
    return JaxFunction(outputs, inputs, **options)
