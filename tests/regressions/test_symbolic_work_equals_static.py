"""Gradients differentiated over a size variable that lowered, bound at a size, to other work than the
program written at that size."""

import numpy as np

import tensorad as ta

HASWELL = {"target": "llvm -mcpu=haswell"}


def _max_of_sum_or_mean(n):
    x = ta.placeholder((n,), name="x")
    total, mean = ta.topi.sum(x, axis=0), ta.topi.mean(x, axis=0)
    r = ta.reduce_axis((1, 18), name="r")
    y = ta.compute((n, n), lambda i, j: ta.max(ta.if_then_else((j + r) % 3 == 1, total[()], mean[()]), axis=[r]),
                   name="y")
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
