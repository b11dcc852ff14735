"""What ``ta.torch.op`` and ``ta.jax.op`` share: a call's signature, the placeholders the user's function
is traced on, the bounded cache of what each signature compiled to, and their base :class:`SignatureOp`.

A decorated function is compiled once per signature (shapes, dtypes and static keyword values) into a
:class:`SignatureCache` it owns: least recently used first out, at most ``max_signatures``."""

from __future__ import annotations

import functools
import inspect
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from ..ir.tensor import Tensor
from ..lang import placeholder
from ..training.residuals import Policy, check_policy

DEFAULT_MAX_SIGNATURES = 32

V = TypeVar("V")

# Python values a keyword may carry as a static value (part of the signature)
_STATIC_TYPES = (bool, int, float, str, type(None))


class SignatureCache(Generic[V]):
    """A least-recently-used map from signatures to compiled callables, of at most ``maxsize``
    entries; its owner (one decorated function) sets its lifetime."""

    def __init__(self, maxsize: int) -> None:
        if not isinstance(maxsize, int) or isinstance(maxsize, bool) or maxsize < 1:
            raise ValueError(f"max_signatures must be a positive int, got {maxsize!r}")
        self.maxsize = maxsize
        self._entries: OrderedDict[Hashable, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """The entry for ``key``, made on a miss; the least recently used one past the bound is dropped."""
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            return found
        found = self._entries[key] = make()
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)
        return found

    def clear(self) -> None:
        self._entries.clear()


def static_key(static: dict[str, Any]) -> tuple:
    """The static keyword values as a hashable part of the signature (scalars, strings, ``None``, tuples)."""
    return tuple(sorted((name, _frozen(name, value)) for name, value in static.items()))


def _frozen(name: str, value: Any) -> Hashable:
    if isinstance(value, _STATIC_TYPES):
        return (type(value).__name__, value)  # 1 and 1.0 and True are different signatures
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_frozen(name, v) for v in value))
    raise TypeError(f"keyword argument {name!r}: a static value must be a Python number, string, "
                    f"None or a tuple of them, got {type(value).__name__} (arrays are passed "
                    f"positionally)")


def trace(fn: Callable, specs: Sequence[tuple[tuple[int, ...], str]], static: dict[str, Any],
          what: str) -> tuple[Tensor | list[Tensor], list[Tensor]]:
    """``fn`` called on placeholders of the given shapes and dtypes (and the static values), named after
    its positional parameters (``in<k>`` past them): its output tensor(s) and the placeholders."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [positional[k] if k < len(positional) else f"in{k}" for k in range(len(specs))]
    inputs = [placeholder(shape, dtype, name) for (shape, dtype), name in zip(specs, names)]
    result = fn(*inputs, **static)
    if isinstance(result, Tensor):
        return result, inputs
    if isinstance(result, (tuple, list)) and result and all(isinstance(t, Tensor) for t in result):
        return list(result), inputs
    raise TypeError(f"{what}: {getattr(fn, '__name__', 'fn')} must return a tensorad tensor or a tuple "
                    f"of them, got {type(result).__name__}")


class SignatureOp:
    """``fn`` (tensorad over placeholders) compiled per signature into a ``function_type`` of its
    outputs and placeholders, kept in :attr:`signatures`; ``bridge`` names the decorator in messages."""

    bridge: str
    function_type: type

    def __init__(self, fn: Callable[..., Tensor | Sequence[Tensor]], *,
                 max_signatures: int = DEFAULT_MAX_SIGNATURES, policy: Policy = "default",
                 **build_options: Any) -> None:
        if not callable(fn):
            raise TypeError(f"{self.bridge}: expected a function, got {type(fn).__name__}")
        check_policy(policy)
        self.fn = fn
        self.policy, self.build_options = policy, build_options
        self.signatures = SignatureCache(max_signatures)
        functools.update_wrapper(self, fn)

    def make(self, signature: tuple, static: dict[str, Any]) -> Any:
        """The function of ``signature`` (shapes and dtypes) and the static keyword values."""
        outputs, inputs = trace(self.fn, signature, static, f"{self.bridge} {self.__name__}")
        return self.function_type(outputs, inputs, policy=self.policy, **self.build_options)
