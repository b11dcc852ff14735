"""Symbolic zeros and zero-aware expression arithmetic for derivative construction.

A derivative known to vanish is the Python object :data:`ZERO`, and the helpers below never multiply by
it: ``mul(ZERO, x)`` is ``ZERO``, ``add(ZERO, x)`` is ``x``.  :func:`materialize` turns ``ZERO`` into a
constant where a value is needed.

A zero *branch* stays strong too: :func:`mul` and :func:`div` put the other factor inside a gate,
``select(c, 0, x) * y = select(c, 0, x * y)``, so that a partial infinite at the untaken branch
(``sqrt(select(x < 0, 0, x))``) gives 0 there, as PyTorch's and JAX's masking ``where`` give."""

from __future__ import annotations

from collections.abc import Callable

from ..ir import dtype as dt
from ..ir.expr import Expr, Op, cast, choice, const


class _Zero:
    """The symbolic zero: a derivative known to vanish everywhere."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ZERO"


ZERO = _Zero()
Tangent = Expr | _Zero


def is_one(x: Tangent) -> bool:
    return isinstance(x, Expr) and x.op is Op.CONST and x.arg == 1 and x.dtype != "bool"


def materialize(x: Tangent, dtype: str) -> Expr:
    """``x`` as an expression; ``ZERO`` becomes the constant 0 of ``dtype``."""
    return const(0, dtype) if x is ZERO else x


def add(a: Tangent, b: Tangent) -> Tangent:
    return b if a is ZERO else a if b is ZERO else a + b


def sub(a: Tangent, b: Tangent) -> Tangent:
    return a if b is ZERO else -b if a is ZERO else a - b


def neg(a: Tangent) -> Tangent:
    return ZERO if a is ZERO else -a


def zero_branch(e: Expr) -> int | None:
    """1 or 2: which branch of a float ``select``/``if_then_else`` alone is the constant 0, else ``None``."""
    if e.op not in (Op.SELECT, Op.IF_THEN_ELSE) or not dt.is_float(e.dtype):
        return None
    zero = [k for k in (1, 2) if e.src[k].op is Op.CONST and e.src[k].arg == 0]
    return zero[0] if len(zero) == 1 else None


def _inside_gates(a: Expr, f: Callable[[Expr], Tangent]) -> Tangent:
    """``f`` applied inside the zero-branch gates around ``a`` (peeled in a loop: gates nest as
    deep as the program's selects): ``select(c, 0, x) -> select(c, 0, f(x))``."""
    gates = []
    while (k := zero_branch(a)) is not None:
        gates.append((a, k))
        a = a.src[3 - k]
    out = f(a)
    for g, k in reversed(gates):
        if out is ZERO:
            continue
        branches = [materialize(ZERO, out.dtype), out] if k == 1 else [out, materialize(ZERO, out.dtype)]
        out = choice(g.op, g.src[0], *branches)
    return out


def _product(a: Expr, b: Expr) -> Tangent:
    return b if is_one(a) else a if is_one(b) else a * b


GATE_DEPTH = 6  # levels of selects, negations and sums searched for a gate below a factor


def _holds_gate(e: Expr, depth: int = GATE_DEPTH) -> bool:
    """Whether a zero-branch gate is reached from ``e`` through float selects, negations, sums and
    differences within ``depth`` levels (``abs``'s tangent nests its operand's in two selects)."""
    if depth == 0 or not dt.is_float(e.dtype):
        return False
    if zero_branch(e) is not None:
        return True
    if e.op in (Op.SELECT, Op.IF_THEN_ELSE):
        return _holds_gate(e.src[1], depth - 1) or _holds_gate(e.src[2], depth - 1)
    if e.op in (Op.NEG, Op.ADD, Op.SUB):
        return any(_holds_gate(k, depth - 1) for k in e.src)
    return False


def _push(a: Expr, f: Callable[[Expr], Tangent], depth: int = GATE_DEPTH) -> Tangent:
    """Linear ``f`` (a product or quotient by the next factor) applied below the selects, negations and
    sums of ``a`` that lead to a gate, and inside the gates."""
    if zero_branch(a) is not None:
        return _inside_gates(a, lambda x: _push(x, f, depth))
    if depth == 0 or not _holds_gate(a, depth):
        return f(a)
    if a.op in (Op.SELECT, Op.IF_THEN_ELSE):
        x, y = (_push(k, f, depth - 1) for k in a.src[1:])
        return choose(a.op, a.src[0], x, y, a.dtype)
    if a.op is Op.NEG:
        return neg(_push(a.src[0], f, depth - 1))
    x, y = (_push(k, f, depth - 1) for k in a.src)
    return add(x, y) if a.op is Op.ADD else sub(x, y)


def mul(a: Tangent, b: Tangent) -> Tangent:
    """``a * b``; a factor ``ZERO`` gives ``ZERO``, a 1 is dropped, a select's zero branches stay strong."""
    if a is ZERO or b is ZERO:
        return ZERO
    if _holds_gate(a):
        return _push(a, lambda x: mul(x, b))
    if _holds_gate(b):
        return _push(b, lambda y: _product(a, y))
    return _product(a, b)


def div(a: Tangent, b: Expr) -> Tangent:
    """``a / b``; the zero branches of a select numerator stay strong zeros (not ``0 / 0 = NaN``)."""
    return ZERO if a is ZERO else _push(a, lambda x: x / b)


def to_dtype(a: Tangent, dtype: str) -> Tangent:
    return ZERO if a is ZERO else cast(dtype, a)


def choose(op: Op, cond: Expr, a: Tangent, b: Tangent, dtype: str) -> Tangent:
    """``select``/``if_then_else`` of two tangents; ``ZERO`` when both branches vanish."""
    if a is ZERO and b is ZERO:
        return ZERO
    if a is b:
        return a  # same value on both sides: the choice does not matter
    return choice(op, cond, materialize(a, dtype), materialize(b, dtype))


def sum_all(terms: list[Tangent]) -> Tangent:
    """The sum of a list of tangents (``ZERO`` for an empty or all-zero list)."""
    out: Tangent = ZERO
    for t in terms:
        out = add(out, t)
    return out
