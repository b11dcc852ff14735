"""Gradients differentiated over a size variable that lowered, bound at a size, to other work than the
program written at that size."""

import numpy as np

import tensorad as ta

HASWELL = {"target": "llvm -mcpu=haswell"}


def _max_of_sum_or_mean(n):
    x = ta.placeholder((n,), name="x")
    total, mean = ta.topi.sum(x, axis=0), ta.topi.mean(x, axis=0)
    r = ta.reduce_axis((1, 18), name="r")
    y = ta.compute((n, n), lambda i, j: ta.max(ta.if_then_else((j + r) % 3 == 1, total[()], mean[()]),
                                                axis=[r]), name="y")
    h = ta.placeholder(y.shape, name="h")
    return [y, *ta.JacobianRecursive(y, [x], h)], [x, h]


def test_a_max_of_a_mean_over_a_size_recomputes_its_tie_test():
    """A max's tie test recomputes a tensor it reads where that rounds once; a mean over ``n`` is
    ``sum * (1 / n)``, and the division of a size counted as a second rounding, so the gradient over
    ``n`` stored a copy of the mean that the static program (whose ``1 / 5`` is a constant) does not.
    A division of sizes and constants rounds as a constant does."""
    symbolic = ta.lower(*_max_of_sum_or_mean(ta.size_var("n", min=3)), **HASWELL)
    for n in (3, 5, 8):
        assert symbolic.work_at(n=n) == ta.lower(*_max_of_sum_or_mean(n), **HASWELL).work, f"n={n}"
    outs, ins = _max_of_sum_or_mean(ta.size_var("n", min=3))
    rng = np.random.default_rng(0)
    x, h = rng.standard_normal(5).astype(np.float32), rng.standard_normal((5, 5)).astype(np.float32)
    got = ta.build(outs, ins, **HASWELL)(x, h)
    want_y = np.full((5, 5), max(x.sum(), x.mean()), np.float32)
    static_outs, static_ins = _max_of_sum_or_mean(5)
    want = ta.evaluate(static_outs, dict(zip(static_ins, (x, h))))
    np.testing.assert_allclose(got[0], want_y, rtol=1e-6)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _cast_index(n):
    x, w = ta.placeholder((9, 4), name="x"), ta.placeholder((n,), name="w")
    r = ta.reduce_axis((0, n), name="r")
    y = ta.compute((4,), lambda j: ta.sum(x[ta.cast("int32", ta.cast("int64", r) * 3 % 9), j] * w[r], axis=r),
                   name="y")
    h = ta.placeholder(y.shape, name="h")
    return [y, *ta.JacobianRecursive(y, [x, w], h)], [x, w, h]


def test_an_index_cast_over_a_size_is_bounded():
    """An index cast to ``int32`` of an ``int64`` of an axis over ``n``: its bounds were expressions in
    ``n``, and proving the cast keeps its value asked whether ``n - 1`` fits 64 bits, a decision made only
    at static sizes, so the program was refused.  A size is bounded by its greatest value (an extent's
    int64 range where it has none)."""
    symbolic = ta.lower(*_cast_index(ta.size_var("n")), **HASWELL)
    for n in (1, 4, 11):
        assert symbolic.work_at(n=n) == ta.lower(*_cast_index(n), **HASWELL).work, f"n={n}"
    outs, ins = _cast_index(ta.size_var("n"))
    rng = np.random.default_rng(1)
    x, w, h = (rng.standard_normal(s).astype(np.float32) for s in ((9, 4), (11,), (4,)))
    y, dx, dw = ta.build(outs, ins, **HASWELL)(x, w, h)
    rows = np.arange(11) * 3 % 9
    np.testing.assert_allclose(y, w @ x[rows], rtol=1e-5)
    want_dx = np.zeros_like(x)
    np.add.at(want_dx, rows, w[:, None] * h[None, :])
    np.testing.assert_allclose(dx, want_dx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw, x[rows] @ h, rtol=1e-5)


def _running_product(n):
    x = ta.placeholder((n,), name="x")
    r = ta.reduce_axis((-1, n), name="r")
    y = ta.compute((3,), lambda j: ta.prod(x[(r + 1) % 2], axis=r, where=r < j), name="y")
    h = ta.placeholder(y.shape, name="h")
    return [y, *ta.JacobianRecursive(y, [x], h)], [x, h]


def test_a_running_product_over_an_axis_ending_at_a_size_is_one_scan():
    """``y[j] = prod_{-1 <= r < j} x[(r + 1) % 2]`` with ``r`` over ``[-1, n)`` and ``j < 3``: its
    gradient is a running product and a suffix recurrence over the windows' points, but an axis ending
    at ``n`` was taken for one whose end is unknown, and the gradient over ``n`` stored a prefix and a
    suffix for every output.  An end in sizes that no window reaches (``n >= 2`` here) is the windows'
    end."""
    symbolic = ta.lower(*_running_product(ta.size_var("n", min=2)), **HASWELL)
    for n in (2, 5):
        assert symbolic.work_at(n=n) == ta.lower(*_running_product(n), **HASWELL).work, f"n={n}"
    outs, ins = _running_product(ta.size_var("n", min=2))
    rng = np.random.default_rng(2)
    x, h = rng.uniform(0.5, 1.5, 4).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    y, dx = ta.build(outs, ins, **HASWELL)(x, h)
    x64 = x.astype(np.float64)
    terms = [[x64[(r + 1) % 2] for r in range(-1, j)] for j in range(3)]
    np.testing.assert_allclose(y, [np.prod(t) for t in terms], rtol=1e-6)
    want = np.zeros(4)
    for j, t in enumerate(terms):
        for r in range(-1, j):
            want[(r + 1) % 2] += h[j] * np.prod(t) / x64[(r + 1) % 2]
    np.testing.assert_allclose(dx, want, rtol=1e-5, atol=1e-6)


SUMMAX = ta.comm_reducer(lambda x, y: (x[0] + y[0], ta.maximum(x[1], y[1])),
                         lambda a, b: (ta.const(0, a), ta.min_value(b)), name="summax")


def _sum_and_max_of_a_gathered_row(n):
    x = ta.placeholder((3, n, 5), name="x")
    r = ta.reduce_axis((0, 9), name="r")

    def v(i):
        return x[2 - i % 3, (i + 1) % 2, 0]
    _, y = ta.compute((5,), lambda i: SUMMAX((v(i), ta.abs(v(i)) * 0.5), axis=[r]), name="y")
    h = ta.placeholder(y.shape, name="h")
    return [y, *ta.JacobianRecursive(y, [x], h)], [x, h]


def test_a_gradient_of_guarded_terms_runs_where_one_is_nonzero():
    """The gradient of a max's value reaches ``x`` through two terms (the winner and its ties), each
    guarded by where it lands; a sum of guarded terms counted as nonzero everywhere, so the program
    written at a size stored (zeros) at a point neither term reaches, which the gradient over ``n``
    skipped.  A sum of guarded terms is zero off the union of their domains: this changes the work of
    static programs too (one point less here)."""
    symbolic = ta.lower(*_sum_and_max_of_a_gathered_row(ta.size_var("n", min=2)), **HASWELL)
    for n in (2, 5):
        static = ta.lower(*_sum_and_max_of_a_gathered_row(n), **HASWELL)
        assert symbolic.work_at(n=n) == static.work, f"n={n}"
    assert static.work == 55
    outs, ins = _sum_and_max_of_a_gathered_row(5)
    rng = np.random.default_rng(4)
    x, h = rng.standard_normal((3, 5, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    y, dx = ta.build(outs, ins, **HASWELL)(x, h)
    rows = [(2 - i % 3, (i + 1) % 2) for i in range(5)]
    np.testing.assert_array_equal(y, [np.abs(x[a, b, 0]) * np.float32(0.5) for a, b in rows])
    want = np.zeros((3, 5, 5))
    for i, (a, b) in enumerate(rows):
        want[a, b, 0] += h[i] * 0.5 * np.sign(x[a, b, 0])
    np.testing.assert_allclose(dx, want, rtol=1e-6)
