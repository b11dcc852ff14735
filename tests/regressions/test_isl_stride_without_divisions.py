"""Loops in which isl divides are checked, also over domains without divisions (codegen/islast).

Wrong values with default options: the gradient of
``x1[(i1 + 2) % 3, (-3 - i1) % 5, (3 i1) % 2]`` is a statement over the output axes
``(a, b, c)`` with the division-free domain ``8 - 10 a + 6 b <= 15 c <= 11 - 10 a + 6 b``,
scanned along ``5 a + b`` (two output axes as one loop).  isl's AST builder found a stride in
it and wrote ``for t: if ((t - 1) % 11 == 0) S((2 t - 2) / 11, ...)``: 2 of the 4 points, so
two of x1's gradient elements stayed 0.  Only domains *with* divisions were checked before;
now any loops in which isl divides are checked, and loops that miss points are rebuilt over
the domain's bounding box with the exact test inside (``astcheck.guarded_hulls``).  The oracle
is the scatter written here in NumPy; ``ta.evaluate`` was right all along.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorad as ta


def gather_gradient(shape, index, n0: int, n1: int, **options):
    """``ta``'s and NumPy's gradient of ``Y[i0, i1] = X[index(i1)]`` for a head of ones+."""
    X = ta.placeholder(shape, "float64", name="X")
    Y = ta.compute((n0, n1), lambda i0, i1: X[index(i1, ta)], name="Y")
    H = ta.placeholder((n0, n1), "float64", name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    h = np.arange(1.0, n0 * n1 + 1).reshape(n0, n1)
    want = np.zeros(shape)
    for i0 in range(n0):
        for i1 in range(n1):
            want[index(i1, None)] += h[i0, i1]
    got = [ta.build([dX], [H], **options)(h), ta.build([dX], [H], checked=True)(h), ta.evaluate(dX, {H: h})]
    return got, want


def _strided_index(i1, t):
    third = (i1 * 3) % 2 if t is None else t.cast("int32", t.cast("int64", i1) * 3 % 2)
    return (i1 + 2) % 3, (-3 - i1) % 5, third


def test_every_point_of_a_strided_domain_is_scanned():
    got, want = gather_gradient((3, 5, 2), _strided_index, 5, 4)
    for g in got:
        np.testing.assert_array_equal(g, want)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.tuples(st.integers(2, 4), st.integers(2, 6), st.integers(1, 3)),
       a=st.tuples(st.integers(-4, 4), st.integers(-4, 4), st.integers(-4, 4)),
       c=st.tuples(st.integers(-3, 3), st.integers(-3, 3), st.integers(-3, 3)),
       n1=st.integers(1, 9))
def test_random_modular_gathers_have_every_gradient_element(m, a, c, n1):
    def index(i1, t):
        return tuple((i1 * ck + ak) % mk for mk, ak, ck in zip(m, a, c))

    got, want = gather_gradient(m, index, 3, n1)
    for g in got:
        np.testing.assert_array_equal(g, want)


def test_the_box_a_domain_is_scanned_over_instead():
    import islpy as isl
    from tensorad.codegen.loops.ast_check import _box

    seed = isl.Set("{ [a, b, c] : 0 <= a <= 2 and 0 <= b <= 4 and 0 <= c <= 1 and "
                   "8 - 10a + 6b <= 15c <= 11 - 10a + 6b }")
    assert _box(seed).is_equal(isl.Set("{ [a, b, c] : 0 <= a <= 2 and 0 <= b <= 4 and 0 <= c <= 1 }"))
    for no_box in ("{ [a, b] : 0 <= a < 4 and 1 = 0 }", "{ [a, b] : 0 <= a < 4 and b >= 0 }"):
        assert _box(isl.Set(no_box)).is_equal(isl.Set(no_box))  # (empty, unbounded: kept)
