"""Programs with size variables at the facade: ``evaluate``, ``lower``, ``build`` and ``function`` bind
the sizes first (``tensorad.lang.sizes``), and everything below them sees a static program.

A built kernel or function of a symbolic program reads its sizes from its arrays' shapes and keeps one
static kernel per size in a bounded cache it owns: each new size compiles once.  An optimized
derivative of a symbolic program (:func:`deferred`) is the raw derivative until its sizes are bound:
binding redoes the differentiation on the static program, where the nonzeroness optimizer runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .bridges.signatures import SignatureCache
from .codegen import LoweredFunc
from .codegen import build as _build
from .codegen import lower as _lower
from .evaluate import evaluate as _evaluate
from .ir.tensor import Provenance, Role, Tensor
from .lang import compute
from .lang.sizes import bind_program, program_sizes, read_sizes
from .training.function import Function

MAX_SIZES = 8  # static kernels a symbolic kernel keeps, least recently used first out


def listed(tensors: Any) -> list:
    """A call's tensor, or list or tuple of tensors, as a list (``None``: empty; any other object: itself,
    for the call to report)."""
    if isinstance(tensors, Tensor):
        return [tensors]
    if tensors is None:
        return []
    return list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]


def symbolic(*groups: Any) -> bool:
    """Whether the program of the tensors in ``groups`` (tensors, lists, tuples) has size variables."""
    tensors = [t for g in groups for t in listed(g) if isinstance(t, Tensor)]
    return bool(tensors) and bool(program_sizes(tensors))


def _like(tensors: Any, new: dict[Tensor, Tensor]) -> Any:
    """``tensors`` (a tensor, list or tuple) with each tensor replaced by its image in ``new``."""
    if isinstance(tensors, Tensor):
        return new.get(tensors, tensors)
    if tensors is None:
        return None
    out = [new.get(t, t) if isinstance(t, Tensor) else t for t in tensors]
    return tuple(out) if isinstance(tensors, tuple) else out


@dataclass(frozen=True, eq=False)
class DeferredCall:
    """A differentiation of a symbolic program: ``redo(image)`` makes it on the static program, where
    ``image`` maps the call's arguments (tensors, lists, ``None``) to their static images."""

    redo: Callable[[Callable[[Any], Any]], list[Tensor]]


def deferred(raw: list[Tensor], redo: Callable[[Callable[[Any], Any]], list[Tensor]]) -> list[Tensor]:
    """A copy of each raw derivative in ``raw`` of role ``DEFERRED``: binding its sizes gives, in its
    place, the ``k``-th result of ``redo`` on the static program (:class:`DeferredCall`)."""
    call, out = DeferredCall(redo), []
    for k, g in enumerate(raw):
        t = compute(g.shape, lambda *i, g=g: g[i], name=g.name)
        out.append(Tensor(replace(t.op, provenance=Provenance(Role.DEFERRED, source=(call, k))), 0))
    return out


def bind_all(tensors: Sequence[Tensor], sizes: Mapping[str, int]) -> dict[Tensor, Tensor]:
    """:func:`~tensorad.lang.sizes.bind_program`, each deferred derivative redone once at ``sizes``."""
    made: dict[DeferredCall, list[Tensor]] = {}

    def resolve(t: Tensor, new: dict[Tensor, Tensor]) -> Tensor:
        call, k = t.op.provenance.source
        if call not in made:
            def image(x: Any) -> Any:
                ts = listed(x)
                bind_program(ts, {v.name: sizes[v.name] for v in program_sizes(ts)}, resolve, new)
                return _like(x, new)
            made[call] = call.redo(image)
        return made[call][k]
    return bind_program(tensors, sizes, resolve)


def bind(tensors: Tensor | Sequence[Tensor], feed: Mapping[Tensor, Any] | None = None,
         **sizes: int) -> Any:
    """The static program of ``tensors`` (a tensor, or a list or tuple, returned alike) at ``sizes``,
    given by name (``n=7``) or read from the arrays of ``feed`` (placeholder to array)."""
    if feed:
        sizes = {**read_sizes(list(feed), list(feed.values()), "bind"), **sizes}
    return _like(tensors, bind_all(listed(tensors), sizes))


def evaluate(outputs: Tensor | Sequence[Tensor], feed: dict) -> Any:
    """``ta.evaluate``: a symbolic program runs at the sizes its fed arrays have."""
    if not isinstance(feed, dict) or not symbolic(outputs, list(feed)):
        return _evaluate(outputs, feed)
    keys = [k for k in feed if isinstance(k, Tensor)]
    new = bind_all(listed(outputs) + keys, read_sizes(keys, [feed[k] for k in keys], "evaluate"))
    return _evaluate(_like(outputs, new), {new.get(k, k): v for k, v in feed.items()})


class SymbolicLowered:
    """``ta.lower`` of a symbolic program without sizes: ``work_at(n=...)`` lowers at those sizes."""

    def __init__(self, outputs: Any, inputs: Any, options: dict) -> None:
        self.outputs, self.inputs, self.options = outputs, inputs, options
        self.sizes = [v.name for v in program_sizes(listed(outputs) + listed(inputs))]

    def at(self, **sizes: int) -> LoweredFunc:
        """The static program's lowering at ``sizes``."""
        return lower(self.outputs, self.inputs, sizes=sizes, **self.options)

    def work_at(self, **sizes: int) -> int:
        """The exact work at ``sizes`` (each new size lowers once more)."""
        return self.at(**sizes).work

    @property
    def work(self) -> int:
        raise TypeError(f"the work of a program with sizes {', '.join(self.sizes)} depends on them: "
                        f"ask for it at given sizes, .work_at({', '.join(f'{s}=...' for s in self.sizes)})")


def lower(outputs: Any, inputs: Any = (), name: str = "kernel", *, sizes: dict[str, int] | None = None,
          **options: Any) -> LoweredFunc | SymbolicLowered:
    """``ta.lower``: a symbolic program is lowered at ``sizes``, or, without them, waits for
    ``.work_at(...)``."""
    if sizes is None:
        return SymbolicLowered(outputs, inputs, {"name": name, **options}) if symbolic(outputs, inputs) \
            else _lower(outputs, inputs, name, **options)
    new = bind_all(listed(outputs) + listed(inputs), sizes)
    return _lower(_like(outputs, new), _like(inputs, new), name, **options)


class SizedCallable:
    """A kernel or function of a symbolic program: each call reads the sizes from its arrays, and
    runs the static callable made for them (made once per size, kept in a bounded cache)."""

    def __init__(self, make: Callable[[dict[Tensor, Tensor]], Any], roots: list[Tensor],
                 inputs: list[Tensor], name: str, max_sizes: int = MAX_SIZES) -> None:
        self.make, self.roots, self.inputs, self.name = make, roots, inputs, name
        self.static: SignatureCache[Any] = SignatureCache(max_sizes)

    def at(self, **sizes: int) -> Any:
        """The static kernel or function at ``sizes`` (made on first use)."""
        return self.static.get(tuple(sorted(sizes.items())),
                               lambda: self.make(bind_all(self.roots, sizes)))

    def __call__(self, *arrays: Any, **kwargs: Any) -> Any:
        return self.at(**read_sizes(self.inputs, arrays, self.name))(*arrays, **kwargs)

    def forward(self, *arrays: Any) -> tuple[Any, Any]:
        """``ta.function``'s ``(outputs, residuals)``, by the static function at the arrays' sizes."""
        return self.at(**read_sizes(self.inputs, arrays, self.name)).forward(*arrays)

    def backward(self, residuals: Any, *heads: Any) -> tuple:
        """``ta.function``'s gradients, by the static function that made ``residuals``."""
        return residuals.maker.backward(residuals, *heads)


def build(outputs: Any, inputs: Any = (), *args: Any, **options: Any) -> Any:
    """``ta.build``: a symbolic program gives a :class:`SizedCallable` over static kernels."""
    if not symbolic(outputs, inputs):
        return _build(outputs, inputs, *args, **options)
    return SizedCallable(lambda new: _build(_like(outputs, new), _like(inputs, new), *args, **options),
                         listed(outputs) + listed(inputs), listed(inputs), "ta.build")


def function(outputs: Any, inputs: Any, wrt: Any = None, policy: Any = "default",
             **build_options: Any) -> Any:
    """``ta.function``: a symbolic program gives a :class:`SizedCallable` over static functions."""
    if not symbolic(outputs, inputs):
        return Function(outputs, inputs, wrt, policy, **build_options)
    roots = listed(outputs) + listed(inputs) + listed(wrt)
    return SizedCallable(lambda new: Function(_like(outputs, new), _like(inputs, new),
                                              None if wrt is None else _like(wrt, new), policy,
                                              **build_options), roots, listed(inputs), "ta.function")


for _wrapper, _base in ((evaluate, _evaluate), (lower, _lower), (build, _build), (function, Function)):
    _wrapper.__doc__ = f"{_base.__doc__}\n\n    {_wrapper.__doc__}"
