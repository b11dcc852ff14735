"""tensorad: automatic differentiation of index-level tensor expressions, compiled through LLVM.

``import tensorad as ta`` gives the public API of ``API.md``: the language (``placeholder``,
``compute``, reducers, scalar functions), autodiff (``Jacobian``, ``JacobianRecursive``, ``jvp``,
...), the nonzeroness optimizer, printing, the reference evaluator, code generation and the
operator library ``ta.topi``.  This module only composes the packages below it; the CamelCase
names of the API are aliases of snake_case functions.

Packages and modules below the facade:

* ``ir/`` the IR; ``lang/`` the language; ``poly/`` the boundary to isl; ``reference/`` the
  NumPy reference evaluator; ``autodiff/`` derivatives; ``topi/`` the operator library;
* ``training/`` ``ta.function``, its residuals and saved values; ``bridges/`` ``ta.torch`` and
  ``ta.jax``;
* ``diffcache`` a disk cache of differentiated programs; ``cli`` the ``tensorad`` command;
  ``symbolic`` programs with size variables: evaluated, lowered and built at their arrays' sizes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import autodiff as _autodiff
from . import diffcache as _diffcache
from . import topi
from .autodiff import generalized_matmul, inline_non_reductions
from .codegen import Kernel, LoweredFunc
from .codegen import load_kernel as load
from .ir import Expr, Op, Tensor, comm_reducer
from .ir import print_tensor_recursively as PrintTensorRecursively
from .ir import reducer as _reducer
from .ir import trace as _trace
from .ir.collect import fewer_collections as _fewer_collections
from .ir.dtype import FLOAT_DTYPES, INT_DTYPES
from .ir.trace import config
from .lang import (
    OutOfBoundsError,
    abs,
    cast,
    compute,
    const,
    cos,
    erf,
    exp,
    if_then_else,
    log,
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
    size_var,
    sqrt,
    tanh,
)
from .simplify import Optimizer, optimize_and_lift_nonzeroness
from .symbolic import bind, build, evaluate, function, lower, value_and_grad
from .symbolic import deferred as _deferred
from .symbolic import listed as _listed
from .symbolic import symbolic as _symbolic
from .training.function import Function

__version__ = "0.1.0"

sum = _reducer.sum  # noqa: A001
max = _reducer.max  # noqa: A001
min = _reducer.min  # noqa: A001
prod = _reducer.prod


def Jacobian(output: Tensor, input: Tensor, optimize: bool = True) -> Tensor:  # noqa: N802, A002
    """``d output[i...] / d input[j...]`` as a tensor of shape ``output.shape + input.shape``.

    Follows every path from ``input`` to ``output`` (the chain rule over the tensor DAG when
    ``input`` also reaches ``output`` through other tensors, e.g. for the Jacobian of a gradient).

    ``optimize=True`` applies the nonzeroness optimizer; ``optimize=False`` shows the raw
    elementwise Jacobian (a reduction over zeros, as in the seed tutorial)."""
    return _differentiated("jacobian", f"Jacobian({_name(output)}, {_name(input)})", optimize,
                           (output, input), ("jacobian", [[output], [input]], (optimize,)),
                           lambda opt: [_autodiff.jacobian(output, input, optimizer=opt)],
                           lambda: [Jacobian(output, input, False)],
                           lambda im: [Jacobian(im(output), im(input))], finish=False)[0]


def JacobianRecursive(output: Tensor, inputs: Sequence[Tensor] | Tensor,  # noqa: N802
                      head: Tensor | None = None,
                      override: dict[Tensor, Callable] | None = None,
                      optimize: bool = True) -> list[Tensor]:
    """Reverse accumulation from ``output`` to each of ``inputs`` (API.md section 2); a float ``head``
    of another dtype is read as ``output``'s dtype, an integer one is an error."""
    key = None if override else (  # (functions: nothing to key them by)
        "reverse", [[output], _listed(inputs), _listed(head)], (optimize, isinstance(inputs, Tensor)))
    return _differentiated("gradient", f"JacobianRecursive({_name(output)})", optimize,
                           (output, inputs, head), key,
                           lambda opt: _autodiff.jacobian_recursive(output, inputs, head, override=override,
                                                                    optimizer=opt),
                           lambda: JacobianRecursive(output, inputs, head, override, False),
                           lambda im: JacobianRecursive(im(output), im(inputs), im(head), override and {
                               im(t): f for t, f in override.items()}))


def jvp(output: Tensor, inputs: Sequence[Tensor] | Tensor, tangents: Sequence[Tensor] | Tensor,
        optimize: bool = True) -> Tensor:
    """Forward mode: ``sum_j J_j . tangents[j]``, a tensor of ``output.shape``; a float tangent of
    another dtype is read as its input's dtype, an integer one is an error."""
    return _differentiated("jvp", f"jvp({_name(output)})", optimize, (output, inputs, tangents),
                           ("jvp", [[output], _listed(inputs), _listed(tangents)],
                            (optimize, isinstance(inputs, Tensor), isinstance(tangents, Tensor))),
                           lambda opt: [_autodiff.jvp(output, inputs, tangents, optimizer=opt)],
                           lambda: [jvp(output, inputs, tangents, False)],
                           lambda im: [jvp(im(output), im(inputs), im(tangents))])[0]


def hessian_vector_product(output: Tensor, inputs: Sequence[Tensor] | Tensor,
                           vectors: Sequence[Tensor] | Tensor, optimize: bool = True) -> list[Tensor]:
    """``H . v`` for each input of a scalar ``output``, by forward-over-reverse."""
    return _differentiated("hvp", f"hessian_vector_product({_name(output)})", optimize,
                           (output, inputs, vectors), ("hvp", [[output], _listed(inputs), _listed(vectors)],
                            (optimize, isinstance(inputs, Tensor), isinstance(vectors, Tensor))),
                           lambda opt: _autodiff.hessian_vector_product(output, inputs, vectors,
                                                                        optimizer=opt),
                           lambda: hessian_vector_product(output, inputs, vectors, False),
                           lambda im: hessian_vector_product(im(output), im(inputs), im(vectors)))


def gradcheck(output: Tensor, inputs: Sequence[Tensor] | Tensor, optimize: bool = True, **options) -> bool:
    """Reverse and forward mode against float64 central finite differences; True or raises.

    With ``optimize=True`` (the default) the derivatives checked are the optimized ones that
    ``JacobianRecursive`` and ``jvp`` return.  Options: see ``tensorad.autodiff.gradcheck``."""
    return _autodiff.gradcheck(output, inputs, optimizer=_optimizer(optimize), **options)


def _differentiated(what: str, detail: str, optimize: bool, args: tuple, key: tuple | None,
                    make: Callable[[Callable | None], list[Tensor]], raw: Callable[[], list[Tensor]],
                    redo: Callable[[Callable], list[Tensor]], finish: bool = True) -> list[Tensor]:
    """One differentiation of the facade: ``make(optimizer)`` with one optimizer (``None`` without
    ``optimize``), whose last step (``Optimizer.finish``) runs over all its results where ``finish``.  Of a
    symbolic program (``args``) it is deferred over the sizes (:func:`~tensorad.symbolic.deferred`); else
    read from the disk cache by ``key`` (``(kind, parts, options)``; ``None``: not cached), timed as the
    ``differentiate`` stage with fewer garbage collections, its results dumped as ``what``."""
    def differentiate() -> list[Tensor]:
        opt = _optimizer(optimize)
        made = make(opt)
        return made if opt is None or not finish else opt.finish(made)  # type: ignore[attr-defined]

    if optimize and _symbolic(*args):
        return _deferred(differentiate, raw, redo)
    with _trace.stage("differentiate", detail), _fewer_collections():
        result = differentiate() if key is None else _diffcache.cached(*key, differentiate)
    if _trace.dumping():  # TENSORAD_DUMP: the printed results
        text = "\n".join(PrintTensorRecursively(t) for t in result)
        first = result[0].name if result else ""
        _trace.dump(f"{what}-{first}-{_trace.short_hash(text)}", "tensors.txt", text)
    return result


def _optimizer(optimize: bool) -> Callable[[Tensor], Tensor] | None:
    """One optimizer (and so one memo context) per call of the facade, timed as the ``optimize`` stage."""
    if not optimize:
        return None
    optimizer = Optimizer()

    def traced(tensor: Tensor) -> Tensor:
        with _trace.stage("optimize", tensor.name):
            return optimizer(tensor)
    traced.finish = optimizer.finish  # type: ignore[attr-defined]
    return traced


def _name(x: object) -> str:
    """A tensor's name for a log line (the call itself reports a bad argument)."""
    return x.name if isinstance(x, Tensor) else type(x).__name__


gradient = JacobianRecursive
OptimizeAndLiftNonzeronessConditions = optimize_and_lift_nonzeroness
InlineNonReductions = inline_non_reductions

__all__ = [
    "Expr", "Op", "Tensor", "Kernel", "LoweredFunc", "FLOAT_DTYPES", "INT_DTYPES",
    "placeholder", "compute", "reduce_axis", "size_var", "bind", "sum", "max", "min", "prod", "comm_reducer",
    "select", "if_then_else", "const", "cast", "exp", "log", "sqrt", "tanh", "sigmoid", "abs",
    "power", "sin", "cos", "erf", "maximum", "minimum", "min_value", "max_value", "OutOfBoundsError",
    "Jacobian", "JacobianRecursive", "gradient", "jvp", "hessian_vector_product",
    "OptimizeAndLiftNonzeronessConditions", "InlineNonReductions", "generalized_matmul",
    "gradcheck", "PrintTensorRecursively", "lower", "build", "load", "evaluate", "topi", "config",
    "function", "Function", "value_and_grad",
]


def __getattr__(name: str):
    """``ta.torch``, ``ta.jax``: the framework bridges, imported on use (never by ``import tensorad``)."""
    if name in ("torch", "jax"):
        import importlib

        try:
            module = importlib.import_module(f".bridges.{name}", __name__)
        except ImportError as e:
            raise ImportError(f"ta.{name} needs {name}, which could not be imported ({e}); install it "
                              f"with: pip install 'tensorad[{name}]'") from e
        globals()[name] = module
        return module
    raise AttributeError(f"module 'tensorad' has no attribute {name!r}")
