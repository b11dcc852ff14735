"""Fuzz seed 30315: a bracket over a shrunk variable was a tensor whose axis did not start at 0.

The gradient of ``t2[i0, i1] = sum over r1 in [0, 2), r2 in [1, 10) of t1[(3 r2 + i1) % 17]``
(``t1`` a product of ``x0[2, 4]`` under a ``%`` condition) factors a bracket out of a sum over
``i0 in [1, 16)``.  simplify/bracket.py gave the bracket tensor that variable's range as its
axis, ``[1, 16)``: a shape of 16 with 15 points, which no compute of the language has, and
``ta.evaluate`` of the optimized gradient raised "uses a reduce axis outside its reduction".
A bracket's axes now start at 0 and it is read at ``v - lo``.  Oracle: the derivative written
with NumPy in the test (``t1[j] = x ** n(j)``), and the unoptimized gradient.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta


def _program():
    myprod = ta.comm_reducer(lambda x, y: x * y, lambda t: ta.const(1, t), name="myprod")
    x0 = ta.placeholder((3, 5), "float64", name="x0")
    t0 = ta.compute((), lambda: x0[2, 4], name="t0")
    r0 = ta.reduce_axis((0, 5), name="r0")
    t1 = ta.compute((17,), lambda i0: myprod(t0[()], axis=[r0], where=(r0 + i0) % 3 == 1), name="t1")
    r1 = ta.reduce_axis((0, 2), name="r1")
    r2 = ta.reduce_axis((1, 10), name="r2")
    t2 = ta.compute((7, 1), lambda i0, i1: ta.sum(t1[(r2 * 3 + i1) % 17], axis=[r1, r2]), name="t2")
    return x0, t2


def _want(x: float, h: np.ndarray) -> np.ndarray:
    """d/dx0[2, 4] of sum(h * t2): each t2 element is 2 sum_r2 x ** n(j), j = 3 r2 % 17."""
    n = [sum((r0 + j) % 3 == 1 for r0 in range(5)) for j in range(17)]
    d = 2 * sum(n[3 * r2 % 17] * x ** (n[3 * r2 % 17] - 1) for r2 in range(1, 10))
    out = np.zeros((3, 5))
    out[2, 4] = h.sum() * d
    return out


def test_optimized_gradient_through_a_shrunk_bracket_evaluates_and_builds():
    x0, t2 = _program()
    H = ta.placeholder(t2.shape, "float64", name="head")
    (g,) = ta.JacobianRecursive(t2, [x0], H)
    (raw,) = ta.JacobianRecursive(t2, [x0], H, optimize=False)
    rng = np.random.default_rng(1)
    x, h = rng.uniform(-1, 1, (3, 5)), rng.uniform(-1, 1, (7, 1))
    want = _want(x[2, 4], h)
    got_eval, got_raw = ta.evaluate([g, raw], {x0: x, H: h})
    np.testing.assert_allclose(got_eval, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_raw, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ta.build([g], [x0, H])(x, h), want, rtol=1e-12, atol=1e-12)
