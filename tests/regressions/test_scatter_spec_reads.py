"""``build`` raised ``KeyError: Tensor(t0.winner)`` on a gradient, with
default options.

The gradient of a max over an argmax's values adds into the argmax's adjoint by a scatter whose
add is masked by the argmax's winner sentinel (``t0.winner.v2 != SENTINEL``); the scatter strategy
moves that mask out of the op's body into its specs, and the buffer plan, which collected a
unit's reads from its bodies alone, saw no reader of ``t0.winner``: it got no buffer, its nest
stored nothing and was dropped, and the scatter's nest read a tensor that did not exist.  A
unit's reads now include its scatter specs'.  Oracle: the program's derivative in closed form
(every element of ``t0`` is ``x[2]``, so ``Y = 0.5 x[2] + (i + 1)`` and ``x.grad[2] = 0.5 sum(H)``)
and central finite differences of it written in NumPy.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta


def _first_max(x, y):
    keep = x[1] >= y[1]
    return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])


ARGMAX = ta.comm_reducer(_first_max, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")


def test_a_max_over_argmax_values_builds_and_is_right(rng, numeric_grad):
    x = ta.placeholder((3,), "float64", "x")
    r0 = ta.reduce_axis((0, 2), "r0")
    t0_i, t0 = ta.compute((2, 9), lambda i, j: ARGMAX((r0, x[2]), axis=[r0]), name="t0")
    r5, r6 = ta.reduce_axis((0, 9), "r5"), ta.reduce_axis((0, 3), "r6")
    Y = ta.compute((2, 3), lambda i, j: ta.max(t0[(i * 2 + j) % 2, r5 * 3 % 9], axis=[r5, r6]) * 0.5
                   + ta.cast("float64", i + 1), name="Y")
    H = ta.placeholder((2, 3), "float64", "H")
    (gx,) = ta.JacobianRecursive(Y, [x], H)
    kernel = ta.build([gx], [x, H])
    xv, hv = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, (2, 3))

    def forward(x):
        return np.full((2, 3), 0.5 * x[2]) + np.arange(1, 3)[:, None]
    np.testing.assert_allclose(ta.build([Y], [x])(xv), forward(xv), rtol=1e-14)
    np.testing.assert_allclose(kernel(xv, hv), [0.0, 0.0, 0.5 * hv.sum()], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(kernel(xv, hv), numeric_grad(forward, [xv], hv)[0], rtol=1e-6, atol=1e-9)
