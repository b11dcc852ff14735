"""Index arithmetic must be exact: a proof that it fits 64 bits, or a clear error.

Compiled code and ``ta.evaluate`` compute index arithmetic in 64-bit integers.  :func:`check_index_range`
bounds every integer node by interval arithmetic over the variables' ranges (Python ints) and raises a
``ValueError`` naming an expression that could pass ``2**63``.  Values read from integer tensors,
accumulators and float-to-int casts are data: they wrap like NumPy's and are not checked.
``i * 10**10 * 10**10`` with ``i < 30000`` is refused; ``(i * 100000) % 7`` is accepted."""

from __future__ import annotations

from tensorad.ir import dtype as dt
from tensorad.ir.expr import Expr, Op, is_size
from tensorad.ir.printer import expr_to_str
from tensorad.ir.rewrite import fold, walk

INT64 = (-(1 << 63), (1 << 63) - 1)
_RANGE = {"int32": (-(1 << 31), (1 << 31) - 1), "int64": INT64, "bool": (0, 1)}

# A node's bound: (lo, hi) for index arithmetic, None for data (or a non-integer value).
Bound = tuple[int, int] | None


def _mul(a, b):
    ps = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
    return min(ps), max(ps)


def _floordiv(node: Expr, a, b):
    if b[0] > 0 or b[1] < 0:  # the divisor keeps one sign: the quotient's extremes are at corners
        qs = [x // y for x in a for y in b]
        return min(qs), max(qs)
    m = max(abs(a[0]), abs(a[1]))
    return -m, m


def _mod(node: Expr, a, b):
    m = max(abs(b[0]), abs(b[1]))
    return (0, m - 1) if b[0] > 0 else (-m, m)


_ARITH = {
    Op.ADD: lambda n, a, b: (a[0] + b[0], a[1] + b[1]),
    Op.SUB: lambda n, a, b: (a[0] - b[1], a[1] - b[0]),
    Op.MUL: lambda n, a, b: _mul(a, b),
    Op.FLOORDIV: _floordiv,
    Op.MOD: _mod,
    Op.MAXIMUM: lambda n, a, b: (max(a[0], b[0]), max(a[1], b[1])),
    Op.MINIMUM: lambda n, a, b: (min(a[0], b[0]), min(a[1], b[1])),
    Op.NEG: lambda n, a: (-a[1], -a[0]),
    Op.ABS: lambda n, a: (0 if a[0] <= 0 <= a[1] else min(abs(a[0]), abs(a[1])), max(abs(a[0]), abs(a[1]))),
}


def index_bounds(e: Expr, memo: dict | None = None) -> Bound:
    """Interval bounds of an integer expression that is index arithmetic; ``None`` for data."""
    def visit(node: Expr, *kids: Bound) -> Bound:
        if node.dtype not in ("int32", "int64") or node.op in (Op.READ, Op.REDUCE):
            return None
        if node.op is Op.VAR:
            if is_size(node):  # (an array's extent: an int64 where it has no greatest value)
                return node.arg.min, INT64[1] if node.arg.max is None else node.arg.max
            lo, hi = (index_bounds(b, memo) if isinstance(b, Expr) else (b, b) for b in (node.lo, node.hi))
            return (lo[0], hi[1] - 1) if lo is not None and hi is not None and None not in (lo[0], hi[1]) \
                else None
        if node.op is Op.CONST:
            return int(node.arg), int(node.arg)
        if node.op is Op.DATA_INDEX:  # checked, clipped or wrapped into [0, extent)
            return 0, node.arg.extent - 1
        if node.op is Op.CAST:
            src = kids[0]
            if src is None:
                return None
            lo, hi = _RANGE[node.dtype]
            return src if lo <= src[0] and src[1] <= hi else (lo, hi)  # int32 casts wrap
        if node.op in (Op.SELECT, Op.IF_THEN_ELSE):
            a, b = kids[1], kids[2]
            return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
        rule = _ARITH.get(node.op)
        return None if rule is None or any(k is None for k in kids) else rule(node, *kids)

    return fold(e, visit, memo)


def may_fault(e: Expr, memo: dict | None = None) -> bool:
    """Whether computing ``e`` where its guards exclude could fail: it holds a checked gather index or a
    read whose indices' interval bounds leave the tensor."""
    memo = {} if memo is None else memo
    for n in walk(e):
        if n.op is Op.DATA_INDEX and n.arg.mode == "raise":
            return True
        if n.op is Op.READ:
            for i, size in zip(n.src, n.arg.shape):
                b = index_bounds(i, memo)
                if b is None or b[0] < 0 or not isinstance(size, int) or b[1] >= size:
                    return True
    return False


def check_index_range(exprs, where: str) -> None:
    """Raise ``ValueError`` if index arithmetic in ``exprs`` can leave the 64-bit range."""
    memo: dict = {}
    for e in exprs:
        index_bounds(e, memo)
        for node in walk(e):
            b = memo.get(node)
            if b is not None and (b[0] < INT64[0] or b[1] > INT64[1]):
                raise ValueError(
                    f"{where}: index arithmetic {expr_to_str(node)} can reach "
                    f"{b[1] if b[1] > INT64[1] else b[0]}, beyond the 64-bit integers that "
                    "compiled code and ta.evaluate compute it in; reduce the factors or the ranges")


INT32 = _RANGE["int32"]


def cast_keeps_value(cast: Expr, memo: dict | None = None) -> bool:
    """Whether the integer cast ``cast`` keeps its operand's value: a same or wider type always does, a
    narrowing one when the operand's bounds are proved within it."""
    src = cast.src[0]
    if not dt.narrows(src.dtype, cast.dtype):
        return True
    b = index_bounds(src, memo)
    lo, hi = _RANGE[cast.dtype]
    return b is not None and lo <= b[0] and b[1] <= hi


def wraps_where_stored(body: Expr, bounds=index_bounds) -> bool:
    """Whether an ``int32`` tensor's ``body`` may hold a value its store wraps (inlined, a reader would
    see another): it computes exactly in 64 bits (an index variable or ``int64`` operand) and
    ``bounds(body)`` (or ``None``) does not prove it within int32."""
    if body.dtype != "int32":
        return False
    b = bounds(body)
    if b is not None and INT32[0] <= b[0] and b[1] <= INT32[1]:
        return False
    return any(n.op is Op.VAR or n.dtype == "int64" or n.op is Op.CONST and n.dtype == "int32"
               and not INT32[0] <= int(n.arg) <= INT32[1] for n in walk(body))
