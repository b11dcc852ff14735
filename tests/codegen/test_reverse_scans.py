"""Gradients of running reductions (prefix scans written as ``where k <= i`` reductions) cost
linear work, as their forwards do.

* a cumulative sum's adjoint is the suffix sum ``dX[k] = sum_{i >= k} H[i]``, scanned
  downwards (:mod:`codegen.strategies.scan`);
* a cumulative max or min routes each ``H[i]`` to the winner of the prefix ``i`` (split
  evenly among ties): the winner reduction carrying ``(value, ties)`` is scanned upwards in the
  plain loop's order (``tensorad.poly.nesting``), the shares ``H / T`` are scanned downwards over
  runs of equal values, and each tied point reads its run's sum.

Each work figure is checked against a hand-written count, written beside its formula; values
against NumPy oracles written here and against ``ta.evaluate``."""

import numpy as np
import pytest

import tensorad as ta

RNG = np.random.default_rng(45)
B, N, C = 3, 40, 5


def _running(reduce, shape, axis):
    """``Y[.., i, ..] = reduce_{k <= i} X[.., k, ..]`` along ``axis``, its gradient ``dX`` for
    the head ``H``."""
    X = ta.placeholder(shape, "float64", "X")
    k = ta.reduce_axis((0, shape[axis]), "k")

    def body(*idx):
        at = list(idx)
        at[axis] = k
        return reduce(X[tuple(at)], axis=k, where=k <= idx[axis])

    Y = ta.compute(shape, body, "Y")
    H = ta.placeholder(shape, "float64", "H")
    return X, Y, H, ta.JacobianRecursive(Y, [X], H)[0]


def _suffix_sums(h, axis):
    return np.flip(np.cumsum(np.flip(h, axis), axis), axis)


def _routed(x, h, axis, better):
    """The gradient of a running max (``better = np.greater``) or min along ``axis``: ``H[i]``
    split evenly among the ``k <= i`` whose value equals the prefix's winner."""
    xs, hs = np.moveaxis(x, axis, -1), np.moveaxis(h, axis, -1)
    out = np.zeros_like(xs)
    for row in np.ndindex(xs.shape[:-1]):
        for i in range(xs.shape[-1]):
            best = xs[row][0]
            for k in range(1, i + 1):
                best = xs[row][k] if better(xs[row][k], best) else best
            tied = [k for k in range(i + 1) if xs[row][k] == best]
            for k in tied:
                out[row][k] += hs[row][i] / len(tied)
    return np.moveaxis(out, -1, axis)


SHAPES = [((B, N), 1), ((B, N, C), 1)]  # the last axis of (B, n); a middle axis of (B, n, C)


@pytest.mark.parametrize("shape,axis", SHAPES)
def test_cumulative_sum_gradient_is_a_suffix_scan(shape, axis):
    X, Y, H, dX = _running(ta.sum, shape, axis)
    size = int(np.prod(shape))
    # hand-written: one add per element, carried from the last index down (sum_{i>=k} H[i])
    hand = size
    assert ta.lower([Y], [X]).work == size
    assert ta.lower([dX], [H]).work <= hand, str(ta.lower([dX], [H]))
    h = RNG.standard_normal(shape)
    got = ta.build([dX], [H], checked=True)(h)
    np.testing.assert_allclose(got, _suffix_sums(h, axis), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, ta.evaluate([dX], {H: h})[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,reduce,better", [("max", ta.max, np.greater), ("min", ta.min, np.less)])
@pytest.mark.parametrize("shape,axis", SHAPES)
@pytest.mark.parametrize("ties", [False, True])
def test_cumulative_max_and_min_gradients_are_linear(name, reduce, better, shape, axis, ties):
    X, Y, H, dX = _running(reduce, shape, axis)
    size = int(np.prod(shape))
    # hand-written: one pass carrying (winner value, its tie count) along the axis, one suffix
    # scan of the shares H[i] / T[i] over runs of equal values, one read of it per tied point: 3
    # per element, whatever ties (routing each output's ties over its prefix would be
    # sum_i (i + 1) per row: n^2 / 2)
    hand = 3 * size
    assert ta.lower([Y], [X]).work == size
    work = ta.lower([dX], [X, H]).work
    assert work <= hand, str(ta.lower([dX], [X, H]))
    x = RNG.integers(-3, 4, shape).astype(np.float64) if ties else RNG.standard_normal(shape)
    h = RNG.standard_normal(shape)
    got = ta.build([dX], [X, H], checked=True)(x, h)
    np.testing.assert_allclose(got, _routed(x, h, axis, better), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, ta.evaluate([dX], {X: x, H: h})[0], rtol=1e-12, atol=1e-12)


def test_cumulative_max_gradient_matches_finite_differences():
    X, Y, H, dX = _running(ta.max, (2, 17), 1)
    x, h = RNG.standard_normal((2, 17)), RNG.standard_normal((2, 17))
    forward = ta.build([Y], [X])
    got = ta.build([dX], [X, H])(x, h)
    eps = 1e-6
    for at in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[at] += eps
        down[at] -= eps
        fd = np.sum(h * (forward(up) - forward(down))) / (2 * eps)
        assert abs(got[at] - fd) < 1e-6


def test_the_running_winner_scans_in_the_plain_order_without_fast_math():
    # (v, k, ties) is a combiner of three values: scanned only as the plain loop's left fold,
    # so fastmath=False scans it too
    X, Y, H, dX = _running(ta.max, (4, 30), 1)
    x, h = RNG.integers(-2, 3, (4, 30)).astype(np.float64), RNG.standard_normal((4, 30))
    strict = ta.lower([dX], [X, H], fastmath=False)
    assert "scanned along" in str(strict) and strict.work <= 3 * 4 * 30, str(strict)
    got = ta.build([dX], [X, H], fastmath=False)(x, h)
    np.testing.assert_allclose(got, _routed(x, h, 1, np.greater), rtol=1e-12, atol=1e-12)
