"""A max or min whose source no reduction point changes (``max_k X[i]``) is its source: every point
ties, the head split evenly sums back whole, and the gradient is the head routed to the one element,
with no work per reduction point."""

import numpy as np
import pytest

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"


@pytest.mark.parametrize("reduce", [ta.max, ta.min])
def test_gradient_of_max_over_unchanging_source_is_the_routed_head(reduce):
    X = ta.placeholder((3,), "float64", name="X")
    r, s = ta.reduce_axis((-1, 16), "r"), ta.reduce_axis((0, 4), "s")
    q = ta.reduce_axis((-1, 0), "q")  # (one point: what the source reads of it does not change)
    Y = ta.compute((3, 5), lambda i, j: reduce(X[i] * 2.0 + ta.cast("float64", q), axis=[r, s, q]), name="Y")
    H = ta.placeholder((3, 5), "float64", name="H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    x, h = np.array([0.5, -1.0, 2.0]), np.random.default_rng(0).uniform(-1, 1, (3, 5))
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), 2.0 * h.sum(1), rtol=1e-12)
    np.testing.assert_allclose(ta.build(g, [X, H])(x, h), 2.0 * h.sum(1), rtol=1e-12)
    assert ta.lower([g], [X, H], target=TARGET).work <= 3 * 5  # (the head's sum; not 3 * 5 * 68)


def test_max_over_unchanging_source_under_a_condition_on_outputs_only():
    """``where=j < 2`` reads no reduction point: the max is the source where it holds and the
    identity (-inf) elsewhere, whose derivative is zero."""
    X = ta.placeholder((3,), "float64", name="X")
    k = ta.reduce_axis((0, 6), "k")
    Y = ta.compute((3, 4), lambda i, j: ta.max(ta.exp(X[i]), axis=k, where=j < 2), name="Y")
    L = ta.compute((3, 4), lambda i, j: ta.if_then_else(j < 2, Y[i, j], 0.0), name="L")
    H = ta.placeholder((3, 4), "float64", name="H")
    (g,) = ta.JacobianRecursive(L, [X], H)
    x, h = np.array([0.1, 0.7, -0.4]), np.random.default_rng(1).uniform(-1, 1, (3, 4))
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), np.exp(x) * h[:, :2].sum(1), rtol=1e-12)


@pytest.mark.parametrize("reduce", [ta.max, ta.min])
def test_max_over_unchanging_source_whose_where_reads_the_window(reduce, numeric_grad):
    """``where=(k <= i - 1) & (k % 2 == 0)`` reads the window and the source ``X[j]`` does not: the
    max is the source wherever the window has a point (``i >= 1``) and the identity elsewhere.  The
    gradient routed the head through a winner pass and a tie sum per window point (a random
    program: 73 work against a forward of 8); it is the head summed over those rows: 4 * 3."""
    X = ta.placeholder((3,), "float64", name="X")
    k = ta.reduce_axis((0, 6), "k")
    Y = ta.compute((5, 3), lambda i, j: reduce(X[j], axis=[k], where=(k <= i - 1) & (k % 2 == 0)), name="Y")
    H = ta.placeholder((5, 3), "float64", name="H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    x, h = np.array([0.5, -1.0, 2.0]), np.random.default_rng(2).uniform(-1, 1, (5, 3))
    np.testing.assert_allclose(ta.build(g, [X, H])(x, h), h[1:].sum(0), rtol=1e-12)
    # (central differences over the rows whose window has a point: row 0 is the identity, +-inf)
    (want,) = numeric_grad(lambda a: ta.evaluate(Y, {X: a})[1:], [x], head=h[1:])
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), want, rtol=1e-7)
    assert ta.lower([g], [X, H], target=TARGET).work == 4 * 3


def test_max_over_a_source_whose_reads_do_not_change_over_the_window(numeric_grad):
    """``X[(3 * k) % 1, 0]`` reads ``X[0, 0]`` at every point of the window: isl proves the index
    constant, so the source is unchanging and the head is routed to it, summed over the rows whose
    window ``(k + i) % 3 == 1`` has a point (all 3)."""
    X = ta.placeholder((1, 1), "float64", name="X")
    k = ta.reduce_axis((1, 4), "k")
    Y = ta.compute((3,), lambda i: ta.max(X[(k * 3) % 1, 0 - k % 1], axis=[k], where=(k + i) % 3 == 1),
                   name="Y")
    H = ta.placeholder((3,), "float64", name="H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    x, h = np.array([[0.3]]), np.array([0.5, -2.0, 1.25])
    (want,) = numeric_grad(lambda a: ta.evaluate(Y, {X: a}), [x], head=h)
    np.testing.assert_allclose(ta.evaluate(g, {X: x, H: h}), want, rtol=1e-7)
    np.testing.assert_allclose(ta.build(g, [X, H])(x, h), [[h.sum()]], rtol=1e-12)
    assert ta.lower([g], [X, H], target=TARGET).work == 3


def test_min_over_a_broadcast_splits_the_head_over_the_window(numeric_grad):
    """``B[i, a, b] = exp(X[i])`` is one value copied along ``a`` and ``b``: a min over a window of
    ``B`` ties at every point, though each point reads another element of ``B``.  Each point takes
    ``H / count`` (PyTorch's ``amin`` with ties), a sum like the forward's with no winner pass and no
    tie routing per point (a random program: 139 work against a bound of 102)."""
    import torch  # (a test dependency: `make test` installs it; a missing one fails)
    X = ta.placeholder((3,), "float64", name="X")
    B = ta.compute((3, 5, 4), lambda i, a, b: ta.exp(X[i]), name="B")
    r, s = ta.reduce_axis((0, 5), "r"), ta.reduce_axis((0, 4), "s")
    Y = ta.compute((3, 6), lambda i, j: ta.min(B[i, (r + j) % 5, s], axis=[r, s], where=r <= j), name="Y")
    H = ta.placeholder((3, 6), "float64", name="H")
    gx, gb = ta.JacobianRecursive(Y, [X, B], H)
    x, h = np.array([0.5, -1.0, 2.0]), np.random.default_rng(3).uniform(-1, 1, (3, 6))
    (want,) = numeric_grad(lambda a: ta.evaluate(Y, {X: a}), [x], head=h)
    np.testing.assert_allclose(ta.build(gx, [X, H])(x, h), want, rtol=1e-7)
    np.testing.assert_allclose(ta.evaluate(gx, {X: x, H: h}), np.exp(x) * h.sum(1), rtol=1e-12)
    b = torch.exp(torch.tensor(x))[:, None, None].expand(3, 5, 4).clone().requires_grad_(True)
    rows = [[(q + j) % 5 for q in range(min(j + 1, 5))] for j in range(6)]
    torch.stack([b[:, w].amin(dim=(1, 2)) for w in rows], 1).backward(torch.tensor(h))
    np.testing.assert_allclose(ta.build(gb, [X, H])(x, h), b.grad.numpy(), rtol=1e-12, atol=1e-15)
    # the count of each window's points and the routing of H / count each scan 5 x 4 points per row
    # i, as the forward does; B's gradient sums back to X over 5 rows per element
    assert ta.lower([gx], [X, H], target=TARGET).work <= 2 * 3 * 5 * 4 + 3 * 5
