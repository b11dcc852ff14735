"""Running reductions in both directions: ``Y[.., j, ..] = reduce_{k <= j}`` (a prefix) and
``reduce_{k >= j}`` (a suffix) of ``X[.., k, ..]``, for sums, products, max and min, along the last
axis or a middle one.  The direction is read from the structure of the ``where`` (which side of
``k`` the output axis bounds, ``tensorad.poly.nesting.running_order``), never from the operator.

Work is counted on a pinned target against hand-written counts (a forward scan: one combine per
element; the gradient of a sum: one scan of the head; of a max or min: the winner's scan carrying
value and tie count, a suffix scan of the head's shares ``H / T`` over runs of equal values, and the
routing of that scan to the tied points, each linear however many points tie; of a product: three
scans).  Values are
checked against PyTorch (``torch.cummax``/``cummin``/``cumsum``/``cumprod`` on flipped tensors),
NumPy formulas written here (a tie splits the head evenly, ``docs/conventions.md``) and float64
central differences where there are no ties."""

import numpy as np
import pytest
import torch

import tensorad as ta
from tensorad.ir.expr import var
from tensorad.poly.nesting import running_order

AVX512 = "llvm -mcpu=skylake-avx512"
RNG = np.random.default_rng(2026)
REDUCE = {"sum": ta.sum, "prod": ta.prod, "max": ta.max, "min": ta.min}
HAND = {"sum": 1, "prod": 3, "max": 3, "min": 3}  # the gradient's combines per element
LAYOUTS = [((6, 48), 1), ((3, 48, 5), 1)]  # the last axis; a middle axis


IDENTITY = {"sum": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}


def _running(kind, shape, axis, suffix, dtype="float32", guarded=False):
    """``Y = reduce_k X`` along ``axis`` where ``k >= j`` (``suffix``) or ``k <= j``, and
    ``(X, Y, H, dX)``: its gradient ``dX`` for the head ``H``.  ``guarded``: spelled as a user may,
    ``reduce_k if_then_else(k <= j, X, identity)``, with no ``where``."""
    X = ta.placeholder(shape, dtype, "X")
    k = ta.reduce_axis((0, shape[axis]), "k")

    def body(*idx):
        at = list(idx)
        at[axis] = k
        inside = (k >= idx[axis]) if suffix else (k <= idx[axis])
        if guarded:
            return REDUCE[kind](ta.if_then_else(inside, X[tuple(at)], IDENTITY[kind]), axis=k)
        return REDUCE[kind](X[tuple(at)], axis=k, where=inside)

    Y = ta.compute(shape, body, "Y")
    H = ta.placeholder(shape, dtype, "H")
    return X, Y, H, ta.JacobianRecursive(Y, [X], H)[0]


def _torch_running(kind, x, axis, suffix):
    """The running ``kind`` of ``x`` along ``axis`` by PyTorch (flipped for a suffix)."""
    t = torch.from_numpy(x)
    if suffix:
        t = torch.flip(t, [axis])
    out = {"sum": torch.cumsum, "prod": torch.cumprod}[kind](t, axis) if kind in ("sum", "prod") \
        else {"max": torch.cummax, "min": torch.cummin}[kind](t, axis).values
    return (torch.flip(out, [axis]) if suffix else out).numpy()


def _routed(x, h, axis, suffix, better):
    """A running max (``better = np.greater``) or min's gradient: ``H[j]`` split evenly among the
    points of ``j``'s range whose value equals its winner."""
    xs, hs = np.moveaxis(x, axis, -1), np.moveaxis(h, axis, -1)
    out = np.zeros_like(xs)
    n = xs.shape[-1]
    for row in np.ndindex(xs.shape[:-1]):
        for j in range(n):
            span = list(range(j, n)) if suffix else list(range(j + 1))
            best = xs[row][span[0]]
            for k in span[1:]:
                best = xs[row][k] if better(xs[row][k], best) else best
            tied = [k for k in span if xs[row][k] == best]
            for k in tied:
                out[row][k] += hs[row][j] / len(tied)
    return np.moveaxis(out, -1, axis)


def test_the_order_of_a_running_reduction_is_read_from_its_bound():
    """``k <= i``: ordered as it is; ``k >= i``: ordered over the reversed axis; a window: neither."""
    b, i, k = var("b", 0, 4), var("i", 0, 16), var("k", 0, 16)
    assert running_order((b, i), (k,), k <= i, ()) == 1
    assert running_order((b, i), (k,), k >= i, ()) == -1
    assert running_order((b, i), (k,), k <= 15 - i, ()) == 1  # (downwards, in the loop's order)
    assert running_order((b, i), (k,), (k >= i) & (k <= i + 2), ()) is None


@pytest.mark.parametrize("kind", sorted(REDUCE))
@pytest.mark.parametrize("suffix", [False, True], ids=["prefix", "suffix"])
@pytest.mark.parametrize("shape,axis", LAYOUTS)
def test_a_running_reduction_and_its_gradient_are_linear_in_both_directions(kind, suffix, shape, axis):
    X, Y, H, dX = _running(kind, shape, axis, suffix)
    size = int(np.prod(shape))
    assert ta.lower([Y], [X], target=AVX512).work == size
    work = ta.lower([dX], [X, H], target=AVX512).work
    assert work <= 1.25 * HAND[kind] * size, str(ta.lower([dX], [X, H], target=AVX512))


@pytest.mark.parametrize("kind", sorted(REDUCE))
@pytest.mark.parametrize("suffix", [False, True], ids=["prefix", "suffix"])
def test_a_running_reduction_spelled_with_a_guard_of_its_identity_is_the_same_scan(kind, suffix):
    """``reduce_k if_then_else(k <= j, X[k], identity)`` runs as the ``where`` form's scan: it once
    combined the guard's identity over the whole square.  Its gradient is the ``where`` form's scans too;
    a max's or min's counts the guard's infinities among its ties where the result is infinite (as
    ``torch.amax`` of the padded tensor shares the head), which ``tests/simplify/test_scan_forms.py``
    checks against PyTorch."""
    shape, axis = (3, 48, 5), 1
    X, Y, H, dX = _running(kind, shape, axis, suffix, "float64", guarded=True)
    size = int(np.prod(shape))
    assert ta.lower([Y], [X], target=AVX512).work == size
    assert ta.lower([dX], [X, H], target=AVX512).work <= 1.25 * HAND[kind] * size
    x, h = RNG.integers(-3, 4, shape).astype(np.float64), RNG.standard_normal(shape)
    np.testing.assert_allclose(ta.build([Y], [X])(x), _torch_running(kind, x, axis, suffix), rtol=1e-12)
    np.testing.assert_allclose(ta.build([dX], [X, H])(x, h), ta.evaluate([dX], {X: x, H: h})[0],
                               rtol=1e-12, atol=1e-12)


def test_a_guard_keeps_its_data_test_and_may_guard_either_branch():
    """Only the guard's affine index conjuncts become the domain: a data test stays in the value, and
    a guard whose identity is the taken branch keeps the other side (``!c``)."""
    n = 40
    X = ta.placeholder((n,), "float64", "X")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((n,), lambda i: ta.sum(ta.if_then_else((k <= i) & (X[k] > 0), X[k], 0.0), k), "pos")
    k2 = ta.reduce_axis((0, n), "k2")
    Z = ta.compute((n,), lambda i: ta.max(ta.select(k2 > i, float("-inf"), X[k2]), k2), "cummax")
    assert ta.lower([Y], [X], target=AVX512).work <= n * (n + 1) // 2
    assert ta.lower([Z], [X], target=AVX512).work == n
    x = RNG.standard_normal(n)
    y, z = ta.build([Y, Z], [X])(x)
    np.testing.assert_allclose(y, np.cumsum(np.where(x > 0, x, 0.0)), rtol=1e-12)
    np.testing.assert_allclose(z, np.maximum.accumulate(x), rtol=0)


@pytest.mark.parametrize("kind", sorted(REDUCE))
@pytest.mark.parametrize("suffix", [False, True], ids=["prefix", "suffix"])
@pytest.mark.parametrize("shape,axis", LAYOUTS)
def test_a_running_reduction_equals_pytorch_with_ties(kind, suffix, shape, axis):
    X, Y, H, dX = _running(kind, shape, axis, suffix, "float64")
    x = RNG.integers(-3, 4, shape).astype(np.float64)  # ties, and zeros in a product
    if kind == "sum":
        x += RNG.standard_normal(shape)
    got = ta.build([Y], [X])(x)
    np.testing.assert_allclose(got, _torch_running(kind, x, axis, suffix), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind,better", [("max", np.greater), ("min", np.less)])
@pytest.mark.parametrize("suffix", [False, True], ids=["prefix", "suffix"])
@pytest.mark.parametrize("shape,axis", LAYOUTS)
def test_a_running_max_or_min_gradient_splits_ties_in_both_directions(kind, better, suffix, shape, axis):
    X, Y, H, dX = _running(kind, shape, axis, suffix, "float64")
    size = int(np.prod(shape))
    x, h = RNG.integers(-2, 3, shape).astype(np.float64), RNG.standard_normal(shape)
    want = _routed(x, h, axis, suffix, better)
    np.testing.assert_allclose(ta.evaluate([dX], {X: x, H: h})[0], want, rtol=1e-12, atol=1e-12)
    for fastmath in (True, False):
        # the winner's scan is the plain loop's left fold (over the reversed axis for a suffix):
        # exact, so it scans without fast math too; then the shares' scan and the routing
        assert ta.lower([dX], [X, H], target=AVX512, fastmath=fastmath).work <= 3 * size
        got = ta.build([dX], [X, H], fastmath=fastmath)(x, h)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"fastmath={fastmath}")


@pytest.mark.parametrize("kind", sorted(REDUCE))
@pytest.mark.parametrize("suffix", [False, True], ids=["prefix", "suffix"])
def test_a_running_reduction_gradient_without_ties_equals_differences(kind, suffix, numeric_grad):
    shape, axis = (3, 9, 2), 1
    X, Y, H, dX = _running(kind, shape, axis, suffix, "float64")
    x = RNG.permutation(np.arange(1, 55)).reshape(shape) / 10.0  # distinct, nonzero
    h = RNG.standard_normal(shape)
    want = numeric_grad(lambda a: _torch_running(kind, a, axis, suffix), [x], h)[0]
    np.testing.assert_allclose(ta.build([dX], [X, H])(x, h), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_the_gradient_of_a_running_suffix_winner_is_three_scans_of_its_elements(kind):
    """``min_{s >= t} X[b, s]`` at 32 x 128: the winner's downward scan (value and tie count), the
    scan of the head's shares over runs of equal values, and the routing to the tied points, one
    pass each (no sum over the suffix per output, which every point tying would make quadratic)."""
    X, Y, H, dX = _running(kind, (32, 128), 1, True)
    low = ta.lower([dX], [X, H], target=AVX512)
    assert low.work == 3 * 32 * 128, str(low)


@pytest.mark.parametrize("suffix", [False, True], ids=["prefix", "suffix"])
def test_a_running_user_argmax_gradient_goes_to_the_element_its_combiner_chose(suffix):
    """A user's argmax keeps the left operand at a tie: the first in the loop's order wins (the
    smallest index, for a suffix too; its winner is not reduced over the reversed axis)."""
    def combine(a, b):
        return ta.select(a[0] >= b[0], a[0], b[0]), ta.select(a[0] >= b[0], a[1], b[1])

    def identity(t0, t1):
        return ta.const(float("-inf"), t0), ta.const(-1, t1)

    argmax = ta.comm_reducer(combine, identity, "argmax")
    n = 12
    X = ta.placeholder((5, n), "float64", "X")
    k = ta.reduce_axis((0, n), "k")
    v, _ = ta.compute((5, n), lambda b, j: argmax((X[b, k], k), k, where=(k >= j) if suffix else (k <= j)),
                      "am")
    H = ta.placeholder((5, n), "float64", "H")
    dX = ta.JacobianRecursive(v, [X], H)[0]
    x, h = RNG.integers(-3, 3, (5, n)).astype(np.float64), RNG.standard_normal((5, n))
    want = np.zeros_like(x)
    for b in range(5):
        for j in range(n):
            lo = j if suffix else 0
            span = x[b, lo:] if suffix else x[b, :j + 1]
            want[b, lo + int(np.argmax(span))] += h[b, j]
    np.testing.assert_allclose(ta.build([dX], [X, H])(x, h), want, rtol=1e-12, atol=1e-12)
