"""Running reductions (codegen/strategies/scan.py, the ``scan`` strategy): a reduction whose ``where``
nests along an output axis -- a prefix sum ``k <= j``, its adjoint the suffix sum ``k >= j``,
offsets and other bounds -- carries its value along that axis: linear work, not quadratic.
Oracles: NumPy's cumsum / maximum.accumulate and sums written out here."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorad as ta

RNG = np.random.default_rng(16)


def _scan(shape, axis, dtype="float32", where=lambda k, j: k <= j, reduce=ta.sum, name="Y"):
    """``Y[.., j, ..] = reduce_k X[.., k, ..] where where(k, j)`` along ``axis``."""
    X = ta.placeholder(shape, dtype, "X")
    k = ta.reduce_axis((0, shape[axis]), "k")

    def body(*idx):
        at = list(idx)
        at[axis] = k
        return reduce(X[tuple(at)], axis=k, where=where(k, idx[axis]))

    return X, ta.compute(shape, body, name)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,axis", [((37, 5, 6), 0), ((3, 29, 7), 1), ((4, 3, 53), 2), ((61,), 0)])
def test_cumsum_and_its_gradient_equal_numpy(shape, axis, dtype):
    X, Y = _scan(shape, axis, dtype)
    H = ta.placeholder(shape, dtype, "H")
    dX = ta.JacobianRecursive(Y, [X], H)[0]
    n = int(np.prod(shape))
    forward, backward = ta.lower([Y], [X]), ta.lower([dX], [H])
    assert forward.work == n and backward.work == n, (str(forward), str(backward))  # not n * extent / 2
    x, h = RNG.uniform(-1, 1, shape).astype(dtype), RNG.uniform(-1, 1, shape).astype(dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ta.build([Y], [X])(x), np.cumsum(x.astype(np.float64), axis), **tol)
    suffix = np.flip(np.cumsum(np.flip(h.astype(np.float64), axis), axis), axis)
    np.testing.assert_allclose(ta.build([dX], [H], checked=True)(h), suffix, **tol)


def test_strict_prefix_sum_is_sequential_and_the_suffix_keeps_its_loops():
    # fastmath=False: a prefix sum adds in the plain loop's order (np.cumsum's, bit for bit);
    # a suffix sum scanned downwards would add in the reversed order, so it stays quadratic
    X, Y = _scan((5, 300), 1)
    x = RNG.standard_normal((5, 300)).astype(np.float32)
    assert ta.lower([Y], [X], fastmath=False).work == 5 * 300
    np.testing.assert_array_equal(ta.build([Y], [X], fastmath=False)(x), np.cumsum(x, 1))
    Xs, S = _scan((5, 300), 1, where=lambda k, j: k >= j)
    assert ta.lower([S], [Xs], fastmath=False).work == 5 * 300 * 301 // 2


def test_running_max_and_min():
    for reduce, accumulate in ((ta.max, np.maximum.accumulate), (ta.min, np.minimum.accumulate)):
        X, Y = _scan((6, 45), 1, reduce=reduce)
        assert ta.lower([Y], [X]).work == 6 * 45
        x = RNG.standard_normal((6, 45)).astype(np.float32)
        np.testing.assert_array_equal(ta.build([Y], [X])(x), accumulate(x, 1))


def test_a_sliding_window_is_not_a_scan():
    # k in [j - 2, j]: the sets do not nest (a term leaves as one enters): plain loops
    X, Y = _scan((4, 20), 1, where=lambda k, j: (k <= j) & (k >= j - 2))
    assert "scanned" not in str(ta.lower([Y], [X]))
    x = RNG.standard_normal((4, 20)).astype(np.float32)
    c = np.cumsum(np.pad(x, ((0, 0), (3, 0))), 1)
    np.testing.assert_allclose(ta.build([Y], [X])(x), c[:, 3:] - c[:, :-3], rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 23), rows=st.integers(1, 4), c=st.integers(-25, 25), lo=st.integers(0, 6),
       kind=st.sampled_from(["<=", "<", ">=", ">"]), axis=st.sampled_from([0, 1]))
def test_random_bounds_and_offsets(n, rows, c, lo, kind, axis):
    """``Y[j] = sum_k X[k]`` over ``lo <= k`` and ``k (op) j + c``, equal the sum written out
    here; scanned (when the sets nest) in at most one update per term plus one per point."""
    op = {"<=": lambda a, b: a <= b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b,
          ">": lambda a, b: a > b}[kind]
    shape = (n, rows) if axis == 0 else (rows, n)
    X, Y = _scan(shape, axis, "float64", where=lambda k, j: (k >= lo) & op(k, j + c))
    lowered = ta.lower([Y], [X])
    x = RNG.standard_normal(shape)
    xs = np.moveaxis(x, axis, 0)
    want = np.zeros_like(xs)
    for j in range(n):
        for k in range(lo, n):
            if op(k, j + c):
                want[j] += xs[k]
    np.testing.assert_allclose(ta.build([Y], [X])(x), np.moveaxis(want, 0, axis), rtol=1e-12, atol=1e-12)
    if "scanned" in str(lowered):
        assert lowered.work <= rows * n


def test_a_running_max_down_the_first_axis_under_a_second_bound():
    # R[i, j] = max_{i <= k <= j} A[k, j]: the sets nest downwards along i (k <= j stays a bound)
    A = ta.placeholder((9, 9), "float32", "A")
    k = ta.reduce_axis((0, 9), "k")
    R = ta.compute((9, 9), lambda i, j: ta.max(A[k, j], k, where=(k >= i) & (k <= j)), name="R")
    lowered = ta.lower([R], [A])
    assert "scanned along i downwards" in str(lowered) and lowered.work == 45, str(lowered)
    a = RNG.standard_normal((9, 9)).astype(np.float32)
    want = np.array([[a[i:j + 1, j].max() if i <= j else -np.inf for j in range(9)] for i in range(9)])
    np.testing.assert_array_equal(ta.build([R], [A], checked=True)(a), want.astype(np.float32))


def test_a_value_no_kept_value_reads_is_not_carried():
    """A recurrence ``s[j] = a[j] s[j - 1] + b[j]`` written as the composition of the maps
    ``s -> a s + b`` (a pair: the product of the ``a``, the sum): only the sum is kept, and
    its combine reads no running product, so the scan carries the sum alone -- one update per
    point -- where a scan needing both values would have no buffer for the product.  Oracle:
    the recurrence written out in NumPy."""
    r, n = 3, 40
    compose = ta.comm_reducer(lambda x, y: (x[0] * y[0], y[0] * x[1] + y[1]),
                              lambda da, db: (ta.const(1, da), ta.const(0, db)), name="affine")
    A, B = ta.placeholder((r, n), "float64", "A"), ta.placeholder((r, n), "float64", "B")
    k = ta.reduce_axis((0, n), "k")
    _, S = ta.compute((r, n), lambda i, j: compose((A[i, k], B[i, k]), k, where=k <= j), name="S")
    assert ta.lower([S], [A, B]).work == r * n

    a, b = RNG.uniform(-1, 1, (2, r, n))
    want, s = np.empty((r, n)), np.zeros(r)
    for j in range(n):
        s = a[:, j] * s + b[:, j]
        want[:, j] = s
    np.testing.assert_allclose(ta.build([S], [A, B])(a, b), want, rtol=1e-12, atol=1e-12)


def test_a_kept_index_carries_the_value_its_combine_compares():
    """A running argmax ``(index, value)`` whose index alone is kept: the index's combine
    compares the running values, so the value is carried too, and with no buffer for it the
    reduction keeps its plain loops.  Oracle: NumPy's argmax of each prefix."""
    r, n = 3, 24

    def combine(x, y):
        keep = x[1] >= y[1]
        return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])

    argmax = ta.comm_reducer(combine, lambda di, dv: (ta.const(-1, di), ta.min_value(dv)), name="argmax")
    X = ta.placeholder((r, n), "float64", "X")
    k = ta.reduce_axis((0, n), "k")
    index, _ = ta.compute((r, n), lambda i, j: argmax((k, X[i, k]), k, where=k <= j), name="A")
    x = RNG.normal(size=(r, n))
    want = np.array([[np.argmax(row[:j + 1]) for j in range(n)] for row in x])
    np.testing.assert_array_equal(ta.build([index], [X])(x), want)
