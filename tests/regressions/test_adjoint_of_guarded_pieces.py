"""A min over products read at a few points of a larger box, ``Y[b, c] = T[(b + 2) // 2, 3 b]`` with
``T[i, j] = min_r X[8 - j % 9, 0] * prod_{k >= r} a(i, j)``: the adjoint of the product is a guarded
piece (the winner's) plus a scatter-add (the ties'), both zero outside the five points ``Y`` reads.
Their sum counted as nonzero everywhere (a tensor's guard was taken only from a body that is a
choice), so the product rule's prefix and suffix products and its sum over the terms ran over the
whole 16 x 16 box: 11 times the forward's work, a breach of the cheap-gradient bound.

Oracles: float64 central differences of the program written in NumPy; ``ta.evaluate``."""

import numpy as np

import tensorad as ta
from fuzz.cheap import gradient_cost

HASWELL = "llvm -mcpu=haswell"


def _program():
    X = ta.placeholder((9, 5), "float64", name="X")
    r = ta.reduce_axis((1, 3), name="r")
    k = ta.reduce_axis((0, 5), name="k")

    def body(i, j):
        a = ta.if_then_else((i >= 1) & (i <= 9), X[i - 1, (j + 3) // 3 % 5], 0.0)
        return ta.min(X[8 - j % 9, (r - 1) // 2] * ta.prod(a, axis=k, where=k >= r), axis=r)

    T = ta.compute((16, 16), body, name="T")
    return X, ta.compute((5, 2), lambda b, c: T[(b + 2) // 2, 3 * b], name="Y")


def _numpy_loss(x, h):
    total = 0.0
    for b in range(5):
        i, j = (b + 2) // 2, 3 * b
        a = x[i - 1, (j + 3) // 3 % 5]
        t = min(x[8 - j % 9, 0] * a ** (5 - r) for r in (1, 2))
        total += t * (h[b, 0] + h[b, 1])
    return total


def test_gradient_work_stays_on_the_points_read():
    """Work by hand: the forward runs over the box of the points ``Y`` reads (rows 1-3, columns 0-12:
    39 points), 244 in all.  The gradient recomputes it there (244), and runs the product rule's prefix
    and suffix products and its sum over the terms on the same box (3 x 39 points x 7 terms, ``k`` from
    ``r`` to 4 for ``r = 1, 2``): 1063 at most, within the cheap-gradient bound (1031 here)."""
    X, Y = _program()
    cost = gradient_cost(Y, [X], target=HASWELL)
    assert cost.forward == 244
    assert cost.holds, cost
    assert cost.backward <= 244 + 3 * 39 * 7, cost


def test_gradient_equals_central_differences():
    X, Y = _program()
    H = ta.placeholder((5, 2), "float64", name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    rng = np.random.default_rng(3)
    x, h = rng.uniform(0.5, 1.5, (9, 5)) * rng.choice([-1.0, 1.0], (9, 5)), rng.standard_normal((5, 2))
    want = np.zeros_like(x)
    eps = 1e-6
    for idx in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += eps
        down[idx] -= eps
        want[idx] = (_numpy_loss(up, h) - _numpy_loss(down, h)) / (2 * eps)
    got = ta.build([dX], [X, H], target=HASWELL)(x, h)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ta.evaluate(dX, {X: x, H: h}), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose((ta.evaluate(Y, {X: x}) * h).sum(), _numpy_loss(x, h), rtol=1e-12)
