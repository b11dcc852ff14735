"""The tangent of a reduction over no point is a strong zero.

``m[i] = max(x[r], where=i % 2 == 0)`` is ``-inf`` at odd ``i`` whatever ``x`` is, so anything
computed from it there is constant in ``x``.  Forward mode computed that row's tangent as 0 (a max
of no tangents) and multiplied it by the next partial evaluated at ``-inf``:
``erf'(inf) pow'(inf) = 0 * inf``, NaN, where the reverse gradient is 0 and so are central
differences.  The oracles are NumPy formulas written here and the reverse gradient.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorad as ta
from tensorad.autodiff.emptiness import empty_where
from tensorad.ir.rewrite import substitute

X = np.array([0.3, -1.2, 0.8])
U = np.array([0.5, -2.0, 1.5])


def _program():
    x = ta.placeholder((3,), "float64", name="x")
    r = ta.reduce_axis((0, 3), name="r")
    m = ta.compute((4,), lambda i: ta.max(x[r], axis=[r], where=i % 2 == 0), name="m")
    y = ta.compute((4,), lambda i: ta.erf(ta.power(ta.abs(m[i]) + 0.5, 1.5)), name="y")
    return x, m, y


def _want_jvp():
    k = int(np.argmax(X))
    a = abs(X[k]) + 0.5
    d = 2 / math.sqrt(math.pi) * math.exp(-a ** 3) * 1.5 * math.sqrt(a) * math.copysign(1, X[k]) * U[k]
    return np.array([d, 0.0, d, 0.0])


@pytest.mark.parametrize("optimize", [False, True])
def test_jvp_through_an_empty_max_is_zero_where_it_is_empty(optimize):
    x, m, y = _program()
    u = ta.placeholder((3,), "float64", name="u")
    j = ta.jvp(y, [x], [u], optimize=optimize)
    got = np.asarray(ta.build([j], [x, u])(X, U))
    np.testing.assert_allclose(got, _want_jvp(), rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.asarray(ta.evaluate([j], {x: X, u: U})[0]), _want_jvp(), rtol=1e-12)


def test_jvp_agrees_with_the_reverse_gradient():
    x, m, y = _program()
    u, h = ta.placeholder((3,), "float64", name="u"), ta.placeholder((4,), "float64", name="h")
    hv = np.array([1.0, -0.5, 2.0, 3.0])
    (g,) = ta.JacobianRecursive(y, [x], h)
    grad = np.asarray(ta.build([g], [x, h])(X, hv))
    jv = np.asarray(ta.build([ta.jvp(y, [x], [u])], [x, u])(X, U))
    assert np.isfinite(jv).all()
    np.testing.assert_allclose(float(hv @ jv), float(grad @ U), rtol=1e-12)


def test_a_sum_over_an_empty_prefix_inside_one_body():
    """``sqrt(sum(x[r]^2, where=r < i))``: at ``i = 0`` the sum is over nothing, the partial
    ``sqrt'(0)`` is infinite, the tangent 0."""
    x = ta.placeholder((3,), "float64", name="x")
    u = ta.placeholder((3,), "float64", name="u")
    r = ta.reduce_axis((0, 3), name="r")
    y = ta.compute((3,), lambda i: ta.sqrt(ta.sum(x[r] * x[r], axis=[r], where=r < i)), name="y")
    got = np.asarray(ta.build([ta.jvp(y, [x], [u])], [x, u])(X, U))
    want = [0.0] + [float(X[:i] @ U[:i]) / math.sqrt(float(X[:i] @ X[:i])) for i in (1, 2)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_emptiness_is_exact_on_the_affine_part_and_ignores_data():
    x = ta.placeholder((5,), "float64", name="x")
    r = ta.reduce_axis((0, 3), name="r")
    full = ta.compute((4, 3), lambda i, j: ta.sum(x[r], axis=[r], where=r <= j), name="full")
    assert empty_where(full.op.body[0]) is None  # r = 0 is always there
    ragged = ta.compute((4, 3), lambda i, j: ta.sum(x[r], axis=[r], where=(r < j) & (x[r] > 0)),
                        name="ragged")
    cond = empty_where(ragged.op.body[0])
    i, j = ragged.op.axes
    mask = ta.compute((4, 3), lambda p, q: ta.select(substitute(cond, {i: p, j: q}), 1.0, 0.0), name="mask")
    got = np.argwhere(np.asarray(ta.evaluate([mask], {})[0]) == 1.0).tolist()
    assert got == [[a, 0] for a in range(4)]  # empty at j = 0 only; the data conjunct is dropped


@pytest.mark.parametrize("optimize", [False, True])
def test_jvp_through_a_sum_of_empty_maxima_is_zero_where_they_are_empty(optimize):
    """``erf(|m1 + m2|^1.5)``: at odd rows both maxima are over nothing, their tangents strong
    zeros, and the chain rule's factor ``erf'(inf) pow'(inf) = 0 * inf`` must go inside each
    term of their sum (``(0 + 0) * inf`` was NaN)."""
    x = ta.placeholder((3,), "float64", name="x")
    u = ta.placeholder((3,), "float64", name="u")
    r, s = ta.reduce_axis((0, 3), name="r"), ta.reduce_axis((0, 3), name="s")
    m1 = ta.compute((4,), lambda i: ta.max(x[r], axis=[r], where=i % 2 == 0), name="m1")
    m2 = ta.compute((4,), lambda i: ta.max(x[s] * 2.0, axis=[s], where=i % 2 == 0), name="m2")
    y = ta.compute((4,), lambda i: ta.erf(ta.power(ta.abs(m1[i] + m2[i]) + 0.5, 1.5)), name="y")
    k = int(np.argmax(X))
    a = 3 * abs(X[k]) + 0.5
    d = 2 / math.sqrt(math.pi) * math.exp(-a ** 3) * 1.5 * math.sqrt(a) * math.copysign(1, X[k]) * 3 * U[k]
    want = np.array([d, 0.0, d, 0.0])
    j = ta.jvp(y, [x], [u], optimize=optimize)
    np.testing.assert_allclose(np.asarray(ta.build([j], [x, u])(X, U)), want, rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.asarray(ta.evaluate([j], {x: X, u: U})[0]), want, rtol=1e-12, atol=0)


@pytest.mark.slow
def test_hvp_of_a_guarded_gather_stays_in_bounds():
    """Distributing the chain rule's factor over a tangent's sums (the
    strong-zero push above) made the HVP's scatter test a guarded ``mode='raise'`` gather's
    mask outside its guard: IndexError (the cause, the scatter's eager ``&&`` of nested masks,
    is fixed in codegen/strategies/zero_masks.py: test_guarded_mask_peel.py).  The whole fuzz check,
    regenerated."""
    from fuzz.checks import run_checks
    from fuzz.program import generate
    from fuzz.runner import job_for

    results = run_checks(job_for(generate(110932, forms=False), 110932, checks=("hvp",)))
    assert all(r["status"] == "ok" for r in results), results
