"""A max/min whose ``where=`` reads data at the reduction's axis (``where=M[r] > 0``): the
forward's saved destination evaluates that condition at the winner's point, a point decoded
from a sum (``hits // K``) -- a data index, which must be clipped like a winner's index, or
the build rejects the read as out of bounds (OutOfBoundsError in every
gradient check).  Values against NumPy written here: the head goes to the maximum among the
points the mask keeps, split evenly among ties; a row whose mask keeps nothing gets none."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


@pytest.mark.parametrize("op, pick", [(ta.max, np.max), (ta.min, np.min)])
@pytest.mark.parametrize("threads", [1, 2])
def test_masked_window_gradient(op, pick, threads):
    X = ta.placeholder((5, 6), "float64", name="X")
    M = ta.placeholder((6,), "float64", name="M")
    r = ta.reduce_axis((0, 6), name="r")
    Y = ta.compute((5,), lambda i: op(X[i, r], axis=[r], where=M[r] > 0.0), name="Y")
    H = ta.placeholder((5,), "float64", name="H")
    (g,) = ta.gradient(Y, [X], H)
    xv = np.array([[1.0, 3.0, 3.0, 0.0, 2.0, -1.0], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
                   [0.5, -4.0, 7.0, 1.0, 9.0, 3.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                   [-2.0, -3.0, -3.0, 0.0, -1.0, -3.0]])
    hv = np.array([1.0, 2.0, -0.5, 3.0, 0.25])
    for mv in (np.array([1.0, 1.0, 1.0, -1.0, 0.0, 1.0]), np.array([-1.0] * 6)):
        want = np.zeros_like(xv)
        keep = [c for c in range(6) if mv[c] > 0]
        for i in range(5):
            if keep:
                best = pick(xv[i, keep])
                ties = [c for c in keep if xv[i, c] == best]
                for c in ties:
                    want[i, c] += hv[i] / len(ties)
        got = ta.build([g], [X, M, H], num_threads=threads)(xv, mv, hv)
        np.testing.assert_allclose(got, want, rtol=1e-15)
