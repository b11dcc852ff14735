"""A running max, min or product whose window reaches past its output, ``Y[j] = max_{k <= j + 2} X[k]``
(or ``k >= j - 2``, a suffix), over one range for ``j`` and ``k``: each term ``k`` enters at the output
``k - 2``, and the first three all at ``j = 0``.  Its gradient is the plain prefix over ``k``'s range, read
at ``clamp(j + 2)``, whose last point takes every head past it: linear, and within the bounds of every
tensor it reads (the line form routed a term to the output ``k - 2`` even below 0: a read out of bounds,
and a product's adjoint that missed the terms entering together).  Spelled with a ``where`` or padded with
the identity by a guard.

Oracles: float64 central differences of the formula in NumPy; ``ta.evaluate``."""

import numpy as np
import pytest

import tensorad as ta

N = 9
IDENTITY = {"max": -np.inf, "min": np.inf, "prod": 1.0}
WINDOWS = {"prefix": (lambda k, j: k <= j + 2), "suffix": (lambda k, j: k >= j - 2)}


def _program(kind, side, padded):
    X = ta.placeholder((N,), "float64", "X")
    k = ta.reduce_axis((0, N), "k")
    reduce, inside = getattr(ta, kind), WINDOWS[side]
    if padded:
        return X, ta.compute((N,), lambda j: reduce(ta.if_then_else(inside(k, j), X[k], IDENTITY[kind]),
                                                   axis=k), name="Y")
    return X, ta.compute((N,), lambda j: reduce(X[k], axis=k, where=inside(k, j)), name="Y")


def _loss(x, h, kind, side):
    reduce = {"max": np.max, "min": np.min, "prod": np.prod}[kind]
    return sum(h[j] * reduce([x[k] for k in range(N) if WINDOWS[side](k, j)]) for j in range(N))


@pytest.mark.parametrize("side", ["prefix", "suffix"])
@pytest.mark.parametrize(("kind", "padded"), [("max", False), ("min", False), ("prod", False), ("max", True),
                                              ("min", True)])
def test_gradient_equals_central_differences(kind, side, padded):
    X, Y = _program(kind, side, padded)
    H = ta.placeholder((N,), "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    rng = np.random.default_rng(7)
    x = rng.permutation(np.linspace(0.6, 1.4, N)) * rng.choice([-1.0, 1.0], N)  # (no ties)
    h = rng.standard_normal(N)
    eps = 1e-6
    want = np.array([(_loss(x + e, h, kind, side) - _loss(x - e, h, kind, side)) / (2 * eps)
                     for e in np.eye(N) * eps])
    np.testing.assert_allclose(ta.build([dX], [X, H])(x, h), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ta.evaluate(dX, {X: x, H: h}), want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("side", ["prefix", "suffix"])
@pytest.mark.parametrize("kind", ["max", "prod"])
def test_gradient_work_is_linear(kind, side):
    """Work by hand, on a pinned target: three scans of the ``N`` terms (a product's exclusive running
    product, ``N - 1``, or a max's winner, ``N``; the recurrence of the head's shares, ``N``; the routing
    to ``X``, ``N``) and the two heads past the prefix's last point summed once: ``3 N + 2`` at most,
    where the pairs ``(j, k)`` number ``N^2``."""
    X, Y = _program(kind, side, False)
    H = ta.placeholder((N,), "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([dX], [X, H], target="llvm -mcpu=haswell").work <= 3 * N + 2


@pytest.mark.parametrize("side", ["prefix", "suffix"])
@pytest.mark.parametrize("kind", ["max", "prod"])
@pytest.mark.parametrize("extent", [N - 1, N + 1])
@pytest.mark.parametrize("optimize", [True, False])
def test_window_past_an_output_of_another_extent_reads_the_head_in_its_bounds(kind, side, extent, optimize):
    """An output shorter or longer than the scanned axis, ``Y[j] = max_{k <= j + 2} X[k]`` for ``j <
    N - 1`` (or ``N + 1``): the reranged prefix's head at ``q`` is ``H[q + shift]`` where that is an
    output, read under a lazy guard, so that the unoptimized gradient too evaluates within ``H``'s
    bounds (an eager choice read ``H[-2]``)."""
    X = ta.placeholder((N,), "float64", "X")
    k = ta.reduce_axis((0, N), "k")
    Y = ta.compute((extent,), lambda j: getattr(ta, kind)(X[k], axis=k, where=WINDOWS[side](k, j)), name="Y")
    H = ta.placeholder((extent,), "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H, optimize=optimize)
    rng = np.random.default_rng(3)
    x = rng.permutation(np.linspace(0.6, 1.4, N)) * rng.choice([-1.0, 1.0], N)
    h = rng.standard_normal(extent)
    reduce = {"max": np.max, "prod": np.prod}[kind]

    def loss(v):
        return sum(h[j] * reduce([v[i] for i in range(N) if WINDOWS[side](i, j)]) for j in range(extent))

    eps = 1e-6
    want = np.array([(loss(x + e) - loss(x - e)) / (2 * eps) for e in np.eye(N) * eps])
    np.testing.assert_allclose(ta.evaluate(dX, {X: x, H: h}), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ta.build([dX], [X, H])(x, h), want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("side", ["prefix", "suffix"])
@pytest.mark.parametrize("kind", ["max", "min"])
def test_padded_window_is_linear_and_splits_ties_with_its_padding(kind, side):
    """The window padded with the identity, ``max_k if_then_else(k <= j + 2, X[k], -inf)``: the same linear
    work as its ``where`` form, ``3 N + 2`` at most (work by hand, as :func:`test_gradient_work_is_linear`;
    the padding's guard taken as the window's domain, reranged like the ``where`` form), where the winner of
    every box point summed over all ``N^2`` pairs.  Where a window holds only the identity, its padded points
    tie too, as in PyTorch's ``amax`` of the padded row: each real point takes ``H / N``.  Oracle: that rule
    in NumPy, on data whose leading (or trailing) elements are the identity."""
    X, Y = _program(kind, side, True)
    H = ta.placeholder((N,), "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([dX], [X, H], target="llvm -mcpu=haswell").work <= 3 * N + 2
    rng = np.random.default_rng(5)
    x = rng.permutation(np.linspace(0.6, 1.4, N)) * rng.choice([-1.0, 1.0], N)
    x[:4 if side == "prefix" else 0] = IDENTITY[kind]  # (the first windows: the identity alone)
    x[N - 4 if side == "suffix" else N:] = IDENTITY[kind]
    h = rng.standard_normal(N)
    want = np.zeros(N)
    for q in range(N):
        row = np.array([x[k] if WINDOWS[side](k, q) else IDENTITY[kind] for k in range(N)])
        tied = row == (row.max() if kind == "max" else row.min())
        for k in np.flatnonzero(tied):
            want[k] += h[q] / tied.sum() if WINDOWS[side](k, q) else 0.0
    np.testing.assert_allclose(ta.build([dX], [X, H])(x, h), want, rtol=1e-12)
    np.testing.assert_allclose(ta.evaluate(dX, {X: x, H: h}), want, rtol=1e-12)


MYPROD = ta.comm_reducer(lambda x, y: x * y, lambda t: ta.const(1, t), name="myprod")


@pytest.mark.parametrize("side", ["prefix", "suffix"])
def test_custom_product_padded_with_its_identity_is_a_linear_running_product(side):
    """A product written as a custom combiner, its window spelled as padding with 1: the padding's affine
    guard is its ``where``, as a built-in product's is, so that its gradient is the running product's two
    scans, ``3 N + 2`` at most (work by hand, as :func:`test_gradient_work_is_linear`), where the box's
    product of the other factors sums over every pair ``(j, k)``."""
    X = ta.placeholder((N,), "float64", "X")
    k = ta.reduce_axis((0, N), "k")
    Y = ta.compute((N,), lambda j: MYPROD(ta.if_then_else(WINDOWS[side](k, j), X[k], 1.0), axis=k), name="Y")
    H = ta.placeholder((N,), "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert ta.lower([dX], [X, H], target="llvm -mcpu=haswell").work <= 3 * N + 2
    rng = np.random.default_rng(11)
    x = rng.permutation(np.linspace(0.6, 1.4, N)) * rng.choice([-1.0, 1.0], N)
    h = rng.standard_normal(N)
    eps = 1e-6
    want = np.array([(_loss(x + e, h, "prod", side) - _loss(x - e, h, "prod", side)) / (2 * eps)
                     for e in np.eye(N) * eps])
    np.testing.assert_allclose(ta.build([dX], [X, H])(x, h), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ta.evaluate(dX, {X: x, H: h}), want, rtol=1e-6, atol=1e-8)
