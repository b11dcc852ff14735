"""The cost model between a running reduction and its quadratic plain loops (the ``scan``
strategy of ``codegen/strategies/plain.py`` against ``loops`` and ``strips``), and the form of
the scan (``codegen/strategies/scan.py``).

A scan along the last axis is a chain per row whose running value stays in a register: one
combine per point.  Where the target transposes rows in registers at a shuffle a vector
(AVX-512's paired permutes), a short row's chains are vectorized across the rows.  Elsewhere
(AVX2) a transpose costs a shuffle per lane: a sum's or a product's one-instruction step runs as
scalar chains, one row after another, while a float max's scalar step (NaN and signed-zero safe:
a branch and several instructions) is vectorized across the rows, at every length.  Either way
the scan costs less than the quadratic loops at every length, forward and gradient.

Work is counted on pinned targets, each count beside its formula; values are checked against
NumPy formulas (``np.cumsum``, ``np.maximum.accumulate``, ``np.cumprod``) and float64 central
differences, with zeros, ties and NaNs in the data, on the host and on AVX2 code.
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.codegen.strategies.scan import row_lanes
from tensorad.codegen.target import parse_target

import tensorad as ta

AVX512 = "llvm -mcpu=skylake-avx512"
HASWELL = "llvm -mcpu=haswell"
REDUCE = {"sum": ta.sum, "max": ta.max, "prod": ta.prod}
ACCUMULATE = {"sum": np.cumsum, "max": np.maximum.accumulate, "prod": np.cumprod}


def _prefix(kind: str, r: int, n: int, dtype: str = "float32", direction: str = "prefix"):
    """``Y[i, j] = reduce_{k <= j} X[i, k]`` (a suffix: ``k >= j``)."""
    X = ta.placeholder((r, n), dtype, "X")
    k = ta.reduce_axis((0, n), "k")
    if direction == "prefix":
        return X, ta.compute((r, n), lambda i, j: REDUCE[kind](X[i, k], k, where=k <= j), name=f"cum{kind}")
    return X, ta.compute((r, n), lambda i, j: REDUCE[kind](X[i, k], k, where=k >= j), name=f"cum{kind}")


def _gradient(kind: str, r: int, n: int, dtype: str = "float32", direction: str = "prefix"):
    X, Y = _prefix(kind, r, n, dtype, direction)
    H = ta.placeholder(Y.shape, dtype, "H")
    return X, H, list(ta.JacobianRecursive(Y, [X], H))


def _accumulate(kind: str, x: np.ndarray, direction: str) -> np.ndarray:
    if direction == "prefix":
        return ACCUMULATE[kind](x, axis=1)
    return np.flip(ACCUMULATE[kind](np.flip(x, 1), axis=1), 1)


def _data(r: int, n: int) -> np.ndarray:
    """Values in [-2, 2] rounded to halves: ties for a running max, and zeros for a product."""
    x = np.round(np.random.default_rng(r * n).uniform(-2, 2, (r, n)) * 2) / 2
    x[:, n // 3] = 0.0
    x[0, 1:3] = x[0, 0]
    return x


@pytest.mark.parametrize("kind", ["sum", "max", "prod"])
@pytest.mark.parametrize("target", [AVX512, HASWELL])
def test_a_long_prefix_reduction_is_scanned(kind, target):
    X, Y = _prefix(kind, 4, 32)
    assert ta.lower([Y], [X], target=target).work == 4 * 32


def _gradient_hand_work(kind: str, r: int, n: int) -> int:
    """The hand-written gradients: a sum's is the suffix sum of the head (``R N``); a max's the
    running winner's scan (value and tie count), the suffix scan of the head's shares ``H / T``
    over runs of equal values and their routing to the tied points (``3 R N``); a product's the
    exclusive running product (``R (N - 1)``), the recurrence of the head on the other side
    (``R N``) and their product (``R N``)."""
    return {"sum": r * n, "max": 3 * r * n, "prod": 3 * r * n - r}[kind]


@pytest.mark.parametrize("target", [AVX512, HASWELL])
@pytest.mark.parametrize("direction", ["prefix", "suffix"])
@pytest.mark.parametrize("kind", ["sum", "max", "prod"])
@pytest.mark.parametrize("n", [4, 8, 16])
def test_short_running_reductions_and_their_gradients_are_linear_on_both_targets(kind, direction, n, target):
    """The forward is one scan (``R N`` updates, not ``R N (N + 1) / 2``), the gradient reaches its
    hand count, on AVX-512 and on AVX2 alike."""
    r = 4
    X, Y = _prefix(kind, r, n, direction=direction)
    assert ta.lower([Y], [X], target=target).work == r * n
    X, H, grads = _gradient(kind, r, n, direction=direction)
    assert ta.lower(grads, [X, H], target=target).work == _gradient_hand_work(kind, r, n)


@pytest.mark.parametrize("rows", [4, 1024])
def test_a_scan_runs_scalar_chains_or_rows_vectorized_by_its_step_and_target(rows):
    """With paired permutes every scan's rows are vectorized; without, a sum's or a product's
    one-instruction step runs as scalar chains and a float max's several-instruction step is
    vectorized across the rows (a vector of rows, at most the rows there are)."""
    avx512, haswell = parse_target(AVX512), parse_target(HASWELL)
    for kind in ("sum", "max", "prod"):
        comb = _prefix(kind, rows, 8)[1].op.body[0].arg.combiner
        assert row_lanes(comb, rows, avx512) == min(16, rows)
        assert row_lanes(comb, rows, haswell) == (min(8, rows) if kind == "max" else 1)
    assert row_lanes(_prefix("max", rows, 8, "int32")[1].op.body[0].arg.combiner, rows, haswell) == 1


@pytest.mark.parametrize("n", [8, 16, 32])
def test_avx2_code_of_a_scan_is_scalar_chains_for_a_sum_and_vectors_of_rows_for_a_max(n):
    """The emitted code follows the choice: no vector register in a cumulative sum's rows,
    vector maxima across the rows of a cumulative max, rows of 16 and 32 too."""
    X, Y = _prefix("sum", 64, n)
    sum_asm = ta.build([Y], [X], target=HASWELL, parallel=False).asm
    assert "vaddss" in sum_asm and "ymm" not in sum_asm
    X, Y = _prefix("max", 64, n)
    assert "vmaxps" in ta.build([Y], [X], target=HASWELL, parallel=False).asm


@pytest.mark.parametrize("target", ["llvm", HASWELL])
@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("n", [4, 8, 16, 32])
@pytest.mark.parametrize("form", ["scan", "loops"])
def test_a_running_max_keeps_nans_and_ties(kind, n, form, target):
    """A NaN stays from its point on; tied values give the value (``np.maximum.accumulate``,
    ``np.minimum.accumulate``, which propagate NaN)."""
    r = 6
    X = ta.placeholder((r, n), "float32", "X")
    k = ta.reduce_axis((0, n), "k")
    red = ta.max if kind == "max" else ta.min
    Y = ta.compute((r, n), lambda i, j: red(X[i, k], k, where=k <= j), name=f"cum{kind}")
    x = _data(r, n).astype(np.float32)
    x[1, n // 2] = np.nan
    x[2, 0] = np.nan
    x[3, n - 1] = np.nan
    x[4] = 1.5  # a row of ties
    got = ta.build([Y], [X], target=target, choices={f"cum{kind}#0": form})(x)
    want = (np.maximum if kind == "max" else np.minimum).accumulate(x, axis=1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", ["llvm", HASWELL])
@pytest.mark.parametrize("reach", [1, 2])
def test_a_running_max_over_six_rows_of_batches_equals_numpy(reach, target):
    """Six rows (two batches of three) held to a vector of four, each point adding ``reach``
    terms (``k <= reach j``), with NaNs and ties."""
    X = ta.placeholder((2, 3, 10), "float32", "X")
    k = ta.reduce_axis((0, 10), "k")
    Y = ta.compute((2, 3, 10), lambda b, i, j: ta.max(X[b, i, k], k, where=k <= reach * j), name="Y")
    x = np.round(np.random.default_rng(reach).uniform(-2, 2, (2, 3, 10)) * 2).astype(np.float32) / 2
    x[0, 1, 4] = np.nan
    x[1, 2, 0] = np.nan
    got = ta.build([Y], [X], target=target)(x)
    want = np.stack([np.maximum.reduce(x[..., :min(reach * j, 9) + 1], axis=-1) for j in range(10)], -1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["sum", "max", "prod"])
@pytest.mark.parametrize("form", ["scan", "loops", "strips"])
@pytest.mark.parametrize("n", [4, 8, 16, 20])
def test_each_form_of_a_prefix_reduction_equals_numpy(kind, form, n):
    X, Y = _prefix(kind, 3, n, "float64")
    x = _data(3, n)
    got = ta.build([Y], [X], choices={f"cum{kind}#0": form})(x)
    np.testing.assert_allclose(got, ACCUMULATE[kind](x, axis=1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("direction", ["prefix", "suffix"])
@pytest.mark.parametrize("kind", ["sum", "max", "prod"])
@pytest.mark.parametrize("n", [4, 8, 16])
def test_avx2_scans_equal_numpy(kind, n, direction):
    """The scalar chains (a sum, a product) and the rows vectorized (a max) of AVX2 code."""
    X, Y = _prefix(kind, 9, n, "float64", direction)
    x = _data(9, n)
    got = ta.build([Y], [X], target=HASWELL)(x)
    np.testing.assert_allclose(got, _accumulate(kind, x, direction), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", [AVX512, HASWELL])
def test_the_running_winner_of_a_cummax_gradient_is_scanned(target):
    """The winner's scan (value and tie count), the scan of the head's shares and their routing to
    the tied points: three passes, whatever ties."""
    X, H, grads = _gradient("max", 4, 16)
    assert ta.lower(grads, [X, H], target=target).work == 3 * 4 * 16


@pytest.mark.parametrize("target", ["llvm", HASWELL])
@pytest.mark.parametrize("direction", ["prefix", "suffix"])
@pytest.mark.parametrize("kind", ["sum", "prod"])
@pytest.mark.parametrize("n", [4, 8, 16, 32])
def test_prefix_sum_and_product_gradients_equal_differences(kind, n, direction, target, numeric_grad):
    X, H, grads = _gradient(kind, 3, n, "float64", direction)
    x, h = _data(3, n), np.random.default_rng(n).normal(size=(3, n))
    want = numeric_grad(lambda a: _accumulate(kind, a, direction), [x], h)[0]
    np.testing.assert_allclose(ta.build(grads, [X, H], target=target)(x, h), want, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("kind", ["sum", "max", "prod"])
@pytest.mark.parametrize("target", [AVX512, HASWELL])
def test_a_prefix_gradient_over_rows_of_four_is_linear(kind, target):
    """Within 1.25x of the hand count: the forward scan and the suffix scans, ``R * N`` each (two
    for a sum, three for a max, four for a product).  A running max routes each head's shares to
    the tied points by a scan over runs of equal values, not by a test of every point of the row
    per output."""
    X, H, grads = _gradient(kind, 4, 4)
    passes = {"sum": 2, "max": 3, "prod": 4}[kind]
    assert ta.lower(grads, [X, H], target=target).work <= 1.25 * passes * 4 * 4


@pytest.mark.parametrize("target", ["llvm", HASWELL])
@pytest.mark.parametrize("n", [4, 8, 16, 32])
def test_a_running_max_gradient_splits_ties(n, target):
    X, H, grads = _gradient("max", 3, n, "float64")
    x, h = _data(3, n), np.random.default_rng(n).normal(size=(3, n))
    want = np.zeros_like(h)
    for i in range(3):
        for j in range(n):
            tied = x[i, :j + 1] == x[i, :j + 1].max()
            want[i, :j + 1] += np.where(tied, h[i, j] / tied.sum(), 0.0)
    np.testing.assert_allclose(ta.build(grads, [X, H], target=target)(x, h), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", [AVX512, HASWELL])
@pytest.mark.parametrize("n", [8, 16])
def test_a_short_prefix_product_gradient_scans_in_order(target, n):
    """The gradient's exclusive product and recurrence combine in order (custom combiners):
    their strips are not vectorized either, so both scan: two scans and the product."""
    X, H, grads = _gradient("prod", 4, n)
    assert ta.lower(grads, [X, H], target=target).work == 3 * 4 * n - 4


@pytest.mark.parametrize("target", [AVX512, HASWELL])
def test_a_reduction_over_one_point_is_no_loop(target):
    """A reduction axis of one point costs no short loop: the max over it is computed in its
    reader's loop (one body run per output), not scanned along the output and read back."""
    x = ta.placeholder((), "float64", "x")
    r = ta.reduce_axis((0, 1), "r")
    m = ta.compute((4,), lambda i: ta.max(ta.exp(ta.minimum(x[()], 3.0)), axis=r), name="m")
    y = ta.compute((4,), lambda i: m[i] * 0.5 + ta.cast("float64", i), name="y")
    assert ta.lower([y], [x], target=target).work == 4
