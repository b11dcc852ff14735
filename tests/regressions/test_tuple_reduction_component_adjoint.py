"""A custom tuple combiner whose differentiated output combines only with itself.

``(s, m) = sum_and_max_k (X[i, k], X[i, k]^2)``: the running sum ``s`` reads no other component
of the tuple, nor does the running max ``m``.  The reverse gradient of ``s`` (or of ``m``) used
to differentiate the whole tuple as a generic combiner: a Jacobian over every element of ``X``
for every output row, quadratic in the row length.  The adjoint now reduces over the components
the head needs, a plain sum (the head broadcast) or a plain max (the winner routed), linear in
the input."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"
SUM_AND_MAX = ta.comm_reducer(lambda x, y: (x[0] + y[0], ta.maximum(x[1], y[1])),
                              lambda a, b: (ta.const(0, a), ta.min_value(b)), name="sum_and_max")
R, N = 8, 16


def _program():
    X = ta.placeholder((R, N), "float64", name="X")
    k = ta.reduce_axis((0, N), "k")
    s, m = ta.compute((R,), lambda i: SUM_AND_MAX((X[i, k], X[i, k] * X[i, k]), axis=k), name="sm")
    return X, s, m


@pytest.mark.parametrize("which", ["sum", "max"])
def test_component_gradient_is_linear_and_right(which):
    X, s, m = _program()
    out = s if which == "sum" else m
    H = ta.placeholder((R,), "float64", name="H")
    (dX,) = ta.JacobianRecursive(out, [X], H)
    work = ta.lower([dX], [X, H], target=TARGET).work
    # the sum: one store per element; the max: a winner pass and the routing (a Jacobian: R*N*N)
    assert work <= 3 * R * N, f"{which}: gradient work {work} > 3 R N = {3 * R * N}"

    rng = np.random.default_rng(1)
    x, h = rng.standard_normal((R, N)), rng.standard_normal(R)
    if which == "sum":
        want = np.broadcast_to(h[:, None], (R, N))
    else:
        sq = x * x
        want = (sq == sq.max(axis=1, keepdims=True)) * 2 * x * h[:, None]
    got = ta.build([dX], [X, H], target="llvm")(x, h)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_component_that_reads_another_keeps_it():
    """The transpose of a max pool's tangent: forward mode's ``(tangent, value, ties)`` combiner,
    differentiated in the tangent only, whose combine picks the winner by the values.  Finding what
    each component reads missed the combiner's own variables (they have no bounds), so the values
    were dropped and the build failed on an unbound ``y``.  The result is the max pool's gradient:
    each head routed to its window's maximum."""
    X = ta.placeholder((1, 1, 5, 5), "float64", "X")
    U = ta.placeholder((1, 1, 5, 5), "float64", "U")
    T = ta.jvp(ta.topi.nn.pool(X, 3, 2, 1, "max"), [X], [U])
    H = ta.placeholder(T.shape, "float64", "H")
    (dU,) = ta.JacobianRecursive(T, [U], H)
    rng = np.random.default_rng(2)
    x, h = rng.permutation(25).reshape(1, 1, 5, 5).astype("float64"), rng.standard_normal((1, 1, 3, 3))
    want = np.zeros((5, 5))
    padded = np.pad(x[0, 0], 1, constant_values=-np.inf)
    for i in range(3):
        for j in range(3):
            r, c = np.unravel_index(np.argmax(padded[2 * i:2 * i + 3, 2 * j:2 * j + 3]), (3, 3))
            want[2 * i + r - 1, 2 * j + c - 1] += h[0, 0, i, j]
    got = ta.build([dU], [X, U, H])(x, np.zeros_like(x), h)
    np.testing.assert_allclose(got[0, 0], want, rtol=1e-12, atol=1e-12)
