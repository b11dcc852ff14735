"""A disk cache of differentiated programs: a new process skips autodiff and the optimizer.

The results of ``JacobianRecursive``, ``Jacobian``, ``jvp``, ``hessian_vector_product`` and
``ta.function`` are kept in the kernels' disk cache, keyed by the canonical text of the DAG the call reads
(:func:`.jit.build_key.describe_graph`), the tensors' parts, the options and the source hash; calls with
``override`` functions or size variables are not cached.  An entry is the result pickled with the user's
objects written as their numbers in that text (children first, without deep recursion), so loading binds it
to this call's tensors; an entry that does not load as a list of tensors is a miss."""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Sequence
from typing import Any

from .codegen.jit import disk_cache as diskcache
from .codegen.jit.build_key import GraphKey, describe_graph, digest
from .codegen.jit.engine import source_hash
from .ir.expr import Expr, Op, ReduceArg, var
from .ir.reducer import BUILTIN_REDUCERS, CommReducer
from .ir.tensor import ComputeOp, PlaceholderOp, Provenance, Role, Tensor, new_group
from .lang import placeholder
from .lang.sizes import program_sizes

VERSION = "diffcache-1"


def cached(kind: str, parts: Sequence[Sequence[Tensor]], options: tuple,
           compute: Callable[[], list[Tensor]]) -> list[Tensor]:
    """``compute()``, or its result read from the disk cache.  ``parts`` are the call's tensors by role
    (``[[output], inputs, [head]]``); ``kind`` and ``options`` (plain values) name the call.  What cannot
    be keyed is computed, never cached."""
    try:
        keyed = key_of(kind, parts, options) if diskcache.enabled() else None
    except Exception:  # noqa: BLE001 -- a malformed argument: the call itself reports it
        keyed = None
    if keyed is None:
        return compute()
    key, graph = keyed
    payload = diskcache.get(key)
    if payload is not None:
        found = _load(payload, graph)
        if found is not None:
            return found
    result = compute()
    payload = _dump(result, graph)
    if payload is not None:
        diskcache.put(key, payload)
    return result


def key_of(kind: str, parts: Sequence[Sequence[Tensor]], options: tuple) -> tuple[str, GraphKey] | None:
    """The disk cache key of a call and the numbering of its DAG, or ``None``: not keyable."""
    roots = [t for part in parts for t in part]
    if not all(isinstance(t, Tensor) for t in roots) or program_sizes(roots):
        return None
    graph = describe_graph(roots)
    if graph is None:
        return None
    text = "\n".join([VERSION, kind, repr(options), repr([len(p) for p in parts]), source_hash(), graph.text])
    return digest(text), graph


class _Writer(pickle.Pickler):
    """Pickles a result, writing the call's own objects as their numbers in the key."""

    def __init__(self, file: io.BytesIO, graph: GraphKey, builtin_parts: dict[int, tuple]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.graph = graph
        self.builtin_parts = builtin_parts
        self.new_vars: dict[Expr, int] = {}
        self.new_placeholders: dict[PlaceholderOp, int] = {}

    def persistent_id(self, obj: Any) -> Any:  # noqa: PLR0911
        g = self.graph
        if isinstance(obj, Tensor):
            ref = g.tensors.get(obj)
            return None if ref is None else ("tensor", ref)
        if isinstance(obj, Expr):
            n = g.variables.get(obj) if obj.op is Op.VAR else None
            if n is not None:
                return ("var", n)
            part = self.builtin_parts.get(id(obj))
            if part is not None:
                return part
            if obj.op is not Op.VAR:
                return None
            k = self.new_vars.setdefault(obj, len(self.new_vars))
            info = obj.arg
            return ("new var", k, info.name, info.lo, info.hi, obj.dtype)
        if isinstance(obj, CommReducer):
            n = g.combiners.get(obj)
            if n is not None:
                return ("combiner", n)
            builtin = BUILTIN_REDUCERS.get(obj.kind)
            if builtin is not None and builtin.instantiate(obj.dtypes) is obj:
                return ("builtin combiner", obj.kind, obj.dtypes)
            return None
        if isinstance(obj, Provenance):
            n = g.groups.get(obj.group)
            group = ("group", n) if n is not None else ("new group", obj.group)
            return ("provenance", obj.role.value, group, obj.source)
        if isinstance(obj, PlaceholderOp):
            k = self.new_placeholders.setdefault(obj, len(self.new_placeholders))
            return ("new placeholder", k, obj.name, obj.shape, obj.dtype)
        return None


def _dump(result: list[Tensor], graph: GraphKey) -> bytes | None:
    """The entry of ``result``, or ``None`` where it does not pickle."""
    buf = io.BytesIO()
    try:
        order = _children_first(result, graph)
        writer = _Writer(buf, graph, _builtin_parts(order))
        writer.dump(len(order))
        for obj in order:  # (each dump finds the object's children written: shallow recursion)
            writer.dump(obj)
        writer.dump(list(result))
    except Exception:  # noqa: BLE001 -- what does not pickle is not cached (a cache never raises)
        return None
    return buf.getvalue()


def _children_first(result: list[Tensor], graph: GraphKey) -> list[Any]:
    """The tensors and expressions the result is made of, each after what it holds (not the call's own)."""
    order: list[Any] = []
    seen: set[int] = set()
    stack: list[tuple[Any, bool]] = [(t, False) for t in reversed(result)]
    while stack:
        obj, ready = stack.pop()
        if ready:
            order.append(obj)
            continue
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        stack.append((obj, True))
        stack.extend((c, False) for c in reversed(_parts_of(obj, graph)) if id(c) not in seen)
    return order


def _builtin_parts(order: list[Any]) -> dict[int, tuple]:
    """The expressions of the built-in combiners (one per kind and dtype reached), by identity, each
    as its place in that combiner.  A derived combiner (``prod.strong``, a winner) reuses a built-in's
    variables and result; written as references they load as the process's built-in's own, so the
    sharing that the key's text shows survives the round trip."""
    dtypes = {v.dtype for e in order if isinstance(e, Expr) and isinstance(e.arg, ReduceArg)
              for v in e.arg.combiner.lhs}
    parts: dict[int, tuple] = {}
    for kind, builtin in BUILTIN_REDUCERS.items():
        for dtype in sorted(dtypes):
            try:
                inst = builtin.instantiate((dtype,))
            except TypeError:  # no such built-in for this dtype (a boolean sum): nothing to share
                continue
            for field in ("lhs", "rhs", "result", "identity"):
                parts.setdefault(id(getattr(inst, field)[0]), ("builtin part", kind, dtype, field))
    return parts


def _parts_of(obj: Any, graph: GraphKey) -> list[Any]:
    if isinstance(obj, Tensor):
        op = obj.op
        if obj in graph.tensors or not isinstance(op, ComputeOp):
            return []
        attrs = [v for _, v in op.attrs]
        return [*op.axes, *op.body, *_leaves(attrs), *_leaves([op.provenance.source])]
    if isinstance(obj, Expr):
        arg, parts = obj.arg, list(obj.src)
        if isinstance(arg, Tensor):
            parts.append(arg)
        elif isinstance(arg, ReduceArg):
            c = arg.combiner
            parts += [*arg.axes, *c.lhs, *c.rhs, *c.result, *c.identity]
        return parts
    return []


def _leaves(values: list[Any]) -> list[Any]:
    """The tensors and expressions inside attribute values (nested tuples and lists)."""
    out: list[Any] = []
    stack = list(values)
    while stack:
        v = stack.pop()
        if isinstance(v, (Tensor, Expr)):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            stack.extend(v)
    return out


class _Reader(pickle.Unpickler):
    """Unpickles an entry against the numbering of this call's DAG; objects the
    differentiation made get fresh identities.  Classes outside tensorad's IR are refused."""

    _ALLOWED = {("tensorad.ir.expr", n) for n in ("Expr", "Op", "ReduceArg", "DataIndex")} | {
        ("tensorad.ir.tensor", n) for n in ("Tensor", "ComputeOp", "Role")} | {
        ("tensorad.ir.reducer", "CommReducer")}

    def __init__(self, file: io.BytesIO, graph: GraphKey) -> None:
        super().__init__(file)
        self.by_ref = {ref: t for t, ref in graph.tensors.items()}
        self.variables = {n: e for e, n in graph.variables.items()}
        self.combiners = {n: c for c, n in graph.combiners.items()}
        self.groups = {n: g for g, n in graph.groups.items()}
        self.new: dict[tuple[str, Any], Any] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a differentiated program")
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        what = pid[0]
        known = {"tensor": self.by_ref, "var": self.variables, "combiner": self.combiners}.get(what)
        if known is not None:
            return known[pid[1]]
        if what == "builtin combiner":
            return BUILTIN_REDUCERS[pid[1]].instantiate(tuple(pid[2]))
        if what == "builtin part":
            _, kind, dtype, field = pid
            return getattr(BUILTIN_REDUCERS[kind].instantiate((dtype,)), field)[0]
        if what == "provenance":
            _, role, (kind, n), source = pid
            group = self.groups[n] if kind == "group" else self._fresh("group", n, new_group)
            return Provenance(Role(role), group, source)
        if what == "new var":
            _, k, name, lo, hi, dtype = pid
            return self._fresh("var", k, lambda: var(name, lo, hi, dtype))
        if what == "new placeholder":
            _, k, name, shape, dtype = pid
            return self._fresh("placeholder", k, lambda: placeholder(shape, dtype, name).op)
        raise pickle.UnpicklingError(f"unknown reference {what!r}")

    def _fresh(self, kind: str, k: Any, make: Callable[[], Any]) -> Any:
        if (kind, k) not in self.new:
            self.new[kind, k] = make()
        return self.new[kind, k]


def _load(payload: bytes, graph: GraphKey) -> list[Tensor] | None:
    """The result an entry holds, bound to this call's DAG, or ``None`` if it does not read."""
    reader = _Reader(io.BytesIO(payload), graph)
    try:
        for _ in range(reader.load()):
            reader.load()
        result = reader.load()
    except Exception:  # noqa: BLE001 -- any entry that does not read is a miss (and is rewritten)
        return None
    return result if isinstance(result, list) and all(isinstance(t, Tensor) for t in result) else None
