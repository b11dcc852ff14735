"""Size variables (``ta.size_var``) and binding: a symbolic program made static at given sizes.

A size variable is an integer ``Expr`` of kind :class:`~tensorad.ir.expr.SizeInfo`, usable in shapes,
reduction bounds and bodies.  :func:`bind_program` substitutes integers for the sizes in every shape,
axis range and body of a program (an expression of sizes and constants becomes the constant the
program written at those sizes holds), or narrower size variables (a case of their values); the passes
below the facade see only its static result.
:func:`row_plan` says whether a program is a stack of independent rows, one static program for every
count of rows."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from enum import Enum
from typing import Any

import numpy as np

from ..ir import dtype as dt
from ..ir.expr import TRUE, Expr, Op, SizeInfo, choice, conjuncts, const, data_index, fresh_uid, is_size, var
from ..ir.rewrite import fold, rename, rewrite, substitute, tensor_graph, walk
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
        elif n.op is Op.DATA_INDEX:
            bounds.append(n.arg.extent)
    return list(dict.fromkeys(found + sizes_in(bounds)))


def sizes_in(items: Iterable[Any]) -> list[Expr]:
    """The size variables under the expressions among ``items`` (others skipped), first seen first."""
    return list(dict.fromkeys(n for e in items if isinstance(e, Expr) for n in walk(e) if is_size(n)))


def monomial(extents: Any) -> tuple[int, Counter]:
    """The product of ``extents`` as a number times factors in sizes (``7 * n``: 7 and ``n``)."""
    number, factors = 1, Counter()
    for e in extents:
        if isinstance(e, Expr) and e.op is Op.MUL:
            a, fa = monomial(e.src)
            number, factors = number * a, factors + fa
        elif isinstance(e, Expr) and e.op is not Op.CONST:
            factors[e] += 1
        else:
            number *= int(e.arg) if isinstance(e, Expr) else e
    return number, factors


def program_sizes(tensors: Iterable[Tensor]) -> list[Expr]:
    """The size variables of the program of ``tensors``; two of one name are an error."""
    found = list(dict.fromkeys(v for t in tensor_graph(tensors) for v in _op_sizes(t.op)))
    names: dict[str, Expr] = {}
    for v in found:
        if names.setdefault(v.name, v) is not v:
            raise ValueError(f"the program has two size variables named {v.name!r}: give each its own name")
    return found


def size_value(e: int | Expr, values: Mapping[Expr, int | Expr]) -> int | Expr:
    """An integer expression in sizes at ``values`` (an expression where a value is a size variable)."""
    if not isinstance(e, Expr):
        return e
    if any(isinstance(values.get(v, v), Expr) for v in sizes_in([e])):
        return rename(e, {v: x if isinstance(x, Expr) else const(x, v.dtype) for v, x in values.items()})
    return fold(e, lambda n, *a: values[n] if n.op is Op.VAR else n.arg if n.op is Op.CONST
                else _INT_OPS[n.op](*a))


def check_size(v: Expr, value: Any) -> int | Expr:
    """``value`` for size variable ``v``, or an error naming the size and what it breaks; a size
    variable (a case of ``v``'s values, :func:`~tensorad.symbolic.deferred`) is taken as it is."""
    if is_size(value):
        return value
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


def bind_program(tensors: Sequence[Tensor], sizes: Mapping[str, int | Expr],
                 resolve: Callable[[Tensor, dict[Tensor, Tensor]], Tensor] | None = None,
                 new: dict[Tensor, Tensor] | None = None, counts: Mapping[str, Expr] | None = None,
                 strict: bool = False) -> dict[Tensor, Tensor]:
    """Every tensor of the program of ``tensors`` to its static form at ``sizes`` (by name); a static program
    maps to itself.  Each size is checked (:func:`check_size`); a missing one is an error, a name the program
    lacks binds nothing (a derivative's case that reads no such size) or, ``strict`` (a user's), is an error.
    ``resolve(t, new)`` gives the image of a tensor of role ``DEFERRED`` (else it is bound as it is); ``new``,
    the images found so far, is extended in place.  ``counts``: sizes whose value in bodies (a sum's count,
    ``float64(n)``) is an index expression, while shapes and ranges take ``sizes``'s."""
    found = program_sizes(tensors)
    names = [v.name for v in found]
    for bad, says in ((sorted(set(sizes) - set(names)) if strict else [], "the program has no size named"),
                      ([m for m in names if m not in sizes], "no value given for size")):
        if bad:
            raise ValueError(f"bind: {says} {', '.join(bad)} (its sizes: {', '.join(names) or 'none'})")
    values = {v: check_size(v, sizes[v.name]) for v in found}
    inner = {v: counts[v.name] if counts and v.name in counts else x for v, x in values.items()}
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
                made[t.op] = _bind_op(t.op, values, new, inner)
            new[t] = t if made[t.op] is t.op else Tensor(made[t.op], t.value_index)
    return new


def _folded(body: Expr, values: dict[Expr, int]) -> Expr:
    """``body`` with each largest expression of sizes and constants (``1.0 / float64(n)``) its value at
    ``values``, computed as the kernel would (IEEE arithmetic in its type): the constant that the
    program written at those sizes holds."""
    def visit(n: Expr, *kids: tuple[Any, Expr, bool]) -> tuple[Any, Expr, bool]:
        sized = is_size(n) or any(k[2] for k in kids)
        value = values.get(n) if is_size(n) else _typed(n.dtype, n.arg) if n.op is Op.CONST else None
        if n.op in _FOLDS and all(k[0] is not None for k in kids) and (dt.is_int(n.dtype) or n.op in _EXACT):
            value = _typed(n.dtype, kids[0][0]) if n.op is Op.CAST else _FOLDS[n.op](*(k[0] for k in kids))
        if value is not None:
            return value, n, sized
        src = tuple(const(k[0], s.dtype) if k[0] is not None and k[2] else k[1] for k, s in zip(kids, n.src))
        return None, n if all(a is b for a, b in zip(src, n.src)) else n.replace(src=src), False

    with np.errstate(all="ignore"):
        value, out, sized = fold(body, visit)
    return const(value, body.dtype) if value is not None and sized else out


def _typed(dtype: str, v: Any) -> Any:
    """``v`` as a value of ``dtype`` (an int, or a NumPy float32 or float64); ``None`` for other types."""
    if dt.is_int(dtype):
        return int(v)
    return np.dtype(dtype).type(v) if dtype in ("float32", "float64") else None


_FOLDS = {**_INT_OPS, Op.DIV: operator.truediv, Op.SQRT: np.sqrt}
_EXACT = (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.NEG, Op.CAST, Op.SQRT)  # on floats: IEEE, as the kernel


def _bind_op(op: ComputeOp, values: dict[Expr, int | Expr], new: dict[Tensor, Tensor],
             inner: dict[Expr, int | Expr]) -> ComputeOp:
    """``op`` with sizes replaced by ``values`` (in its bodies by ``inner``) and reads of bound tensors by
    their images."""
    nodes = [n for b in op.body for n in walk(b)]
    mapping: dict[Expr, Expr] = {}
    for v in dict.fromkeys((*op.axes, *(a for n in nodes if n.op is Op.REDUCE for a in n.arg.axes))):
        lo, hi = size_value(v.lo, values), size_value(v.hi, values)
        if (lo, hi) != (v.lo, v.hi):
            mapping[v] = var(v.name, lo, hi, v.dtype)
    if not mapping and not any(is_size(n) or n.op is Op.READ and new[n.arg] is not n.arg for n in nodes):
        return op
    mapping.update({v: n if isinstance(n, Expr) else const(n, v.dtype) for v, n in inner.items()})
    static = not any(isinstance(n, Expr) for n in values.values())
    folds = {v: n for v, n in inner.items() if not isinstance(n, Expr)}

    def read(node: Expr) -> Expr | None:
        if new.get(node.arg, node.arg) is not node.arg:
            return Expr(Op.READ, node.dtype, node.src, new[node.arg])
        return None

    def gather(n: Expr) -> Expr:  # a gather whose extent is in sizes
        return data_index(n.src[0], size_value(n.arg.extent, values), n.arg.mode, n.arg.tensor, n.arg.axis)

    memo: dict = {}
    bodies = tuple(rename(_folded(b, folds) if static else b, mapping, read, memo) for b in op.body)
    if op.provenance.role in (Role.ADJOINT, Role.SPLIT, Role.MERGED):  # (as the optimizer makes them)
        bodies = tuple(_one_point(b, set(mapping.values())) for b in bodies)
    counts = {n for n in inner.values() if isinstance(n, Expr) and not is_size(n)}
    if counts:
        bodies = tuple(_widened(b, counts) for b in bodies)
    if any(n.op is Op.DATA_INDEX and isinstance(n.arg.extent, Expr) for n in nodes):
        bodies = tuple(rewrite(b, {Op.DATA_INDEX: gather}) for b in bodies)
    provenance = replace(op.provenance, source=new.get(op.provenance.source, op.provenance.source))
    return ComputeOp(op.name, op.tag, tuple(mapping.get(a, a) for a in op.axes), bodies, op.attrs, provenance)


def _one_point(body: Expr, bound: set[Expr]) -> Expr:
    """A sum of one term over axes that binding leaves one point each (one of them sized): its term at
    that point where its condition holds, else zero, as the optimizer makes a derivative's sum over one
    point at static sizes; any other body as it is."""
    if body.op is not Op.REDUCE or body.arg.combiner.kind != "sum" or len(body.src) != 2 \
            or any(a.hi != a.lo + 1 for a in body.arg.axes) or not any(a in bound for a in body.arg.axes):
        return body
    at = {a: const(a.lo, a.dtype) for a in body.arg.axes}
    cond, term = (substitute(e, at) for e in body.src)
    return term if cond is TRUE else choice(Op.IF_THEN_ELSE, cond, term, const(0, term.dtype))


def _widened(body: Expr, counts: set[Expr]) -> Expr:
    """``body`` with the integer arithmetic of sizes over the runtime ``counts`` (``int64`` reads) in
    ``int64``, a cast of it to ``int32`` dropped: a product of sizes is exact at any count, as the constant
    of a static program is (``n * 56 * 56`` in ``int32`` wraps past 684,784 rows)."""
    wide = set(counts)

    def rule(n: Expr) -> Expr | None:
        if n in wide or n.op not in _INT_OPS or not dt.is_int(n.dtype) \
                or not any(s in wide for s in n.src) or not all(s in wide or s.op is Op.CONST for s in n.src):
            return None
        out = n.src[0] if n.op is Op.CAST else \
            n.replace(src=tuple(s if s in wide else const(s.arg, "int64") for s in n.src), dtype="int64")
        wide.add(out)
        return out
    return rewrite(body, rule)


class RowKind(Enum):
    """What a tensor of a program of independent rows (:func:`row_plan`) is at a block of its rows."""

    ROWS = "rows"  # one row per row of the batch: the block's rows
    WHOLE = "whole"  # no rows and no read of one: the same at every block
    SUM = "sum"  # a sum over the rows: the sum of the blocks' sums


def row_plan(outputs: Sequence[Tensor], inputs: Sequence[Tensor], staged: bool = False
             ) -> tuple[Expr | None, dict[Tensor, RowKind], str]:
    """The size ``n`` along which the program of ``outputs`` from ``inputs`` is a stack of independent
    rows and each tensor's :class:`RowKind`, or ``(None, {}, why not)``; of several sizes, the first
    that is, the others taken as bound (a program of independent rows at each of their values).  Rows are
    independent when ``n`` is one extent of the computed tensors it sizes (the leading one of the
    arguments, :func:`row_axis`) and of nothing else; an op of ``n`` rows reads a tensor of ``n`` rows
    only at its own row (its axis of rows, read at that index and nowhere else), an op that sums over
    the rows (one ``sum`` over an axis of ``[0, n)``) reads them only at that axis, and only its
    deferred derivative reads it; other ops read no tensor of ``n`` rows.
    Such a program at ``n`` rows is the program at any ``b`` rows run on consecutive blocks of ``b``
    rows, its sums over the rows added up.  ``staged``: an op may also read a sum over the rows (after
    it is made: a later stage, which reads it as an input) and ``n`` as a float value (``1.0 / n``)."""
    found = program_sizes([*outputs, *inputs])
    if not found:
        return None, {}, "the program has no size variables"
    whys = []
    for n in found:
        kinds, why = _row_kinds([*outputs, *inputs], n, staged)
        if not why:
            return n, kinds, ""
        whys.append(why if len(found) == 1 else f"not along {n.name}: {why}")
    return None, {}, "; ".join(whys)


def _row_kinds(tensors: list[Tensor], n: Expr, staged: bool) -> tuple[dict[Tensor, RowKind], str]:
    """Each tensor's :class:`RowKind` in the program of ``tensors`` as rows along ``n``, or ``({}, why
    not)``; ``staged``: as :func:`row_plan`'s."""
    kinds: dict[Tensor, RowKind] = {}
    for t in tensor_graph(tensors):
        kind, why = _row_kind(t, n, kinds, staged)
        if why:
            return {}, f"{t.name}: {why}"
        kinds[t] = kind
    for t in tensors:  # (the driver moves an argument's pointer by its rows: they lead)
        if kinds[t] is RowKind.ROWS and t.shape[0] is not n:
            return {}, f"{t.name}: an argument with size {n.name} in its shape {t.shape} past the front"
    return kinds, ""


def _sized(n: Expr, items: Iterable[Any]) -> bool:
    """Whether size ``n`` is under the expressions among ``items``."""
    return any(v is n for v in sizes_in(items))


def _row_kind(t: Tensor, n: Expr, kinds: dict[Tensor, RowKind], staged: bool) -> tuple[RowKind | None, str]:
    """The :class:`RowKind` of ``t`` in a program of independent rows of size ``n`` (:func:`row_plan`),
    given its producers' ``kinds``, or ``(None, why not)``."""
    axis = row_axis(t.shape, n)
    rows = axis is not None and (axis == 0 or not t.is_placeholder)
    if _sized(n, [s for k, s in enumerate(t.shape) if not rows or k != axis]):
        return None, f"size {n.name} in its shape {t.shape} past the leading extent"
    if t.is_placeholder:
        return RowKind.ROWS if rows else RowKind.WHOLE, ""
    op = t.op
    nodes = [m for b in op.body for m in walk(b)]
    summed = [x.arg for x in nodes if x.op is Op.READ and kinds.get(x.arg) is RowKind.SUM]
    if summed and not staged:
        deferred = op.provenance.role is Role.DEFERRED
        return (RowKind.SUM, "") if deferred else (None, f"reads {summed[0].name}, a sum over {n.name} rows")
    runs = [b for k, v in enumerate(op.axes) if not rows or k != axis for b in (v.lo, v.hi)]
    if rows and (op.axes[axis].hi is not n or _sized(n, [op.axes[axis].lo])) or _sized(n, runs):
        return None, f"its axes run over size {n.name} other than as its rows"
    total = op.body[0] if len(op.body) == 1 and op.body[0].op is Op.REDUCE else None
    over = [] if total is None or total.arg.combiner.kind != "sum" else \
        [a for a in total.arg.axes if a.hi is n and type(a.lo) is int and a.lo == 0]
    row = op.axes[axis] if rows else over[0] if over else None
    why = _row_breach(op, nodes, row, n, staged and all(value_only(b, n) for b in op.body))
    if why:
        return None, why
    return RowKind.ROWS if rows else RowKind.SUM if row is not None else RowKind.WHOLE, ""


def row_axis(shape: Sequence[Any], n: Expr) -> int | None:
    """The axis of ``shape`` whose extent is size ``n`` (its first), or ``None``."""
    return next((k for k, s in enumerate(shape) if s is n), None)


def value_only(e: Expr, n: Expr) -> bool:
    """Whether ``e`` reads size ``n`` only in values of a float type (``1.0 / float32(n)``), in no index
    or condition."""
    return not fold(e, lambda m, *kids: m is n or (m.op is not Op.CAST or not dt.is_float(m.dtype))
                    and any(kids))


def _row_breach(op: ComputeOp, nodes: list[Expr], row: Expr | None, n: Expr, valued: bool = False) -> str:
    """Why ``op`` (its bodies' ``nodes``) reads other than the row ``row`` of the tensors of ``n`` rows,
    or ``""``.  A reduction axis over ``[0, n)`` that a sum's condition pins to ``row`` is ``row``;
    ``valued``: ``n`` is read only as a float value."""
    pins = {c for r in nodes if r.op is Op.REDUCE for c in conjuncts(r.src[0])
            if c.op is Op.EQ and row is not None and any(x is row for x in c.src)
            and all(x is row or any(x is a for a in r.arg.axes) and x.hi is n for x in c.src)}
    rowlike = {row} | {x for c in pins for x in c.src}
    for node in nodes:
        if node is n and not valued:
            return f"reads size {n.name} as a value"
        if node.op is Op.REDUCE and any(a not in rowlike for a in node.arg.axes if _sized(n, (a.lo, a.hi))):
            return f"sums over size {n.name} other than at its own row"
        at = row_axis(node.arg.shape, n) if node.op is Op.READ else None
        if node not in pins and any((x in rowlike) != (k == at) for k, x in enumerate(node.src)):
            return f"reads its row index as a value, or a tensor of {n.name} rows other than at its row"
    return "is its row index" if any(b in rowlike for b in op.body) else ""
