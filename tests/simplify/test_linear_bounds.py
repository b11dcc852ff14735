"""Interval bounds come from linear forms (simplify/algebra/ranges.py reads ``poly/linear.py``): an
affine index over a box of variables gets its exact integer range, however it is spelled --
checked against enumeration for random sums in which variables repeat and cancel; atoms
(``//``, ``%``, max) keep their own sound rules."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples
from tensorad.simplify.algebra.ranges import bounds

import tensorad as ta
from tensorad.ir.expr import Expr, var

V = [var("i", -2, 3), var("j", 0, 4), var("k", 1, 3)]


@st.composite
def affine(draw, depth: int = 4) -> tuple[Expr, callable]:
    """A random affine expression and its Python value function."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()):
            n = draw(st.integers(0, 2))
            return V[n], lambda p, n=n: p[n]
        c = draw(st.integers(-5, 5))
        return ta.const(c, "int32"), lambda p, c=c: c
    (a, fa), (b, fb) = draw(affine(depth - 1)), draw(affine(depth - 1))
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return a + b, lambda p: fa(p) + fb(p)
    if kind == 1:
        return a - b, lambda p: fa(p) - fb(p)
    if kind == 2:
        c = draw(st.integers(-3, 3))
        return a * c, lambda p: fa(p) * c
    return -a, lambda p: -fa(p)


@settings(max_examples=examples(100), deadline=None)
@given(affine())
def test_an_affine_index_gets_its_exact_range(case):
    e, f = case
    values = [f(p) for p in itertools.product(*(range(v.lo, v.hi) for v in V))]
    assert bounds(e) == (min(values), max(values)), e


def test_terms_that_cancel_do_not_widen_the_range():
    i, j, _ = V
    assert bounds((i + 2) - (i + 1)) == (1, 1)
    assert bounds(2 * j - (j + j) + i) == (-2, 2)
    assert bounds((i + j) // 2 - (i + j) // 2) == (0, 0)  # an atom minus itself
    assert bounds(ta.maximum(i, j) - 1) == (-1, 2)  # atoms keep their own rules
