"""A guarded gather's tangent raised where its guard fails.

``if_then_else(0 <= g[i] < 8, a1.take(r, g[i], mode='raise'), 0)`` inside a sum: forward mode
reads the tangent at the same checked index, ``U.take(r, g[i], mode='raise')``, and the optimizer
lifts the guard out of the sum (``sum_r if_then_else(G, f, 0) = if_then_else(G, [sum_r f], 0)``),
so the bracket ran the check at ``g[i] = -1`` and the HVP kernel -- and ``ta.evaluate`` of it --
raised ``IndexError`` where the program reads nothing (default options, in an HVP and a jvp, on
an AMD EPYC with AVX-512, native and AVX2).  A guarded read's tangent now clips its
checked indices, as the adjoint's index equations do (``autodiff/gathers.py``): exact where the
guard holds, unused where it fails; a read the program runs everywhere keeps its test.
Oracles: NumPy closed forms and central differences, and the same ``IndexError`` for bad data.
"""

import numpy as np
import pytest

import tensorad as ta


def _cos_of_guarded_gather(n):
    # (the fuzzed program's sum: over r5 in [1, 4), reading rows (r5 - 3) % 17, and a count r6;
    # with n == 1, as fuzzed, the output's loop is gone and the guard is lifted out of the sum)
    g = ta.placeholder((n,), "int32", name="g")
    a1 = ta.placeholder((17, 8), "float64", name="a1")
    r5, r6 = ta.reduce_axis((1, 4), name="r5"), ta.reduce_axis((0, 4), name="r6")
    t = ta.compute((n,), lambda i: ta.sum(ta.cos(ta.if_then_else(
        (g[i] >= 0) & (g[i] < 8), a1.take((r5 + -3) % 17, g[i], mode="raise"), 0.0)), axis=[r5, r6]),
        name="t")
    H = ta.placeholder((n,), "float64", name="H")
    k = ta.reduce_axis((0, n), name="k")
    L = ta.compute((), lambda: ta.sum(t[k] * H[k], axis=[k]), name="L")
    return g, a1, H, L


@pytest.mark.parametrize("gv", [[-1], [5], [-1, -1], [3, -1], [2, 7]])
def test_the_hessian_vector_product_is_the_closed_form(gv):
    g, a1, H, L = _cos_of_guarded_gather(len(gv))
    U = ta.placeholder((17, 8), "float64", name="U")
    (hvp,) = ta.hessian_vector_product(L, [a1], [U])
    rng = np.random.default_rng(0)
    a, u, h = rng.standard_normal((17, 8)), rng.standard_normal((17, 8)), np.array([0.7, -1.3][:len(gv)])
    gi = np.array(gv, np.int32)
    rows = [(r - 3) % 17 for r in range(1, 4)]  # 15, 16, 0
    want = np.zeros((17, 8))  # d2/da2 cos(a) = -cos(a), 4 times (r6), where the guard holds
    for i, j in enumerate(gi):
        if 0 <= j < 8:
            want[rows, j] += -4 * np.cos(a[rows, j]) * u[rows, j] * h[i]
    feed = {g: gi, a1: a, H: h, U: u}
    np.testing.assert_allclose(ta.evaluate(hvp, feed), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ta.build([hvp], [g, a1, H, U])(gi, a, h, u), want, rtol=1e-12, atol=1e-12)


def test_the_jvp_of_a_guarded_gather_of_a_computed_tensor():
    g = ta.placeholder((5,), "int32", name="g")
    X = ta.placeholder((5,), "float64", name="X")
    r = ta.reduce_axis((1, 5), name="r")  # (a sum whose ``where`` reads the output axis, as fuzzed)
    T = ta.compute((5,), lambda i: ta.sum(X[i] * X[i], axis=[r], where=r >= i), name="T")
    def body(i):
        at = g[i] * 2 + 1
        picked = ta.if_then_else((at >= 0) & (at < 5), T.take(at, mode="raise"), 0.0)
        return picked / (ta.abs(ta.cast("float64", i - 3)) + 1.0)

    Y = ta.compute((5,), body, name="Y")
    U = ta.placeholder((5,), "float64", name="U")
    J = ta.jvp(Y, [X], [U])
    gi = np.array([-2, 0, 1, 3, -1], np.int32)  # indices -3, 1, 3, 7, -1: two in range
    x, u = np.linspace(0.5, 2.5, 5), np.linspace(-1.0, 1.0, 5)
    want = np.zeros(5)
    for i in range(5):
        j = 2 * gi[i] + 1
        if 0 <= j < 5:
            count = sum(1 for r in range(1, 5) if r >= j)
            want[i] = count * 2 * x[j] * u[j] / (abs(i - 3) + 1)
    np.testing.assert_allclose(ta.evaluate(J, {g: gi, X: x, U: u}), want, rtol=1e-13)
    np.testing.assert_allclose(ta.build([J], [g, X, U])(gi, x, u), want, rtol=1e-13)
    eps = 1e-6  # and against central differences of the forward kernel
    fwd = ta.build([Y], [g, X], fastmath=False)
    fd = (fwd(gi, x + eps * u) - fwd(gi, x - eps * u)) / (2 * eps)
    np.testing.assert_allclose(want, fd, rtol=1e-6, atol=1e-9)


def test_an_unguarded_gather_still_raises_in_its_tangent():
    g = ta.placeholder((3,), "int32", name="g")
    X = ta.placeholder((4,), "float64", name="X")
    Y = ta.compute((3,), lambda i: X.take(g[i], mode="raise") * 2.0, name="Y")
    U = ta.placeholder((4,), "float64", name="U")
    J = ta.jvp(Y, [X], [U])
    bad = np.array([0, 4, 1], np.int32)
    with pytest.raises(IndexError, match="gather index out of range"):
        ta.evaluate(J, {g: bad, X: np.ones(4), U: np.ones(4)})
    with pytest.raises(IndexError, match="gather index out of range"):
        ta.build([J], [g, X, U])(bad, np.ones(4), np.ones(4))


def test_a_clipped_tangent_read_stays_provably_in_bounds():
    """On an AVX2 target, clipping the tangent's index alone made the HVP undefinable --
    ``OutOfBoundsError`` at the definition of ``t0.grad.red.jvp``: the tangent read
    ``u_x0[.., clip(g, 5)]`` of an axis of 3, under a guard ``data_index(g, 5, raise) < 3``
    that the bounds check cannot relate to the clipped gather.  An index whose gathers are
    clipped is now clipped into its axis too.  The oracle is the fuzzer's HVP check: central
    differences of the gradient kernel."""
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, root)
    try:
        from fuzz import checks
        from fuzz.program import generate
        from fuzz.runner import job_for
    finally:
        sys.path.remove(root)
    seed = 772357
    job = job_for(generate(seed), seed, checks=("hvp", "jvp"))
    job["options"] = {**job["options"], "target": "llvm -mcpu=haswell"}
    results = checks.run_checks(job)
    assert [r["status"] for r in results] == ["ok", "ok"], results
