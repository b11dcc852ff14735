"""A sum solved through a data-dependent equation keeps its other tests under the range guard
.

The gradient of an argmax's value over a padded window of a max reduction sums over the
window point ``i1`` with ``i1 == w - 3`` (``w`` the argmax's index, data).  Solving for ``i1``
leaves the range guard ``3 <= w <= 7`` and moves the max gradient's tie tests, reads of the
winner tensor at ``i1``, to ``w - 3``: in bounds only under the guard.  They were conjoined
with it by ``&&``, which computes both sides, so the build's bounds proof refused the program
(OutOfBoundsError with default options).  Oracles: the derivative written by hand below,
central finite differences in float64, and ``ta.evaluate``.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _argmax(x, y):
    keep = x[1] >= y[1]
    return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])


ARGMAX = ta.comm_reducer(_argmax, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")


def _program():
    x = ta.placeholder((3,), "float64", name="x")
    r0 = ta.reduce_axis((1, 3), name="r0")
    t0 = ta.compute((1, 5), lambda i0, i1: ta.max(ta.cos(x[i0]), axis=[r0]), name="t0")
    r2 = ta.reduce_axis((-1, 16), name="r2")
    _, best = ta.compute((), lambda: ARGMAX(
        (r2, ta.if_then_else((r2 - 2 >= 0) & (r2 - 2 < 5), t0[0, r2 - 2], -1.0)),
        axis=[r2], where=r2 != -1), name="best")
    return x, best


def _best(xv):
    """The argmax's value: every t0 element is cos(x0) (> -1, the padding)."""
    return max(np.cos(xv[0]), -1.0)


@pytest.mark.parametrize("checked", [False, True])
def test_gradient_of_argmax_over_a_padded_max_window(checked):
    x, best = _program()
    h = ta.placeholder((), "float64", name="h")
    dx, = ta.JacobianRecursive(best, [x], h)
    xv, hv = np.array([0.3, -1.2, 2.0]), np.array(1.5)
    got = ta.build([dx], [x, h], checked=checked)(xv, hv)
    want = np.array([-np.sin(xv[0]) * hv, 0.0, 0.0])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    eps = 1e-6
    fd = np.array([(_best(xv + eps * e) - _best(xv - eps * e)) / (2 * eps) * hv for e in np.eye(3)])
    np.testing.assert_allclose(got, fd, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ta.evaluate([dx], {x: xv, h: hv})[0], want, rtol=1e-12)
