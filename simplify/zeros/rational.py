"""Exact rational arithmetic for the refuter (:mod:`.zeros.refute`), on Python ints and ``Fraction``s.

The same values as ``Fraction``'s operators, computed from numerators and denominators directly
(``fractions``' gcd steps) without its dispatch and checks; a value whose denominator is 1 is an ``int``.
``mul`` and ``div`` return ``None`` where a numerator or denominator would pass ``bits`` bits; ``add`` and
``sub`` never do."""

from __future__ import annotations

from fractions import Fraction
from math import gcd
from typing import Any

_new = object.__new__


def make(n: int, d: int) -> Any:
    """``n / d`` for coprime ``n`` and ``d > 0``: an ``int`` when ``d == 1``."""
    if d == 1:
        return n
    f = _new(Fraction)
    f._numerator, f._denominator = n, d
    return f


def parts(v: Any) -> tuple[int, int]:
    """``v``'s numerator and denominator (``v`` an int, a bool or a ``Fraction``, else ``TypeError``)."""
    t = type(v)
    if t is Fraction:
        return v._numerator, v._denominator
    if t is int or t is bool:
        return int(v), 1
    raise TypeError(f"not a rational: {v!r}")  # (a float would be truncated: never one)


def add(a: Any, b: Any) -> Any:
    """``a + b`` exactly."""
    if type(a) is int and type(b) is int:
        return a + b
    na, da = parts(a)
    nb, db = parts(b)
    g = gcd(da, db)
    if g == 1:
        return make(na * db + da * nb, da * db)
    s = da // g
    t = na * (db // g) + nb * s
    g2 = gcd(t, g)
    return make(t, s * db) if g2 == 1 else make(t // g2, s * (db // g2))


def sub(a: Any, b: Any) -> Any:
    """``a - b`` exactly."""
    if type(a) is int and type(b) is int:
        return a - b
    nb, db = parts(b)
    return add(a, make(-nb, db))


def mul(a: Any, b: Any, bits: int) -> Any:
    """``a * b`` exactly, or ``None`` past ``bits`` bits."""
    if type(a) is int and type(b) is int:
        out = a * b
        return out if out.bit_length() <= bits else None
    na, da = parts(a)
    nb, db = parts(b)
    g1 = gcd(na, db)
    if g1 > 1:
        na //= g1
        db //= g1
    g2 = gcd(nb, da)
    if g2 > 1:
        nb //= g2
        da //= g2
    n, d = na * nb, da * db
    return None if n.bit_length() > bits or d.bit_length() > bits else make(n, d)


def div(a: Any, b: Any, bits: int) -> Any:
    """``a / b`` exactly, or ``None`` past ``bits`` bits (``ZeroDivisionError`` when ``b == 0``)."""
    nb, db = parts(b)
    if nb == 0:
        raise ZeroDivisionError
    return mul(a, make(db, nb) if nb > 0 else make(-db, -nb), bits)
