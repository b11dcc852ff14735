"""The refuter's exact arithmetic (simplify/zeros/rational.py) computes what ``Fraction`` computes.

The oracle is Python's ``fractions.Fraction`` on the same operands: ints, bools and fractions
with small, large and power-of-two denominators (the refuter's data are eighths, its constants
dyadic, its quotients anything).  A result with denominator 1 is an ``int``; a product or a
quotient past the bit bound is ``None``; a float is never taken for a rational.  The refuter
evaluates with it (no Fraction operator runs) and takes a one-axis sum's points as they are.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import tensorad.simplify.zeros.rational as rational
import tensorad.simplify.zeros.refute as refute
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

import tensorad as ta

_INTS = st.integers(-(1 << 70), 1 << 70) | st.integers(-9, 9)
_DENS = st.integers(1, 1 << 40) | st.sampled_from([1, 2, 8, 1 << 33, 3, 768, 3 * (1 << 20)])
_VALUES = _INTS | st.booleans() | st.builds(Fraction, _INTS, _DENS)
_SETTINGS = settings(max_examples=examples(300), deadline=None, derandomize=True)


def _same(out, want: Fraction) -> None:
    assert out == want
    assert type(out) is (int if want.denominator == 1 else Fraction)
    if type(out) is Fraction:  # (stored in lowest terms, as Fraction would)
        assert (out.numerator, out.denominator) == (want.numerator, want.denominator)


@_SETTINGS
@given(_VALUES, _VALUES)
def test_each_operation_is_fractions_own(a, b):
    fa, fb = Fraction(a), Fraction(b)
    _same(rational.add(a, b), fa + fb)
    _same(rational.sub(a, b), fa - fb)
    _same(rational.mul(a, b, 1 << 20), fa * fb)
    _same(rational.sub(a, a), Fraction(0))  # (0 is the int 0, never a Fraction over d > 1)
    _same(rational.add(a, rational.sub(0, a)), Fraction(0))
    _same(rational.mul(a, 0, 8), Fraction(0))
    if b:
        _same(rational.div(a, b, 1 << 20), fa / fb)
    else:
        with pytest.raises(ZeroDivisionError):
            rational.div(a, b, 1 << 20)


@_SETTINGS
@given(_VALUES, _VALUES, st.integers(1, 160))
def test_products_past_the_bound_are_none(a, b, bits):
    want = Fraction(a) * Fraction(b)
    out = rational.mul(a, b, bits)
    if want.numerator.bit_length() > bits or want.denominator.bit_length() > bits:
        assert out is None
    else:
        _same(out, want)


def test_a_float_is_never_truncated():
    with pytest.raises(TypeError):
        rational.add(Fraction(1, 3), 0.5)
    with pytest.raises(TypeError):
        rational.mul(2, 0.5, 64)


def test_the_refuters_arithmetic_builds_no_fraction_through_its_operators(monkeypatch):
    # the model's values are mostly non-dyadic rationals (a softmax divides): each product or
    # sum went through Fraction's operator dispatch and checked constructor, a third of the
    # refuter's time on the Transformer block; now none does
    A = ta.placeholder((4, 6), name="A")
    k = ta.reduce_axis((0, 6), "k")
    i = ta.reduce_axis((0, 4), "i").var
    S = ta.compute((4,), lambda r: ta.sum(ta.exp(A[r, k] * 0.5), k), name="S")
    e = ta.sum(ta.exp(A[i, k] * 0.5) / S[i] * A[i, k], k) - 0.3 * A[i, 0]
    calls = []
    for name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
                 "__truediv__", "__rtruediv__"):
        real = getattr(Fraction, name)
        monkeypatch.setattr(Fraction, name, lambda *a, _real=real, _n=name: calls.append(_n) or _real(*a))
    r = refute.Refuter()
    assert r.refutes(e)
    assert r.counts["steps"] > 20 and not calls, calls


def test_a_one_axis_sums_points_are_made_without_a_product(monkeypatch):
    # most sums of the model are over one axis: its sample points are taken as they are, not
    # through itertools.product and a zip per point (5% of the Transformer block's refutations);
    # sums over several axes still take the product, and both give the sum's value
    import itertools

    made = []
    real = itertools.product
    monkeypatch.setattr(itertools, "product", lambda *a: made.append(a) or real(*a))
    A = ta.placeholder((4, 6), name="A")
    i = ta.reduce_axis((0, 4), "i").var
    k, j = ta.reduce_axis((0, 6), "k"), ta.reduce_axis((0, 6), "j")
    one = ta.sum(A[i, k] * A[i, k], k)
    assert refute.Refuter().refutes(one) and not made
    both = ta.sum(A[i, k] * A[i, j], [k, j]) - ta.sum(A[i, k], k) * ta.sum(A[i, j], j)
    r = refute.Refuter()
    assert not r.refutes(both) and r.counts["zero"] == 1 and made
