"""Symbolic zeros and zero-aware expression arithmetic for derivative construction.

Derivatives are mostly zero: the derivative of ``A[i] * B[i]`` with respect to ``A`` does not
involve ``B``'s derivative at all.  Rather than building ``0 * x`` nodes and hoping a simplifier
removes them, a derivative that is known to vanish is the Python object :data:`ZERO` (the idea
of JAX's symbolic zeros).  The helpers below build expressions and never multiply by it:
``mul(ZERO, x)`` is ``ZERO``, ``add(ZERO, x)`` is ``x``, ``select(c, ZERO, ZERO)`` is ``ZERO``.
Only where a value is needed (a tensor body, a reduction source) does :func:`materialize` turn
``ZERO`` into a constant of the right dtype.
"""

from __future__ import annotations

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
    if a is ZERO:
        return b
    if b is ZERO:
        return a
    return a + b


def sub(a: Tangent, b: Tangent) -> Tangent:
    if b is ZERO:
        return a
    if a is ZERO:
        return -b
    return a - b


def neg(a: Tangent) -> Tangent:
    return ZERO if a is ZERO else -a


def mul(a: Tangent, b: Tangent) -> Tangent:
    """``a * b``; a factor ``ZERO`` gives ``ZERO`` and a constant 1 is dropped."""
    if a is ZERO or b is ZERO:
        return ZERO
    if is_one(a):
        return b
    if is_one(b):
        return a
    return a * b


def div(a: Tangent, b: Expr) -> Tangent:
    return ZERO if a is ZERO else a / b


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
