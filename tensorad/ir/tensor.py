"""Tensors and the operations that define them: the nodes of the tensor DAG.

A :class:`Tensor` is output ``value_index`` of a :class:`PlaceholderOp` (an input with a shape, a dtype
and a uid) or a :class:`ComputeOp` (``body[v]`` at every point of ``axes``, with its :class:`Provenance`).
A body is free of reductions or a single ``REDUCE``; the bodies of a multi-output op are all reductions
over one combiner and axes, or all reduction-free.  All are frozen dataclasses (expressions: by identity)."""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import dtype as dt
from .expr import GATHER_MODES, Expr, Op, as_expr, binary, data_index, strong


def _kept_hash(obj: Any) -> int:
    """The ``__hash__`` of the frozen dataclasses below: the hash of the fields ``type(obj)._hashed``
    names, computed once and kept on the object; ``__getstate__`` drops it (string hashes vary by process)."""
    try:
        return obj._hash
    except AttributeError:
        return _compute_hash(obj)


def _compute_hash(obj: Any) -> int:
    h = hash(type(obj)._hashed(obj))
    object.__setattr__(obj, "_hash", h)
    return h


def _state_without_hash(obj: Any) -> dict:
    return {k: v for k, v in obj.__dict__.items() if k != "_hash"}


@dataclass(frozen=True)
class PlaceholderOp:
    name: str
    shape: tuple[int, ...]
    dtype: str
    uid: int

    _hashed = staticmethod(lambda o: (o.name, o.shape, o.dtype, o.uid))
    __hash__ = _kept_hash
    __getstate__ = _state_without_hash

    @property
    def num_outputs(self) -> int:
        return 1


class Role(enum.Enum):
    """Why a compute op exists: what the passes may do with it is decided by this, never by
    its name (a user may name a tensor ``Y.red`` or ``X.grad``)."""

    USER = "user"  # written by the user, the operator library or a pass (the default)
    LIFTED = "lifted"  # a reduction the language lifted out of a compute body (``Y.red``)
    ADJOINT = "adjoint"  # the adjoint of a tensor, built by reverse-mode autodiff (``X.grad``)
    SPLIT = "split"  # a term of a sum split off by the optimizer (``T.t0``)
    MERGED = "merged"  # sums over one domain merged by the optimizer (``T.m0``): not split again
    SAVED = "saved"  # values two passes must read bit-identical (a max gradient's tie test,
    #                  ``Y.tie``): always materialized, never inlined or recomputed
    DEFERRED = "deferred"  # a symbolic program's optimized derivative, a copy of the raw one until its
    #                        sizes are bound: ``source`` is ``(call, k)``, the binding picks the call's
    #                        case or redoes the call


_groups = itertools.count(1)


def new_group() -> int:
    """A fresh group number: one per ``compute`` call (identity only, like variable uids)."""
    return next(_groups)


@dataclass(frozen=True)
class Provenance:
    """The typed origin of a compute op.  ``group`` is shared by a ``compute`` call's op and the
    reductions lifted out of its body; ``source`` is the tensor it derives from (an adjoint's input, a
    split term's tensor), for reading only: it takes no part in equality."""

    role: Role = Role.USER
    group: int = 0
    source: Any = field(default=None, compare=False, hash=False, repr=False)


USER = Provenance()


@dataclass(frozen=True)
class ComputeOp:
    name: str
    tag: str
    axes: tuple[Expr, ...]
    body: tuple[Expr, ...]
    attrs: tuple = field(default=())  # sorted (key, value) pairs for passes to annotate
    provenance: Provenance = field(default=USER)

    _hashed = staticmethod(lambda o: (o.name, o.tag, o.axes, o.body, o.attrs, o.provenance))
    __hash__ = _kept_hash
    __getstate__ = _state_without_hash

    def __post_init__(self) -> None:
        if any(b.weak for b in self.body):  # a body of Python floats alone is float32
            object.__setattr__(self, "body", tuple(map(strong, self.body)))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(ax.hi for ax in self.axes)

    @property
    def num_outputs(self) -> int:
        return len(self.body)

    @property
    def is_reduction(self) -> bool:
        return self.body[0].op is Op.REDUCE

    @property
    def reduce_axes(self) -> tuple[Expr, ...]:
        return self.body[0].arg.axes if self.is_reduction else ()

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)


# Broadcasting arithmetic on tensors, registered here by the operator library (not imported by the IR).
TENSOR_OPERATORS: dict[str, Callable[..., Tensor]] = {}


def _tensor_operator(name: str, swap: bool = False):
    def method(self, other):
        fn = TENSOR_OPERATORS.get(name)
        if fn is None:
            raise TypeError(f"arithmetic on whole tensors needs the operator library: "
                            f"import tensorad (for {self.name} {name} ...)")
        return fn(other, self) if swap else fn(self, other)
    return method


@dataclass(frozen=True)
class Tensor:
    """Output ``value_index`` of ``op``; index it (``T[i, j]``) to read an element."""

    op: PlaceholderOp | ComputeOp
    value_index: int = 0

    _hashed = staticmethod(lambda o: (o.op, o.value_index))
    __hash__ = _kept_hash
    __getstate__ = _state_without_hash

    @property
    def shape(self) -> tuple[int, ...]:
        return self.op.shape

    @property
    def ndim(self) -> int:
        return len(self.op.shape)

    @property
    def dtype(self) -> str:
        return self.op.dtype if isinstance(self.op, PlaceholderOp) else self.op.body[self.value_index].dtype

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __getitem__(self, indices: Any) -> Expr | Tensor:
        """An element read, ``X[i, j]`` (an expression: inside ``ta.compute``), or a view, ``X[:, 1]``,
        ``X[..., 1:-1]``, ``X[0]`` (a tensor: a key with a slice, ``...``, ``None``, or fewer integers
        than the rank; made by the operator library)."""
        if not isinstance(indices, tuple):
            indices = (indices,)
        if _is_view(indices, self.ndim):
            fn = TENSOR_OPERATORS.get("getitem")
            if fn is None:
                raise TypeError(f"{self.name}[...]: views need the operator library: import tensorad")
            return fn(self, indices)
        return read(self, indices)

    def __call__(self, *indices: Any) -> Expr:
        return read(self, indices)

    def take(self, *indices: Any, mode: str = "raise") -> Expr:
        """``self[indices]`` with an explicit gather ``mode``: ``"raise"``, ``"clip"`` or ``"wrap"``."""
        return read(self, indices, mode)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError(f"len() of 0-d tensor {self.name}")
        return self.shape[0]

    def __bool__(self) -> bool:
        return True

    def __iter__(self):
        # Without this, iter() would call __getitem__(0), (1), ... forever (reads are unchecked here).
        raise TypeError(f"tensor {self.name!r} is not iterable: read its elements with "
                        f"{self.name}[i, ...] inside ta.compute, or pass a list of tensors")

    __add__ = _tensor_operator("add")
    __radd__ = _tensor_operator("add", swap=True)
    __sub__ = _tensor_operator("subtract")
    __rsub__ = _tensor_operator("subtract", swap=True)
    __mul__ = _tensor_operator("multiply")
    __rmul__ = _tensor_operator("multiply", swap=True)
    __truediv__ = _tensor_operator("divide")
    __rtruediv__ = _tensor_operator("divide", swap=True)
    __neg__ = lambda self: TENSOR_OPERATORS["negative"](self)  # noqa: E731

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={self.shape}, dtype={self.dtype})"

    # ``str`` and the HTML form are the printer's, attached by the package

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self) if not cycle else repr(self))


def _is_view(key: tuple, ndim: int) -> bool:
    """Whether ``X[key]`` is a view: a slice, ``...`` or ``None`` without any index expression,
    or plain integers fewer than the rank (``X[0]`` of a matrix: its first row)."""
    if any(isinstance(k, Expr) for k in key):
        return False
    if any(k is None or k is Ellipsis or isinstance(k, slice) for k in key):
        return True
    return 0 < len(key) < ndim and all(hasattr(k, "__index__") and not isinstance(k, bool) for k in key)


def read(tensor: Tensor, indices: tuple, mode: str | None = None) -> Expr:
    """``tensor[indices]``: an integer index expression per dimension.  An index that reads data is a
    gather, wrapped in a ``DATA_INDEX`` node (:func:`~tensorad.ir.expr.data_index`) with ``mode``
    (``"raise"``: out of range is a run-time ``IndexError``); with ``"clip"`` or ``"wrap"`` an index of
    loop variables is clipped or wrapped too, in index arithmetic the bounds proof reads exactly."""
    if any(isinstance(i, slice) for i in indices) or indices is Ellipsis:
        raise TypeError(f"{tensor.name}[...]: slices are not expressions; index every "
                        f"dimension with an index variable or integer expression inside "
                        f"ta.compute, or take a view outside it, with integers and slices only "
                        f"({tensor.name}[:, 1, :] is a tensor)")
    if len(indices) == 1 and isinstance(indices[0], tuple) and not indices[0]:
        indices = ()
    if len(indices) != tensor.ndim:
        raise IndexError(f"{tensor.name} has {tensor.ndim} dimensions {tensor.shape} but is "
                         f"indexed with {len(indices)} indices")
    if mode is not None and mode not in GATHER_MODES:
        raise ValueError(f"{tensor.name}: gather mode must be one of "
                         f"{', '.join(map(repr, GATHER_MODES))}, got {mode!r}")
    idx = []
    for d, i in enumerate(indices):
        e = as_expr(i)
        if not dt.is_int(e.dtype):
            raise TypeError(f"{tensor.name}: index {d} must be an integer expression, got "
                            f"{e.dtype} expression {e}")
        n = tensor.shape[d]
        if reads_data(e):
            e = data_index(e, n, mode or "raise", tensor.name, d)
        elif mode in ("clip", "wrap") and e.op is not Op.DATA_INDEX:
            if e.dtype != dt.INDEX:
                e = Expr(Op.CAST, dt.INDEX, (e,))
            e = (e % n) if mode == "wrap" else binary(Op.MAXIMUM, binary(Op.MINIMUM, e, n - 1), 0)
        if e.dtype != dt.INDEX:
            e = Expr(Op.CAST, dt.INDEX, (e,))
        idx.append(e)
    node = Expr(Op.READ, tensor.dtype, tuple(idx), tensor)
    # a half tensor is read as float32 (dtype.py): the conversion is an explicit, printed node
    return Expr(Op.CAST, dt.compute_dtype(tensor.dtype), (node,)) if dt.is_half(tensor.dtype) else node


def reads_data(e: Expr) -> bool:
    """Whether index expression ``e`` reads a tensor outside a ``DATA_INDEX`` (a raw gather index)."""
    stack, seen = [e], set()
    while stack:
        node = stack.pop()
        if node in seen or node.op is Op.DATA_INDEX:
            continue
        seen.add(node)
        if node.op in (Op.READ, Op.REDUCE):
            return True
        stack.extend(node.src)
    return False
