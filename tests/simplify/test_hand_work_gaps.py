"""Gradients of the workloads of ``workloads.gap_workloads`` that reach the hand-written work.

* ``X X^T``: the adjoint of ``X`` is a sum ``H X`` beside a read of the transpose's adjoint
  ``H^T X``, a sum the optimizer does not own.  An adjoint sum read whole over no more points
  than it has merges into the reader's sum (:meth:`simplify.program._Pass.mergeable`): one
  pass over ``j`` adds ``H[a, j] X[j, b] + H[j, a] X[j, b]``, ``n^2 d`` body runs; where a
  matrix product pays, that sum is one product of the summed head ``(H + H^T) X``, not two (its
  packing computes the ``n^2`` values of the summed head once).
* a max pool with a 1 x 1 window is a max over one point: its source there.  Its adjoint is
  the elementwise one (the head routed to the element read) with no winner, tie count or tie
  term; the same for min and product reductions over one point, whose where-condition may
  fail there (the identity, a zero gradient).

* a min over a middle axis, its input's only consumer: the winner's indices that the window
  does not move are opaque as its window index is, so the head is scattered from the outputs
  to the winners (one add per output) instead of a pass over every element of the input
  testing whether it is its window's winner.

Work is counted on a pinned target; values are checked against NumPy formulas and float64
central differences.
"""

from __future__ import annotations

import numpy as np
import pytest
import simplify_workloads as W

import tensorad as ta
from tensorad.ir import placeholders

TARGET = "llvm -mcpu=skylake-avx512"
F64 = "float64"


def _work(grads, inputs) -> int:
    return ta.lower(list(grads), list(inputs), target=TARGET).work


@pytest.mark.parametrize("n,d", [(6, 5), (4, 9), (64, 196)])
def test_gram_gradient_is_one_sum_of_both_products(n, d):
    X = ta.placeholder((n, d), F64, name="X")
    G = ta.topi.matmul(X, ta.topi.transpose(X))
    H = ta.placeholder(G.shape, F64, name="H")
    (dX,) = ta.JacobianRecursive(G, [X], H)
    work = _work([dX], [X, H])
    # (a product's packing computes the summed head once: n^2 more)
    assert work <= n * n * d + n * n, f"gram gradient work {work} > n^2 d + n^2 = {n * n * (d + 1)}: " \
        "two products kept"

    rng = np.random.default_rng(3)
    x, h = rng.standard_normal((n, d)), rng.standard_normal((n, n))
    want = (h + h.T) @ x
    np.testing.assert_allclose(ta.build([dX], [X, H])(x, h), want, rtol=1e-11, atol=1e-11)


def test_adjoint_sum_read_by_two_inputs_merges_without_more_work():
    """``Z = (A + B) W + A V``: the adjoint of the sum ``A + B`` is read by both inputs' adjoints;
    merged into ``A``'s sum beside ``H V^T`` it still costs no more than the separate sums."""
    A, B = ta.placeholder((6, 5), F64, name="A"), ta.placeholder((6, 5), F64, name="B")
    Wt, V = ta.placeholder((5, 4), F64, name="W"), ta.placeholder((5, 4), F64, name="V")
    Z = ta.topi.add(ta.topi.matmul(ta.topi.add(A, B), Wt), ta.topi.matmul(A, V))
    H = ta.placeholder(Z.shape, F64, name="H")
    dA, dB = ta.JacobianRecursive(Z, [A, B], H)
    assert _work([dA, dB], [A, B, Wt, V, H]) <= 2 * 6 * 5 * 4  # one product per adjoint

    rng = np.random.default_rng(5)
    a, b, w, v, h = (rng.standard_normal(t.shape) for t in (A, B, Wt, V, H))
    got_a, got_b = ta.build([dA, dB], [A, B, Wt, V, H])(a, b, w, v, h)
    np.testing.assert_allclose(got_a, h @ w.T + h @ v.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_b, h @ w.T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_max_pool_1x1_gradient_routes_the_head_alone(stride):
    wl = W.max_pool_1x1(stride)
    H = ta.placeholder(wl.output.shape, name="H")
    grads = ta.JacobianRecursive(wl.output, wl.inputs, H)
    (X,) = wl.inputs
    # one store per window: no forward max, tie count or tie term
    assert _work(grads, list(placeholders([wl.output])) + [H]) == int(np.prod(wl.output.shape))

    rng = np.random.default_rng(7)
    x = rng.integers(0, 2, X.shape).astype(np.float32)  # ties with the neighbours
    x[0, 1, 0, 0] = np.nan
    h = rng.standard_normal(H.shape).astype(np.float32)
    want = np.zeros_like(x)
    want[:, :, ::stride, ::stride] = h
    got = ta.build(list(grads), [X, H])(x, h)
    np.testing.assert_array_equal(got, want)


def _one_point(kind: str):
    """``Y[i, j] = kind over a one-point box (r, s) where i != j of X[i, j + r] * X[j, i + s]``."""
    X = ta.placeholder((4, 4), F64, name="X")
    r, s = ta.reduce_axis((0, 1), "r"), ta.reduce_axis((0, 1), "s")
    reduce = {"min": ta.min, "prod": ta.prod}[kind]
    Y = ta.compute((4, 4), lambda i, j: reduce(X[i, j + r] * X[j, i + s], [r, s], where=i != j),
                   name=f"one_{kind}")
    return X, Y


def _one_point_forward(x: np.ndarray, kind: str) -> np.ndarray:
    identity = np.inf if kind == "min" else 1.0
    return np.where(np.eye(4, dtype=bool), identity, x * x.T)


@pytest.mark.parametrize("kind", ["min", "prod"])
def test_one_point_reduction_gradient_is_elementwise(kind, numeric_grad):
    X, Y = _one_point(kind)
    H = ta.placeholder(Y.shape, F64, name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert _work([dX], [X, H]) <= 16  # one pass over X: no winner, tie or zero count

    rng = np.random.default_rng(11)
    x, h = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    off = ~np.eye(4, dtype=bool)
    want = np.where(off, h * x.T + h.T * x.T, 0.0)  # d(x_ij x_ji): H_ij x_ji + H_ji x_ji
    got = ta.build([dX], [X, H])(x, h)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    (fd,) = numeric_grad(lambda a: np.where(off, _one_point_forward(a, kind), 0.0), [x], head=h)
    np.testing.assert_allclose(got, fd, rtol=1e-7, atol=1e-9)


def test_one_point_custom_maximum_keeps_its_identity(numeric_grad):
    """A custom reducer ``max`` with identity 0 over one point is ``max(0, X)``: the head goes to
    the element only where it beats the identity."""
    X = ta.placeholder((3, 4), F64, name="X")
    relu_max = ta.comm_reducer(lambda a, b: ta.maximum(a, b), lambda dtype: ta.const(0.0, dtype))
    r = ta.reduce_axis((0, 1), "r")
    Y = ta.compute((3, 4), lambda i, j: relu_max(X[i, j + r], axis=r), name="Y")
    H = ta.placeholder(Y.shape, F64, name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    rng = np.random.default_rng(13)
    x, h = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    got = ta.build([dX], [X, H])(x, h)
    np.testing.assert_allclose(got, np.where(x > 0, h, 0.0), rtol=1e-12, atol=0)
    (fd,) = numeric_grad(lambda a: np.maximum(a, 0.0), [x], head=h)
    np.testing.assert_allclose(got, fd, rtol=1e-7, atol=1e-9)


def _min_gradient(a: np.ndarray, h: np.ndarray, axis: int) -> np.ndarray:
    """The head split evenly among the elements equal to their window's minimum."""
    m = np.expand_dims(a.min(axis=axis), axis)
    tied = a == m
    return tied * np.expand_dims(h, axis) / tied.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [1, 2])
def test_min_gradient_scatters_to_the_winners(axis):
    wl = W.min_middle_axis()
    (A,) = wl.inputs
    Y = ta.topi.min(A, axis=axis)
    H = ta.placeholder(Y.shape, name="H")
    grads = ta.JacobianRecursive(Y, [A], H)
    outputs = int(np.prod(Y.shape))
    work = _work(grads, [A, H])
    # the forward's min and the tie count beside it (a pass over A each), one add per output
    # and the routing of the ties (a pass over A, counted as taken: the worst case, every window tied)
    assert work <= 3 * int(np.prod(A.shape)) + 2 * outputs, f"work {work}: a pass over A routes the head"
    if axis == 1:  # (the min and its tie count are two passes where the formula's one suffices)
        assert work <= 1.6 * wl.hand_work

    rng = np.random.default_rng(17)
    a = rng.integers(0, 3, A.shape).astype(np.float32)  # ties in most windows
    a[0, 2] = rng.standard_normal(a.shape[2]).astype(np.float32)  # and lone winners
    h = rng.standard_normal(Y.shape).astype(np.float32)
    got = ta.build(list(grads), [A, H])(a, h)
    np.testing.assert_allclose(got, _min_gradient(a.astype(np.float64), h, axis), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("target", [TARGET, "llvm -mcpu=haswell"])
def test_a_cumulative_product_gradient_reaches_hand_work(target):
    """The products on either side of each factor, the one after it a linear recurrence of the
    head: two scans and their product, no division, zero count or tie test."""
    (wl,) = [w for w in W.gap_workloads() if w.name == "cumprod"]
    H = ta.placeholder(wl.output.shape, name="H")
    grads = ta.JacobianRecursive(wl.output, wl.inputs, H)
    assert ta.lower(list(grads), list(wl.inputs) + [H], target=target).work <= wl.hand_work


def _range_of_rows(X):
    n, m = X.shape
    a, b = ta.reduce_axis((0, m), "a"), ta.reduce_axis((0, m), "b")
    return ta.compute((n,), lambda i: ta.max(X[i, a], axis=a) - ta.min(X[i, b], axis=b), name="Y")


def test_max_minus_min_gradient_finds_each_winner_in_one_pass():
    """``Y[n] = max_a X[n, a] - min_b X[n, b]``: each winner, first index and tie count from one pass
    over ``X`` (the max's and the min's in one loop), then ``dX`` written once.  Hand count: ``N*M``
    per winner + ``N*M`` for ``dX``; here also ``2N`` destinations and, per winner, the routing of the
    tied rows, a pass over ``X`` counted as taken (the worst case: every row tied)."""
    n, m = 256, 512
    X = ta.placeholder((n, m), "float32", name="X")
    Y = _range_of_rows(X)
    H = ta.placeholder((n,), "float32", name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert _work([dX], [X, H]) <= 5 * n * m + 3 * n


@pytest.mark.parametrize("threads", [1, 2])
def test_max_minus_min_gradient_with_ties_and_nans_vs_numpy(threads):
    """Rows with tied maxima and minima, NaNs (which win a max and a min, every NaN tied), ``-inf``
    and ``inf``: each tied element gets ``H / T`` of its side (PyTorch's ``amax``), a NumPy float64
    formula written here."""
    rng = np.random.default_rng(11)
    n, m = 9, 70
    x = rng.integers(-3, 4, (n, m)).astype(np.float64)
    x[1, [4, 40]] = np.nan
    x[2, 7] = np.nan
    x[3] = -np.inf
    x[4, 5], x[4, 66] = np.inf, -np.inf
    x[5] = 2.0
    h = rng.standard_normal(n)
    X = ta.placeholder((n, m), F64, name="X")
    H = ta.placeholder((n,), F64, name="H")
    (dX,) = ta.JacobianRecursive(_range_of_rows(X), [X], H)
    got = ta.build([dX], [X, H], num_threads=threads)(x, h)
    want = np.zeros_like(x)
    for i in range(n):
        row = x[i]
        for sign, best in ((1.0, np.max(row)), (-1.0, np.min(row))):
            tied = np.isnan(row) if np.isnan(best) else row == best
            want[i] += sign * h[i] * tied / tied.sum()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", [TARGET, "llvm -mcpu=haswell"])
@pytest.mark.parametrize("name", ["cummax_middle", "running_argmax", "box_max"])
def test_a_running_winners_gradient_reaches_hand_work(name, target):
    """A running max along a middle axis, a running argmax (a winner of a custom combiner, its value
    carried beside its index) and a max over a 2-d prefix (running maxes nested): linear passes."""
    (wl,) = [w for w in W.gap_workloads() if w.name == name]
    H = ta.placeholder(wl.output.shape, name="H")
    grads = ta.JacobianRecursive(wl.output, wl.inputs, H)
    assert ta.lower(list(grads), list(wl.inputs) + [H], target=target).work <= wl.hand_work
