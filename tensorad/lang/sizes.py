"""Size variables (``ta.size_var``) and binding: a symbolic program made static at given sizes.

A size variable is an integer ``Expr`` of kind :class:`~tensorad.ir.expr.SizeInfo`, usable in shapes,
reduction bounds and bodies.  :func:`bind_program` substitutes integers for the sizes in every shape,
axis range and body of a program; the passes below the facade see only its static result."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..ir import dtype as dt
from ..ir.expr import Expr, Op, SizeInfo, const, fresh_uid, is_size, var
from ..ir.rewrite import fold, rename, tensor_graph, walk
from ..ir.tensor import ComputeOp, PlaceholderOp, Role, Tensor

_INT_OPS = {Op.ADD: operator.add, Op.SUB: operator.sub, Op.MUL: operator.mul,
            Op.FLOORDIV: operator.floordiv, Op.MOD: operator.mod, Op.NEG: operator.neg,
            Op.MAXIMUM: max, Op.MINIMUM: min, Op.CAST: int}


def size_var(name: str, min: int = 1, max: int | None = None,  # noqa: A002
             multiple_of: int | None = None) -> Expr:
    """A symbolic size ``name``: an integer in ``[min, max]``, a multiple of ``multiple_of``."""
    for what, v, least in (("min", min, 0), ("max", max, 1), ("multiple_of", multiple_of, 1)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < least):
            raise ValueError(f"size_var {name!r}: {what} must be an int >= {least}, got {v!r}")
    if max is not None and max < min:
        raise ValueError(f"size_var {name!r}: max {max} is below min {min}")
    info = SizeInfo(str(name), fresh_uid(), None, None, min, max, multiple_of or 1)
    return Expr(Op.VAR, dt.INDEX, (), info)


def _op_sizes(op: PlaceholderOp | ComputeOp) -> list[Expr]:
    """The size variables of an op's shape, its axes' and reduction axes' ranges and its bodies (one walk
    of each body)."""
    if isinstance(op, PlaceholderOp):
        return sizes_in(op.shape)
    bounds, found = [b for v in op.axes for b in (v.lo, v.hi)], []
    for n in (n for b in op.body for n in walk(b)):
        if is_size(n):
            found.append(n)
        elif n.op is Op.REDUCE:
            bounds += [b for a in n.arg.axes for b in (a.lo, a.hi)]
    return list(dict.fromkeys(found + sizes_in(bounds)))


def sizes_in(items: Iterable[Any]) -> list[Expr]:
    """The size variables under the expressions among ``items`` (others skipped), first seen first."""
    return list(dict.fromkeys(n for e in items if isinstance(e, Expr) for n in walk(e) if is_size(n)))


def program_sizes(tensors: Iterable[Tensor]) -> list[Expr]:
    """The size variables of the program of ``tensors``; two of one name are an error."""
    found = list(dict.fromkeys(v for t in tensor_graph(tensors) for v in _op_sizes(t.op)))
    names: dict[str, Expr] = {}
    for v in found:
        if names.setdefault(v.name, v) is not v:
            raise ValueError(f"the program has two size variables named {v.name!r}: give each its own name")
    return found


def size_value(e: int | Expr, values: Mapping[Expr, int]) -> int:
    """An integer expression in sizes at ``values``."""
    if not isinstance(e, Expr):
        return e
    return fold(e, lambda n, *a: values[n] if n.op is Op.VAR else n.arg if n.op is Op.CONST
                else _INT_OPS[n.op](*a))


def check_size(v: Expr, value: Any) -> int:
    """``value`` for size variable ``v``, or an error naming the size and what it breaks."""
    info = v.arg
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"size {v.name} must be an int, got {value!r}")
    value = operator.index(value)
    if value < info.min or (info.max is not None and value > info.max):
        raise ValueError(f"size {v.name} = {value} is outside its admissible range "
                         f"[{info.min}, {'inf' if info.max is None else info.max}]")
    if value % info.multiple_of:
        raise ValueError(f"size {v.name} = {value} is not a multiple of {info.multiple_of}")
    return value


def read_sizes(inputs: Sequence[Tensor], arrays: Sequence[Any], who: str) -> dict[str, int]:
    """The sizes read from the shapes of ``arrays`` (one per placeholder of ``inputs``): each size that is
    a whole shape entry; arrays that share a size must agree."""
    seen: dict[Expr, tuple[int, str]] = {}
    for t, a in zip(inputs, arrays):
        shape = tuple(getattr(a, "shape", ()))
        for d, s in enumerate(t.shape):
            if is_size(s) and d < len(shape):
                first = seen.setdefault(s, (shape[d], t.name))
                if first[0] != shape[d]:
                    raise ValueError(f"{who}: arrays disagree on size {s.name}: {first[1]} gives "
                                     f"{first[0]}, {t.name} gives {shape[d]} (axis {d})")
    return {v.name: n for v, (n, _) in seen.items()}


def bind_program(tensors: Sequence[Tensor], sizes: Mapping[str, int],
                 resolve: Callable[[Tensor, dict[Tensor, Tensor]], Tensor] | None = None,
                 new: dict[Tensor, Tensor] | None = None) -> dict[Tensor, Tensor]:
    """Every tensor of the program of ``tensors`` to its static form at ``sizes`` (by name); a static
    program maps to itself.  Each size is checked (:func:`check_size`); a missing or unknown name is
    an error.  ``resolve(t, new)`` gives the image of a tensor of role ``DEFERRED`` (else it is bound
    as it is); ``new``, the images found so far, is extended in place."""
    found = program_sizes(tensors)
    names = [v.name for v in found]
    for bad, says in ((sorted(set(sizes) - set(names)), "the program has no size named"),
                      ([m for m in names if m not in sizes], "no value given for size")):
        if bad:
            raise ValueError(f"bind: {says} {', '.join(bad)} (its sizes: {', '.join(names) or 'none'})")
    values = {v: check_size(v, sizes[v.name]) for v in found}
    new = {} if new is None else new
    made: dict[ComputeOp, ComputeOp] = {}
    for t in tensor_graph(tensors):
        if t in new:
            continue
        if resolve is not None and not t.is_placeholder and t.op.provenance.role is Role.DEFERRED:
            new[t] = resolve(t, new)
        elif t.is_placeholder:
            shape = tuple(size_value(s, values) for s in t.shape)
            new[t] = t if shape == t.shape else Tensor(PlaceholderOp(t.name, shape, t.dtype, fresh_uid()))
        else:
            if t.op not in made:
                made[t.op] = _bind_op(t.op, values, new)
            new[t] = t if made[t.op] is t.op else Tensor(made[t.op], t.value_index)
    return new


def _bind_op(op: ComputeOp, values: dict[Expr, int], new: dict[Tensor, Tensor]) -> ComputeOp:
    """``op`` with sizes replaced by ``values`` and reads of bound tensors by their images."""
    nodes = [n for b in op.body for n in walk(b)]
    mapping: dict[Expr, Expr] = {}
    for v in dict.fromkeys((*op.axes, *(a for n in nodes if n.op is Op.REDUCE for a in n.arg.axes))):
        lo, hi = size_value(v.lo, values), size_value(v.hi, values)
        if (lo, hi) != (v.lo, v.hi):
            mapping[v] = var(v.name, lo, hi, v.dtype)
    if not mapping and not any(is_size(n) or n.op is Op.READ and new[n.arg] is not n.arg for n in nodes):
        return op
    mapping.update({v: const(n, v.dtype) for v, n in values.items()})

    def read(node: Expr) -> Expr | None:
        if new.get(node.arg, node.arg) is not node.arg:
            return Expr(Op.READ, node.dtype, node.src, new[node.arg])
        return None

    memo: dict = {}
    provenance = replace(op.provenance, source=new.get(op.provenance.source, op.provenance.source))
    return ComputeOp(op.name, op.tag, tuple(mapping.get(a, a) for a in op.axes),
                     tuple(rename(b, mapping, read, memo) for b in op.body), op.attrs, provenance)

