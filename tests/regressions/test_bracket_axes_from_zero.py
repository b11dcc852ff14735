"""A bracket over a shrunk variable was a tensor whose axis did not start at 0.

The gradient of ``t2[i0, i1] = sum over r1 in [0, 2), r2 in [1, 10) of t1[(3 r2 + i1) % 17]``
(``t1`` a product of ``x0[2, 4]`` under a ``%`` condition) factors a bracket out of a sum over
``i0 in [1, 16)``.  simplify/algebra/bracket.py gave the bracket tensor that variable's range as its
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


def test_gradient_through_a_bracket_over_a_negative_range_builds():
    """Reduce axes over ``[-1, 4)``; the bracket's axis started at -1 and
    ``ta.build`` of the gradient raised OutOfBoundsError (a read at ``r1 = -1``)."""
    myprod = ta.comm_reducer(lambda x, y: x * y, lambda t: ta.const(1, t), name="myprod")
    x0 = ta.placeholder((4, 2), "float64", name="x0")
    g = ta.placeholder((3,), "int32", name="g")
    r0 = ta.reduce_axis((-1, 4), name="r0")
    r1 = ta.reduce_axis((-1, 4), name="r1")
    t3 = ta.compute((3,), lambda i0: myprod(0.5 - x0.take(-g[(r1 + 2) % 3], 1, mode="wrap"),
                                            axis=[r0, r1], where=(r0 + r1) % 3 == 1), name="t3")
    H = ta.placeholder((3,), "float64", name="head")
    (grad,) = ta.JacobianRecursive(t3, [x0], H)
    rng = np.random.default_rng(2)
    x, gi, h = rng.uniform(-1, 1, (4, 2)), np.array([2, 0, 3], np.int32), rng.uniform(-1, 1, 3)

    def loss(xv):  # NumPy: every output is the same product
        p = 1.0
        for a in range(-1, 4):
            for b in range(-1, 4):
                if (a + b) % 3 == 1:
                    p *= 0.5 - xv[(-gi[(b + 2) % 3]) % 4, 1]
        return p * h.sum()

    eps, want = 1e-6, np.zeros((4, 2))
    for j in np.ndindex(4, 2):
        d = np.zeros((4, 2))
        d[j] = eps
        want[j] = (loss(x + d) - loss(x - d)) / (2 * eps)
    np.testing.assert_allclose(ta.build([grad], [x0, g, H])(x, gi, h), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ta.evaluate([grad], {x0: x, g: gi, H: h})[0], want, rtol=1e-6, atol=1e-8)
