"""What ``ta.torch.op`` and ``ta.jax.op`` share: a call's signature, the placeholders the user's function
is traced on, the bounded cache of what each signature compiled to, and their base :class:`SignatureOp`.

A decorated function is compiled once per signature (shapes, dtypes and static keyword values) into a
:class:`SignatureCache` it owns: least recently used first out, at most ``max_signatures``.  With
``dynamic`` it is also traced over size variables once per :class:`Family` of signatures (``families``,
bounded alike): the dimensions that vary become sizes, equal ones sharing one (duck sizing)."""

from __future__ import annotations

import functools
import inspect
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..ir.tensor import Tensor
from ..lang import placeholder, size_var
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

    def items(self) -> list[tuple[Hashable, V]]:
        """The entries, least recently used first (reading them does not use them)."""
        return list(self._entries.items())

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


@dataclass(eq=False)
class Family:
    """Signatures that differ only in the dimensions ``pattern`` names (``("s0", 3)``: a size ``s0``, then 3),
    and the function traced over them (``None``: built per signature instead, ``why`` says why)."""

    pattern: tuple
    function: Any = None
    why: str = ""
    proven: bool = False  # a call ran through ``function``

    def fits(self, signature: tuple) -> bool:
        """Whether ``signature`` has the pattern's ranks, dtypes and fixed dimensions, and its sizes'
        equalities: a size's dimensions are equal, and at least 2 (a trace over a size reads ``s == 1`` as
        false, as ``squeeze`` does: a dimension of 1 is traced as itself, as ``torch.compile`` does)."""
        if len(signature) != len(self.pattern):
            return False
        seen: dict[str, int] = {}
        for (dims, dtype), (shape, given) in zip(self.pattern, signature):
            if dtype != given or len(dims) != len(shape):
                return False
            for d, n in zip(dims, shape):
                if n != d if isinstance(d, int) else n < 2 or seen.setdefault(d, n) != n:
                    return False
        return True


def family_pattern(signature: tuple, varies: Callable[[int, int], bool], named: Callable[[int, int], Hashable]
                   ) -> tuple | None:
    """``signature`` with each dimension ``varies(k, axis)`` flags replaced by a size name, one per value
    of ``named(k, axis)`` (duck sizing); ``None`` where no dimension varies."""
    names: dict[Hashable, str] = {}
    pattern = tuple((tuple(names.setdefault(named(k, a), f"s{len(names)}") if varies(k, a) else n
                           for a, n in enumerate(shape)), dtype)
                    for k, (shape, dtype) in enumerate(signature))
    return pattern if names else None


class SignatureOp:
    """``fn`` (tensorad over placeholders) compiled per signature by ``build_function`` (the bridge's function
    of a program, symbolic or not), kept in :attr:`signatures`; ``bridge`` names the decorator in
    messages.  ``dynamic`` (``False``, ``None``, ``True``) chooses when signatures share a :class:`Family`
    traced over size variables (kept in :attr:`families`): never; once a signature of the same ranks,
    dtypes and static values differs in some dimensions (those, other than 0 and 1, vary); from the first
    call (every dimension of at least 2)."""

    bridge: str
    build_function: Callable[..., Any]

    def __init__(self, fn: Callable[..., Tensor | Sequence[Tensor]], *,
                 max_signatures: int = DEFAULT_MAX_SIGNATURES, dynamic: bool | None = None,
                 policy: Policy = "default", **build_options: Any) -> None:
        if not callable(fn):
            raise TypeError(f"{self.bridge}: expected a function, got {type(fn).__name__}")
        if dynamic not in (None, False, True):
            raise TypeError(f"{self.bridge}: dynamic must be None, False or True, got {dynamic!r}")
        check_policy(policy)
        self.fn, self.dynamic = fn, dynamic
        self.policy, self.build_options = policy, build_options
        self.signatures = SignatureCache(max_signatures)
        self.families: SignatureCache[Family] = SignatureCache(max_signatures)
        functools.update_wrapper(self, fn)

    def make(self, signature: tuple, static: dict[str, Any]) -> Any:
        """The function of ``signature`` (shapes, dtypes; a shape may hold size variables) and the static
        keyword values."""
        outputs, inputs = trace(self.fn, signature, static, f"{self.bridge} {self.__name__}")
        return type(self).build_function(outputs, inputs, policy=self.policy, **self.build_options)

    def family(self, signature: tuple, static: dict[str, Any]) -> Family | None:
        """The family of a signature not cached itself, made where ``dynamic`` asks for one (``None``:
        the signature is built alone)."""
        key = static_key(static)
        for fkey, found in reversed(self.families.items()):
            if fkey[1] == key and found.fits(signature):
                return self.families.get(fkey, Family)
        if self.dynamic:
            pattern = family_pattern(signature, lambda k, a: signature[k][0][a] >= 2,
                                     lambda k, a: signature[k][0][a])
        elif self.dynamic is None:
            pattern = next(filter(None, (self._grown(signature, old) for (old, k), _ in
                                         reversed(self.signatures.items()) if k == key)), None)
        else:
            return None
        return None if pattern is None else self.families.get((pattern, key),
                                                              lambda: self._traced(pattern, static))

    @staticmethod
    def _grown(signature: tuple, old: tuple) -> tuple | None:
        """The pattern where ``signature`` and a cached signature ``old`` of the same ranks and dtypes
        differ (neither dimension 0 or 1), sizes shared where both agree on equality; else ``None``."""
        if len(old) != len(signature) or any(d != e or len(s) != len(t)
                                             for (s, d), (t, e) in zip(old, signature)):
            return None
        def varies(k: int, a: int) -> bool:
            return signature[k][0][a] != old[k][0][a] and min(signature[k][0][a], old[k][0][a]) >= 2
        return family_pattern(signature, varies, lambda k, a: (old[k][0][a], signature[k][0][a]))

    def _traced(self, pattern: tuple, static: dict[str, Any]) -> Family:
        """A family, ``fn`` traced and compiled over its sizes, or why it cannot be."""
        sizes = {d: size_var(d) for dims, _ in pattern for d in dims if isinstance(d, str)}
        spec = tuple((tuple(sizes.get(d, d) for d in dims), dtype) for dims, dtype in pattern)
        try:
            return Family(pattern, self.make(spec, static))
        except Exception as e:  # noqa: BLE001  (fn needs static sizes: it is built per signature)
            return Family(pattern, why=f"{self.__name__} is not traceable over sizes "
                                        f"{', '.join(sizes)}: {type(e).__name__}: {e}")

    def call_family(self, key: tuple, static: dict[str, Any], *args: Any) -> Any:
        """The call of signature ``key`` through its family's function, or ``NotImplemented`` where the
        signature is built alone (cached itself, no family, or the family's first call raised: the
        family is then built per signature from then on)."""
        if key in self.signatures or self.dynamic is False:
            return NotImplemented
        family = self.family(key[0], static)
        if family is None or family.function is None:
            return NotImplemented
        if family.proven:
            return family.function(*args)
        try:
            out = family.function(*args)
        except Exception as e:  # noqa: BLE001
            family.function, family.why = None, f"{self.__name__} failed over sizes: {type(e).__name__}: {e}"
            return NotImplemented
        family.proven = True
        return out

    @property
    def why(self) -> str:
        """Why a family of signatures is built per signature, one line each (``""``: none is)."""
        return "\n".join(f.why for _, f in self.families.items() if f.why)
