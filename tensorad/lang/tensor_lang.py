"""The user's language (API.md section 1): placeholders, compute, reduce axes, scalar functions.

``compute`` names its axes after ``fcompute``'s parameters, accepts tuple bodies (one op, several tensors)
and lifts nested reductions into tensors of their own, so that every reduction is the whole body of its
compute; a sum's or product's guard of its identity becomes its ``where`` (:func:`guard_into_domain`).
Every new compute is checked for out-of-bounds reads."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from types import FunctionType
from typing import Any

from ..ir import dtype as dt
from ..ir import trace
from ..ir.expr import (
    TRUE,
    Expr,
    Op,
    as_expr,
    binary,
    cast,
    choice,
    conjuncts,
    const,
    fresh_uid,
    is_size,
    logical,
    logical_not,
    unary,
    var,
)
from ..ir.rewrite import free_vars, rewrite, substitute, walk
from ..ir.tensor import ComputeOp, PlaceholderOp, Provenance, Role, Tensor, new_group


def _check_shape(shape: Any, what: str) -> tuple[int | Expr, ...]:
    if isinstance(shape, (int, Expr)):
        shape = (shape,)
    try:
        out = tuple(map(_bound, shape))
    except TypeError:
        out = (None,)
    if any(s is None for s in out):
        raise TypeError(f"{what}: shape must be a tuple of ints, got {shape!r} (or of sizes: "
                        f"integer expressions of ta.size_var)")
    if any(isinstance(s, int) and s < 0 for s in out):
        raise ValueError(f"{what}: negative dimension in shape {shape!r}")
    return out


def _bound(s: Any) -> int | Expr | None:
    """A shape entry or range bound as an int or an integer expression of size variables; ``None`` if
    it is neither."""
    if isinstance(s, Expr) and s.op is Op.CONST:
        s = s.arg
    if hasattr(s, "item") and not isinstance(s, Expr):
        s = s.item()
    if isinstance(s, Expr):
        free = all(is_size(n) or n.op not in (Op.VAR, Op.READ, Op.REDUCE) for n in walk(s))
        return s if free and dt.is_int(s.dtype) else None
    return None if isinstance(s, bool) or not isinstance(s, int) else s


def placeholder(shape: Sequence[int | Expr], dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of ``shape`` and ``dtype``."""
    shape = _check_shape(shape, f"placeholder {name!r}")
    return Tensor(PlaceholderOp(name, shape, dt.check_dtype(dtype), fresh_uid()))


def reduce_axis(dom: tuple[int | Expr, int | Expr], name: str = "k") -> Expr:
    """A reduction variable ranging over ``lo <= k < hi`` (bounds: ints or expressions in sizes)."""
    try:
        lo, hi = (_bound(d) if isinstance(d, Expr) else int(d) for d in dom)
        if lo is None or hi is None:
            raise TypeError
    except (TypeError, ValueError):
        raise TypeError(f"reduce_axis {name!r}: dom must be a pair (lo, hi) of ints or sizes, "
                        f"got {dom!r}") from None
    if isinstance(lo, int) and isinstance(hi, int) and hi < lo:
        raise ValueError(f"reduce_axis {name!r}: empty or negative range [{lo}, {hi})")
    return var(name, lo, hi)


def _positional(fcompute: Callable) -> tuple[list[str], int, bool]:
    """The names of ``fcompute``'s positional parameters, how many have no default, and whether it takes
    ``*args``: from a plain function's code object, else (wrappers, partials, ...) from ``inspect``."""
    if type(fcompute) is FunctionType and not hasattr(fcompute, "__wrapped__") \
            and not hasattr(fcompute, "__signature__"):
        code = fcompute.__code__
        n = code.co_argcount  # (positional-only ones included)
        required = n - len(fcompute.__defaults__ or ())
        return list(code.co_varnames[:n]), required, n == 0 and bool(code.co_flags & inspect.CO_VARARGS)
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = sum(p.default is inspect.Parameter.empty for p in positional)
    star = bool(params) and params[0].kind is inspect.Parameter.VAR_POSITIONAL
    return [p.name for p in positional], required, star


def _axis_names(fcompute: Callable, ndim: int) -> list[str]:
    names, required, star = _positional(fcompute)
    if star:
        return [f"i{d}" for d in range(ndim)]
    if len(names) != ndim and required == ndim:
        # ``lambda i, k, s=s: ...``: a defaulted parameter captures a value, it is no index
        return names[:ndim]
    if len(names) != ndim:
        raise TypeError(f"compute: fcompute takes {len(names)} index arguments but the shape "
                        f"has {ndim} dimensions")
    return names


def compute(shape: Sequence[int | Expr], fcompute: Callable, name: str = "compute", tag: str = "",
            attrs: dict | None = None, check_bounds: bool = True,
            dtype: str | None = None) -> Tensor | tuple[Tensor, ...]:
    """A tensor whose element at index ``(i, j, ...)`` is ``fcompute(i, j, ...)``.

    Returns a tuple of tensors (sharing one op) when ``fcompute`` returns a tuple.
    ``dtype`` (default: the body's) stores the values in another dtype, with an explicit
    ``cast``: ``dtype="bfloat16"`` computes in float32 and stores rounded to bfloat16.
    ``check_bounds=False`` skips the isl bounds proof: for tensorad's own passes (autodiff, the
    optimizer), whose reads are in bounds by construction and which build many tensors."""
    shape = _check_shape(shape, f"compute {name!r}")
    axes = tuple(var(n, 0, s) for n, s in zip(_axis_names(fcompute, len(shape)), shape))
    result = fcompute(*axes)
    multi = isinstance(result, (tuple, list))
    bodies = tuple(as_expr(b) for b in (result if multi else (result,)))
    if dtype is not None:
        dtype = dt.check_dtype(dtype)
        bodies = tuple(cast(dtype, b) for b in bodies)
    if not bodies:
        raise ValueError(f"compute {name!r}: fcompute returned an empty tuple")
    tensors = make_compute(name, axes, bodies, tag, attrs, check_bounds)
    return tensors if multi else tensors[0]


def make_compute(name: str, axes: Sequence[Expr], bodies: Sequence[Expr], tag: str = "",
                 attrs: dict | None = None, check_bounds: bool = True,
                 provenance: Provenance | None = None) -> tuple[Tensor, ...]:
    """The op behind :func:`compute`, from axis variables and bodies: lifts nested reductions, checks the
    body form and (unless ``check_bounds=False``) proves reads in bounds.  ``provenance`` (default: a user
    op) without a group gets a fresh one, shared with the lifted reductions."""
    if provenance is None:
        provenance = Provenance(Role.USER, new_group())
    elif not provenance.group:
        provenance = Provenance(provenance.role, new_group(), provenance.source)
    if not check_bounds:  # a pass's op: not a definition of the user's
        return _make_compute(name, axes, bodies, tag, attrs, check_bounds, provenance)
    with trace.stage("define", name):
        return _make_compute(name, axes, bodies, tag, attrs, check_bounds, provenance)


def _make_compute(name: str, axes: Sequence[Expr], bodies: Sequence[Expr], tag: str,
                  attrs: dict | None, check_bounds: bool, provenance: Provenance) -> tuple[Tensor, ...]:
    axes = tuple(axes)
    for ax in axes:
        if not (isinstance(ax, Expr) and ax.op is Op.VAR and ax.lo == 0 and ax.hi is not None):
            raise TypeError(f"compute {name!r}: axes must be variables with range [0, extent)")
    bodies = tuple(as_expr(b) for b in bodies)
    nodes = [list(walk(b)) for b in bodies]  # (one walk per body serves every check)
    _check_reduce_axes(nodes, axes, name)
    if any(n.op is Op.REDUCE and n is not b for b, ns in zip(bodies, nodes) for n in ns):
        bodies = _lift_nested_reductions(bodies, axes, name, check_bounds, provenance.group)
        nodes = [list(walk(b)) for b in bodies]
    _check_body_form(bodies, nodes, axes, name)
    if check_bounds:  # (a user's definition: one form of each reduction its derivative allows)
        bodies = tuple(guard_into_domain(b, IDENTITY_BLIND) for b in bodies)
    op = ComputeOp(name, tag, axes, bodies, tuple(sorted((attrs or {}).items())), provenance)
    if check_bounds:
        from .bounds import check_op_bounds  # isl-based; imported late to keep import light

        check_op_bounds(op)
    return tuple(Tensor(op, i) for i in range(len(bodies)))


#: the combiners whose derivatives ignore terms equal to the identity (the ties of a max or min with its
#: padding take a share of the head, as ``torch.amax`` of the padded tensor gives)
IDENTITY_BLIND = ("sum", "prod")


def guard_into_domain(red: Expr, kinds: tuple[str, ...] | None = None) -> Expr:
    """``red`` (a ``REDUCE`` of one source ``choice(c, e, id)`` or ``choice(c, id, e)``, ``id`` its
    combiner's identity, a combiner of ``kinds``; ``None``: any) over the points where its condition and
    the affine index conjuncts of ``c`` hold, reading ``e`` guarded by the rest of ``c``; anything else
    unchanged.  The identity combines to nothing, so the value is the same, and the spellings of one
    reduction meet::

        C[i] = sum_k if_then_else(k <= i, A[k], 0)   ->   C[i] = sum_{k : k <= i} A[k]  (a scan)"""
    if red.op is not Op.REDUCE or len(red.src) != 2 or red.arg.combiner.arity != 1 \
            or kinds is not None and red.arg.combiner.kind not in kinds:
        return red
    src, ident = red.src[1], red.arg.combiner.identity[0]
    if src.op not in (Op.SELECT, Op.IF_THEN_ELSE) or ident.op is not Op.CONST:
        return red
    c, a, b = src.src
    same = [x.op is Op.CONST and x.dtype == ident.dtype and x.arg == ident.arg for x in (a, b)]
    if same[0] == same[1]:
        return red
    keep, value = (c, a) if same[1] else (logical_not(c), b)
    moved = [t for t in conjuncts(keep) if _affine_index_condition(t)]
    if not moved:
        return red
    rest = [t for t in conjuncts(keep) if not any(t is m for m in moved)]
    if rest:
        value = choice(src.op, functools.reduce(lambda x, y: logical(Op.AND, x, y), rest), value, ident)
    cond = functools.reduce(lambda x, y: logical(Op.AND, x, y), [t for t in conjuncts(red.src[0])
                                                               if t is not TRUE] + moved)
    return Expr(Op.REDUCE, red.dtype, (cond, value), red.arg)


def _affine_index_condition(c: Expr) -> bool:
    """Whether ``c`` is an affine condition on index variables alone (no data, no value or size)."""
    from ..poly.affine import IndexSpace, NotAffine  # isl-based; imported late to keep import light

    if any(n.op in (Op.READ, Op.REDUCE, Op.DATA_INDEX) or n.op is Op.VAR and n.lo is None for n in walk(c)):
        return False
    try:
        IndexSpace(free_vars(c)).cond(c)
    except NotAffine:
        return False
    return True


def _check_reduce_axes(nodes: list[list[Expr]], axes: tuple[Expr, ...], name: str) -> None:
    """A reduction may not run over an axis of the compute itself (``sum(A[i], axis=i)``);
    ``nodes``: each body's nodes (:func:`walk`)."""
    own = set(axes)
    for body_nodes in nodes:
        for node in body_nodes:
            if node.op is Op.REDUCE:
                for ax in node.arg.axes:
                    if ax in own:
                        raise ValueError(f"compute {name!r}: reduces over {ax.name!r}, an axis of "
                                         "the compute itself; reduce over a ta.reduce_axis")


def _check_body_form(bodies: tuple[Expr, ...], nodes: list[list[Expr]], axes: tuple[Expr, ...],
                     name: str) -> None:
    reds = [b.op is Op.REDUCE for b in bodies]
    if any(reds) and not all(reds):
        raise ValueError(f"compute {name!r}: a multi-output body mixes reductions and "
                         "non-reductions; split it into two computes")
    if all(reds) and len(bodies) > 1:
        first = bodies[0].arg
        for b in bodies[1:]:
            if b.arg.combiner is not first.combiner or b.arg.axes != first.axes or b.src != bodies[0].src:
                raise ValueError(f"compute {name!r}: the outputs of a multi-value reduction must "
                                 "come from one reducer call")
    allowed = set(axes)
    for b, body_nodes in zip(bodies, nodes):
        allowed_here = allowed | set(b.arg.axes) if b.op is Op.REDUCE else allowed
        bound = {a for n in body_nodes if n.op is Op.REDUCE for a in n.arg.axes}
        for v in body_nodes:  # (free_vars: variables in order of first appearance)
            if v.op is Op.VAR and v.lo is not None and v not in bound and v not in allowed_here:
                raise ValueError(f"compute {name!r}: variable {v.name!r} is neither an axis of "
                                 "this compute nor a reduce axis of its reduction")
        for node in body_nodes:
            if node.op is Op.VAR and node.lo is None and not is_size(node):
                raise ValueError(f"compute {name!r}: uses a reducer's combiner variable "
                                 f"{node.name!r} outside its combiner")


def _lift_nested_reductions(bodies: tuple[Expr, ...], axes: tuple[Expr, ...],
                            name: str, check_bounds: bool, group: int) -> tuple[Expr, ...]:
    """Turn every reduction that is not a whole body into a read of a new tensor ``<name>.red`` over the
    compute's axes, of role ``LIFTED`` in the compute's ``group``:
    ``compute((n,), lambda i: sum(A[i, k], k) / n)`` becomes ``R[i] = sum(A[i, k], k)`` and ``R[i] / n``.
    An outer reduction's axis ``k`` in ``[lo, hi)`` that an inner one reads becomes one more axis of the
    new tensor, read at ``k - lo`` (innermost first, so any depth works)."""
    own = set(axes)
    lifted: dict[Expr, tuple[Expr, tuple[Expr, ...]]] = {}
    count = [0]

    def lift(node: Expr) -> Expr | None:
        if node.op is not Op.REDUCE:
            return None
        key = node.replace(arg=node.arg.__class__(node.arg.combiner, node.arg.axes, 0))
        if key not in lifted:
            count[0] += 1
            outer = tuple(v for v in free_vars(node) if v not in own)  # enclosing reductions' axes
            new_axes = tuple(var(a.name, 0, a.hi) for a in axes) + \
                tuple(var(v.name, 0, v.hi - v.lo) for v in outer)
            mapping = dict(zip(axes, new_axes[:len(axes)]))
            mapping.update((v, new + v.lo if v.lo else new) for v, new in zip(outer, new_axes[len(axes):]))
            n_out = key.arg.combiner.arity
            red_bodies = tuple(substitute(node.replace(arg=node.arg.__class__(
                node.arg.combiner, node.arg.axes, v)), mapping) for v in range(n_out))
            op = ComputeOp(f"{name}.red" if count[0] == 1 else f"{name}.red{count[0]}", "",
                           new_axes, red_bodies, provenance=Provenance(Role.LIFTED, group))
            if check_bounds:
                from .bounds import check_op_bounds

                check_op_bounds(op)
            lifted[key] = (op, tuple(axes) + tuple(v - v.lo if v.lo else v for v in outer))
        op, index = lifted[key]
        return Tensor(op, node.arg.value_index)[index] if index else Tensor(op, node.arg.value_index)[()]

    return tuple(b.replace(src=tuple(rewrite(s, lift) for s in b.src)) if b.op is Op.REDUCE
                 else rewrite(b, lift) for b in bodies)


def select(cond: Any, a: Any, b: Any) -> Expr:
    """``a`` where ``cond`` holds else ``b``; both branches are evaluated (and bounds-checked)."""
    return choice(Op.SELECT, cond, a, b)


def if_then_else(cond: Any, a: Any, b: Any) -> Expr:
    """Lazy choice: only the taken branch is evaluated, so it may guard out-of-bounds reads."""
    return choice(Op.IF_THEN_ELSE, cond, a, b)


def exp(x: Any) -> Expr: return unary(Op.EXP, x)
def log(x: Any) -> Expr: return unary(Op.LOG, x)
def sqrt(x: Any) -> Expr: return unary(Op.SQRT, x)
def tanh(x: Any) -> Expr: return unary(Op.TANH, x)
def sigmoid(x: Any) -> Expr: return unary(Op.SIGMOID, x)
def abs(x: Any) -> Expr: return unary(Op.ABS, x)  # noqa: A001
def sin(x: Any) -> Expr: return unary(Op.SIN, x)
def cos(x: Any) -> Expr: return unary(Op.COS, x)
def erf(x: Any) -> Expr: return unary(Op.ERF, x)  # 2/sqrt(pi) int_0^x e^-t^2 dt
def power(a: Any, b: Any) -> Expr: return binary(Op.POW, a, b)
def maximum(a: Any, b: Any) -> Expr: return binary(Op.MAXIMUM, a, b)
def minimum(a: Any, b: Any) -> Expr: return binary(Op.MINIMUM, a, b)


def min_value(dtype: str) -> Expr:
    """The smallest value of ``dtype`` as a constant (``-inf`` for floats)."""
    return const(dt.min_value(dtype), dt.check_dtype(dtype))


def max_value(dtype: str) -> Expr:
    """The largest value of ``dtype`` as a constant (``+inf`` for floats)."""
    return const(dt.max_value(dtype), dt.check_dtype(dtype))
