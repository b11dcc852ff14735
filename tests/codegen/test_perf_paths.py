"""The fast paths of code generation, each checked against ta.evaluate (or NumPy) and for work.

* speculation: ``if_then_else`` on a data test becomes a ``select`` (no branch), an affine
  padding guard stays lazy;
* digit splitting (stripmine): axes read through ``//`` and ``%`` are scanned as digits, also
  when the extent is not a multiple of the divisor;
* nest fusion (group/nestfuse): row-wise chains (softmax) and pooling windows (max-pool
  gradient) share their loops, reductions read at the prefix point become accumulators;
* the flattened winner index of max/min gradients, with ties to the first winner;
* math: the inline ``exp`` at the edges of its range, NaN-propagating ``maximum`` reductions,
  divisions by a loop-invariant value.

Odd sizes, 1 and 2 threads (``parallel_min_work=0`` forces the parallel loop).
"""

import numpy as np
import pytest
from tensorad.codegen.program import Nest

import tensorad as ta

RNG = np.random.default_rng(7)
THREADS = [{"num_threads": 1}, {"num_threads": 2, "parallel_min_work": 0}]


def _nests(lowered):
    return [s for s in lowered.program.steps if isinstance(s, Nest)]


def _check(outputs, inputs, arrays, opts, rtol=1e-5):
    kern = ta.build(outputs, inputs, **opts)
    got = kern(*arrays)
    got = got if isinstance(got, tuple) else (got,)
    want = ta.evaluate(outputs, dict(zip(inputs, arrays)))
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)
    return kern


# ---- speculation ------------------------------------------------------------------------------

@pytest.mark.parametrize("opts", THREADS)
def test_data_dependent_if_then_else_becomes_select(opts):
    A = ta.placeholder((7, 9), "float32", "A")
    idx = ta.placeholder((7,), "int32", "idx")
    # (a comparison that pins no axis: ``idx[i] == j`` is a scatter, one store per row)
    Y = ta.compute((7, 9), lambda i, j: ta.if_then_else(idx[i] < j, A[i, j] * 2.0, 0.0), "Y")
    text = str(ta.lower([Y], [A, idx]))
    assert "select(" in text and "if_then_else" not in text
    _check([Y], [A, idx], [RNG.standard_normal((7, 9)).astype(np.float32),
                            RNG.integers(0, 9, 7).astype(np.int32)], opts)


@pytest.mark.parametrize("opts", THREADS)
def test_a_choice_that_pins_an_axis_to_data_is_one_store_per_row(opts):
    """``if_then_else(idx[i] == j, f, 0)`` fills zeros, then stores ``f`` once per row (an index out of
    range stores nothing), against NumPy."""
    A = ta.placeholder((7, 9), "float32", "A")
    idx = ta.placeholder((7,), "int32", "idx")
    Y = ta.compute((7, 9), lambda i, j: ta.if_then_else(idx[i] == j, A[i, j] * 2.0, 0.0), "Y")
    assert ta.lower([Y], [A, idx]).work == 7
    a, at = RNG.standard_normal((7, 9)).astype(np.float32), np.array([0, 8, 3, -1, 9, 4, 4], np.int32)
    want = np.where(at[:, None] == np.arange(9)[None, :], a * 2, 0).astype(np.float32)
    np.testing.assert_array_equal(ta.build([Y], [A, idx], **opts)(a, at), want)


def test_padding_guard_stays_lazy():
    X = ta.placeholder((6,), "float32", "X")
    Y = ta.compute((8,), lambda i: ta.if_then_else((i >= 1) & (i <= 6), X[i - 1], 0.0), "Y")
    lowered = ta.lower([Y], [X])
    assert "select(" not in str(lowered)
    x = RNG.standard_normal(6).astype(np.float32)
    np.testing.assert_array_equal(ta.build([Y], [X])(x), np.concatenate([[0], x, [0]]))


def test_data_test_around_an_expensive_branch_stays_lazy():
    A = ta.placeholder((5,), "float32", "A")
    Y = ta.compute((5,), lambda i: ta.if_then_else(A[i] > 0.0, ta.log(A[i]), 0.0), "Y")
    assert "if_then_else" in str(ta.lower([Y], [A]))


# ---- digit splitting ----------------------------------------------------------------------------

@pytest.mark.parametrize("opts", THREADS)
@pytest.mark.parametrize("h,w", [(8, 10), (7, 9)])
def test_upsampling_gather_is_scanned_by_digits(h, w, opts):
    H = ta.placeholder(((h + 1) // 2, (w + 1) // 2), "float32", "H")
    G = ta.compute((h, w), lambda y, x: H[y // 2, x // 2] * 0.25, "G")
    lowered = ta.lower([G], [H])
    text = str(lowered)
    assert "(x // 2)" not in text and "x.r0 in range(0, 2)" in text, text
    assert lowered.work == h * w
    _check([G], [H], [RNG.standard_normal(H.shape).astype(np.float32)], opts)


@pytest.mark.parametrize("opts", THREADS)
def test_flatten_chain_of_divisors_becomes_a_plain_copy(opts):
    X = ta.placeholder((3, 4, 5, 6), "float32", "X")
    Y = ta.topi.nn.flatten(X)
    text = str(ta.lower([Y], [X]))
    assert "(ax1 // " not in text and "ax1.r1, ax1.r0]" in text, text  # X read at plain digits
    x = RNG.standard_normal(X.shape).astype(np.float32)
    np.testing.assert_array_equal(ta.build([Y], [X], **opts)(x), x.reshape(3, -1))


def test_divisors_that_are_not_a_chain_are_left_alone():
    X = ta.placeholder((2, 3), "float32", "X")
    Y = ta.compute((12,), lambda i: X[i // 6, i % 3], "Y")  # 3 does not divide... 6 does; 6 % 3
    Z = ta.compute((12,), lambda i: X[(i // 4) % 2, i % 3], "Z")  # 4 and 3: no chain
    text = str(ta.lower([Z], [X]))
    assert "//" in text
    _check([Y, Z], [X], [RNG.standard_normal((2, 3)).astype(np.float32)], {})


# ---- nest fusion ----------------------------------------------------------------------------------

@pytest.mark.parametrize("opts", THREADS)
@pytest.mark.parametrize("shape", [(5, 7), (3, 33)])
def test_softmax_rows_run_in_one_nest(shape, opts):
    X = ta.placeholder(shape, "float32", "X")
    Y = ta.topi.nn.softmax(X)
    lowered = ta.lower([Y], [X])
    nests = _nests(lowered)
    assert len(nests) == 1 and "fused over" in nests[0].note
    assert [t[0] for t in lowered.temporaries] == ["softmax.exp"]  # max and sum: accumulators
    assert lowered.work == 4 * shape[0] * shape[1]
    _check([Y], [X], [RNG.standard_normal(shape).astype(np.float32)], opts)


@pytest.mark.parametrize("opts", THREADS)
def test_softmax_gradient_rows_run_in_one_nest(opts):
    X = ta.placeholder((4, 11), "float64", "X")
    Y = ta.topi.nn.softmax(X)
    H = ta.placeholder(Y.shape, "float64", "H")
    g = ta.gradient(Y, [X], H)
    lowered = ta.lower(g, [X, H])
    assert len(_nests(lowered)) == 1
    assert lowered.work == ta.lower(g, [X, H], fuse=False).work
    _check(g, [X, H], [RNG.standard_normal((4, 11)), RNG.standard_normal((4, 11))], opts, 1e-10)


@pytest.mark.parametrize("opts", THREADS)
def test_attention_gradient_reads_the_stored_exp_instead_of_computing_it_again(opts):
    # the softmax gradient (dP / s - c) * exp(z - m) contains the exp its program stores for
    # the row sums and V's gradient: it reads it there (one exp per element, not two)
    Q, K, V = (ta.placeholder((2, 9, 5), "float64", n) for n in "QKV")
    Y = ta.topi.nn.scaled_dot_product_attention(Q, K, V)
    H = ta.placeholder(Y.shape, "float64", "H")
    g = ta.gradient(Y, [Q, K, V], H)
    text = str(ta.lower(g, [Q, K, V, H]))
    assert text.count("exp(") == 1, text
    _check(g, [Q, K, V, H], [RNG.standard_normal(t.shape) for t in (Q, K, V, H)], opts, 1e-10)


def test_stored_value_is_not_read_where_it_has_no_element():
    # T = exp(X[i]) has 5 elements, R computes exp(X[i]) for 8: R keeps its own exp
    X = ta.placeholder((8,), "float64", "X")
    T = ta.compute((5,), lambda i: ta.exp(X[i]), "T")
    R = ta.compute((8,), lambda i: ta.exp(X[i]) * 2.0, "R")
    S = ta.compute((5,), lambda i: ta.exp(X[i]) + T[i], "S")
    lowered = ta.lower([T, R, S], [X])
    assert str(lowered).count("exp(") == 2  # T's and R's; S reads T
    x = RNG.standard_normal(8)
    t, r, s = ta.build([T, R, S], [X])(x)
    np.testing.assert_allclose(t, np.exp(x[:5]))
    np.testing.assert_allclose(r, 2 * np.exp(x))
    np.testing.assert_allclose(s, 2 * np.exp(x[:5]))


@pytest.mark.parametrize("opts", THREADS)
@pytest.mark.parametrize("hw", [(8, 8), (9, 7)])
def test_max_pool_gradient_scatters_from_each_winner(hw, opts):
    X = ta.placeholder((2, 3) + hw, "float32", "X")
    Y = ta.topi.nn.pool(X, [2, 2], [2, 2], [0, 0, 0, 0], "max")
    H = ta.placeholder(Y.shape, "float32", "H")
    g = ta.gradient(Y, [X], H)
    lowered = ta.lower(g, [X, H])
    # one pass over each window giving its maximum and a code of the points equal to it, which
    # the same nest turns into where the head lands (stored: the maxima and the destinations),
    # then one add at the destination and one test for ties per window, in one pass, whose
    # routing of a tied window's share to its 4 points counts as taken (the worst case)
    assert sorted(s for _, s, _ in lowered.temporaries) == [Y.shape] * 2
    windows = 2 * 3 * (hw[0] // 2) * (hw[1] // 2)
    assert lowered.work == 4 * windows + windows + windows + 4 * windows
    x = RNG.standard_normal(X.shape).astype(np.float32)
    _check(g, [X, H], [x, RNG.standard_normal(H.shape).astype(np.float32)], opts)


def test_fused_nest_keeps_a_buffer_read_outside_the_group():
    X = ta.placeholder((6, 10), "float32", "X")
    k = ta.reduce_axis((0, 10), "k")
    M = ta.compute((6,), lambda i: ta.max(X[i, k], k), "M")
    E = ta.compute((6, 10), lambda i, j: X[i, j] - M[i], "E")
    Z = ta.compute((10,), lambda j: E[0, j] + M[5], "Z")  # reads M at another row
    lowered = ta.lower([E, Z], [X])
    assert "M" in [t[0] for t in lowered.temporaries]
    _check([E, Z], [X], [RNG.standard_normal((6, 10)).astype(np.float32)], {})


def test_misaligned_reader_is_not_fused():
    X = ta.placeholder((6, 10), "float32", "X")
    k = ta.reduce_axis((0, 10), "k")
    S = ta.compute((6,), lambda i: ta.sum(X[i, k], k), "S")
    Y = ta.compute((5, 10), lambda i, j: X[i, j] * S[i + 1], "Y")  # the next row: not yet computed
    lowered = ta.lower([Y], [X])
    assert len(_nests(lowered)) == 2
    _check([Y], [X], [RNG.standard_normal((6, 10)).astype(np.float32)], {})


def test_fused_members_side_by_side_count_their_own_work():
    # two reductions over one point each: both updates run beside each other in the prefix
    # loop, and work counts one body execution for each
    X = ta.placeholder((5, 1), "float32", "X")
    k = ta.reduce_axis((0, 1), "k")
    A = ta.compute((5,), lambda i: ta.sum(X[i, k], k), "A")
    k2 = ta.reduce_axis((0, 1), "k2")
    B = ta.compute((5,), lambda i: ta.max(X[i, k2] * A[i], k2), "B")
    lowered = ta.lower([B], [X])
    assert lowered.work == 10
    _check([B], [X], [RNG.standard_normal((5, 1)).astype(np.float32)], {})


# ---- winners ---------------------------------------------------------------------------------------

def test_max_gradient_ties_share_the_window_evenly():
    X = ta.placeholder((1, 1, 4, 6), "float32", "X")
    Y = ta.topi.nn.pool(X, [2, 3], [2, 3], [0, 0, 0, 0], "max")
    H = ta.placeholder(Y.shape, "float32", "H")
    g = ta.gradient(Y, [X], H)
    x = np.zeros(X.shape, np.float32)
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = 5.0  # a tie inside the first window: half each
    h = np.ones(H.shape, np.float32)
    got = ta.build(g, [X, H])(x, h)
    want = np.full(X.shape, 1.0 / 6.0, np.float32)  # all-zero windows: a sixth to each point
    want[0, 0, :2, :3] = 0.0
    want[0, 0, 1, 1] = want[0, 0, 1, 2] = 0.5
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---- math ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_exp_at_the_edges_of_its_range(dtype):
    info = np.finfo(dtype)
    edge = float(np.log(info.max))
    tiny = float(np.log(info.smallest_subnormal))
    x = np.array([-np.inf, np.inf, np.nan, 0.0, -0.0, 1.0, edge * 0.999, edge * 1.001, tiny * 1.01,
                  tiny * 0.99, -745.5, 89.5, -120.0] + list(np.linspace(-80, 80, 37)), dtype)
    X = ta.placeholder(x.shape, dtype, "X")
    got = ta.build([ta.compute(x.shape, lambda i: ta.exp(X[i]), "E")], [X])(x)
    with np.errstate(over="ignore", under="ignore"):
        want = np.exp(x)
    normal = np.abs(want) >= info.tiny
    np.testing.assert_allclose(got[normal], want[normal], rtol=4 * info.eps)
    sub = np.isfinite(want) & ~normal  # subnormal results: within one unit of the last place
    assert np.all(np.abs(got[sub] - want[sub]) <= info.smallest_subnormal)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))


def test_max_reduction_propagates_nan():
    X = ta.placeholder((3, 40), "float32", "X")
    k = ta.reduce_axis((0, 40), "k")
    M = ta.compute((3,), lambda i: ta.max(X[i, k], k), "M")
    x = RNG.standard_normal((3, 40)).astype(np.float32)
    x[1, 17] = np.nan
    got = ta.build([M], [X])(x)
    assert np.isnan(got[1]) and np.array_equal(got[[0, 2]], x[[0, 2]].max(axis=1))


def test_division_by_a_loop_invariant_value():
    X = ta.placeholder((4, 50), "float64", "X")
    S = ta.placeholder((4,), "float64", "S")
    Y = ta.compute((4, 50), lambda i, j: X[i, j] / S[i], "Y")
    x, s = RNG.standard_normal((4, 50)), RNG.uniform(0.5, 3.0, 4)
    np.testing.assert_allclose(ta.build([Y], [X, S])(x, s), x / s[:, None], rtol=4e-16)
    exact = ta.build([Y], [X, S], fastmath=False)(x, s)
    np.testing.assert_array_equal(exact, x / s[:, None])


# ---- contractions: padded copies, split sums ----------------------------------------------------

@pytest.mark.parametrize("opts", THREADS)
def test_convolution_input_gradient_reads_a_padded_copy(opts):
    X = ta.placeholder((2, 16, 21, 20), "float32", "X")
    W = ta.placeholder((9, 16, 3, 2), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, 1, 0)
    H = ta.placeholder(Y.shape, "float32", "H")
    g = list(ta.gradient(Y, [X, W], H))
    lowered = ta.lower(g, [X, W, H], microkernel=True)
    assert ("H.padded", (2, 9, 23, 21), "float32") in lowered.temporaries  # (not above X's size)



@pytest.mark.parametrize("opts", THREADS)
def test_padded_copy_larger_than_every_argument_is_made_per_batch_chunk(opts):
    X = ta.placeholder((5, 12, 21, 20), "float32", "X")
    W = ta.placeholder((14, 12, 3, 2), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, 1, 0)
    H = ta.placeholder(Y.shape, "float32", "H")
    g = list(ta.gradient(Y, [X], H))  # the whole copy (5, 14, 23, 21) would outgrow X (5, 12, 21, 20)
    lowered = ta.lower(g, [X, W, H], microkernel=True)
    assert lowered.temporaries == [("H.padded0", (3, 14, 23, 21), "float32")]  # chunks of 3 + 2
    # against the plain loops (under fast math the taps would be unrolled around the channel
    # sum, one loop body per channel for six taps: codegen/strategies/stencil.py)
    assert lowered.work == ta.lower(g, [X, W, H], microkernel=False, fastmath=False).work + 5 * 14 * 19 * 19
    args = [RNG.standard_normal(t.shape).astype(np.float32) for t in (X, W, H)]
    _check(g, [X, W, H], args, {**opts, "microkernel": True}, rtol=1e-4)
    args = [RNG.standard_normal(t.shape).astype(np.float32) for t in (X, W, H)]
    _check(g, [X, W, H], args, {**opts, "microkernel": True}, rtol=1e-4)


@pytest.mark.parametrize("opts", THREADS)
def test_long_sum_with_few_column_blocks_is_split_in_halves(opts):
    A = ta.placeholder((4096, 12), "float32", "A")
    B = ta.placeholder((4096, 70), "float32", "B")  # 3 blocks of 32 columns on AVX2
    k = ta.reduce_axis((0, 4096), "k")
    C = ta.compute((12, 70), lambda i, j: ta.sum(A[k, i] * B[k, j], k), "C")
    # the column blocks are the target's (AVX-512's 48 make 2 blocks): name the AVX2 one
    lowered = ta.lower([C], [A, B], microkernel=True, target="llvm -mcpu=haswell")
    assert "C.part" in [t[0] for t in lowered.temporaries]
    assert lowered.work == 12 * 70 * 4096 + 12 * 70  # the halves, then their sum
    args = [RNG.standard_normal(t.shape).astype(np.float32) for t in (A, B)]
    got = ta.build([C], [A, B], microkernel=True, **opts)(*args)
    np.testing.assert_allclose(got, args[0].T.astype(np.float64) @ args[1], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("opts", THREADS)
@pytest.mark.parametrize("rows,cols", [(300, 256), (17, 130), (64, 65)])
def test_column_sums_accumulate_rows_into_strips_of_the_output(opts, rows, cols):
    # B[j] = sum_i H[i, j]: a scalar accumulator per column would walk H down a column (one cache
    # line per term); the output strip accumulates whole rows instead, and a one-axis output is
    # cut into strips so that threads share it
    H = ta.placeholder((rows, cols), "float32", "H")
    i = ta.reduce_axis((0, rows), "i")
    B = ta.compute((cols,), lambda j: ta.sum(H[i, j], axis=i), name="B")
    lowered = ta.lower([B], [H], **opts)
    (nest,) = _nests(lowered)
    assert "accumulates in the output" in nest.note
    if cols >= 2 * 64 and opts["num_threads"] == 2:
        assert "parallel for" in str(lowered)
    assert lowered.work == rows * cols
    h = RNG.standard_normal((rows, cols)).astype(np.float32)
    got = ta.build([B], [H], **opts)(h)
    np.testing.assert_allclose(got, h.astype(np.float64).sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opts", THREADS)
def test_a_column_sum_that_reads_another_keeps_its_strips(opts):
    # softmax over the rows (axis 0) backward: S[j] = sum_i E[i, j] and T[j] = sum_i E[i, j] *
    # H[i, j] (divided by S[j] after the sum).  An aligned group's members accumulate in
    # registers, one column at a time, walking E down its columns: both sums keep the strip
    # form, in one pass over E or in two.
    rows, cols = 300, 96
    X = ta.placeholder((rows, cols), "float32", "X")
    H = ta.placeholder((rows, cols), "float32", "H")
    Y = ta.topi.nn.softmax(X, axis=0)
    (G,) = ta.JacobianRecursive(Y, [X], H)
    lowered = ta.lower([G], [X, H], **opts)
    sums = [n for n in _nests(lowered) if "sum over" in n.note]
    assert sum(n.note.count("sum over") for n in sums) == 2, [n.note for n in _nests(lowered)]
    assert all("accumulates in the output" in n.note for n in sums), [n.note for n in _nests(lowered)]
    x, h = (RNG.uniform(-2, 2, (rows, cols)) for _ in range(2))
    y = np.exp(x - x.max(0)) / np.exp(x - x.max(0)).sum(0)
    want = y * (h - (h * y).sum(0))
    got = ta.build([G], [X, H], **opts)(x.astype(np.float32), h.astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
