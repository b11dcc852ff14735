"""ta.build: every construct of the language compiled and compared with NumPy formulas.

Both float dtypes, 1 and 2 threads, odd sizes that divide no vector width or tile, 0-d tensors
and size-1 axes.
"""

import numpy as np
import pytest

import tensorad as ta

RNG = np.random.default_rng(1234)
TOL = {"float32": 2e-5, "float64": 1e-12}


def _rand(shape, dtype):
    return RNG.standard_normal(shape).astype(dtype)


def _close(got, want, dtype, scale=1.0):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=TOL[dtype] * scale,
                               atol=TOL[dtype] * scale)


UNARY = {
    "exp": (ta.exp, np.exp),
    "tanh": (ta.tanh, np.tanh),
    "sigmoid": (ta.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
    "abs": (ta.abs, np.abs),
    "sin": (ta.sin, np.sin),
    "cos": (ta.cos, np.cos),
    "sqrt": (lambda v: ta.sqrt(ta.abs(v)), lambda v: np.sqrt(np.abs(v))),
    "log": (lambda v: ta.log(ta.abs(v) + 1), lambda v: np.log(np.abs(v) + 1)),
    "power": (lambda v: ta.power(ta.abs(v), 1.5), lambda v: np.abs(v) ** 1.5),
    "pow_op": (lambda v: ta.abs(v) ** 2.5, lambda v: np.abs(v) ** 2.5),
    "maximum": (lambda v: ta.maximum(v, 0.0), lambda v: np.maximum(v, 0)),
    "minimum": (lambda v: ta.minimum(v, 0.25), lambda v: np.minimum(v, 0.25)),
    "floordiv": (lambda v: v // 0.3, lambda v: np.floor_divide(v, 0.3)),
    "mod": (lambda v: v % 0.3, lambda v: np.mod(v, 0.3)),
    "neg_div": (lambda v: -v / 3.0, lambda v: -v / 3.0),
    "arith": (lambda v: (v * v - 2.0 * v + 1.0) / (v * v + 1.0), lambda v: (v * v - 2 * v + 1) / (v * v + 1)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_and_binary_math(name, dtype):
    f, g = UNARY[name]
    X = ta.placeholder((5, 19), dtype, "X")
    Y = ta.compute((5, 19), lambda i, j: f(X[i, j]), name=name)
    x = _rand((5, 19), dtype)
    got = ta.build([Y], [X])(x)
    assert got.dtype == np.dtype(dtype)
    want = g(x.astype(np.float64))
    if name in ("floordiv", "mod"):  # the float quotient may round to the other side of an integer
        want = g(x)
    _close(got, want, dtype, 4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("red", ["sum", "max", "min", "prod"])
def test_reducers(red, threads, dtype):
    A = ta.placeholder((13, 7), dtype, "A")
    k = ta.reduce_axis((0, 7), "k")
    R = ta.compute((13,), lambda i: getattr(ta, red)(A[i, k], k), name=red)
    a = _rand((13, 7), dtype)
    got = ta.build([R], [A], num_threads=threads, parallel_min_work=0)(a)
    _close(got, getattr(np, red)(a.astype(np.float64), axis=1), dtype, 4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (17, 33, 65), (64, 31, 48)])
def test_matmul(shape, threads, dtype):
    n, kk, m = shape
    A, B = ta.placeholder((n, kk), dtype, "A"), ta.placeholder((kk, m), dtype, "B")
    k = ta.reduce_axis((0, kk), "k")
    C = ta.compute((n, m), lambda i, j: ta.sum(A[i, k] * B[k, j], k), name="C")
    a, b = _rand((n, kk), dtype), _rand((kk, m), dtype)
    kern = ta.build([C], [A, B], num_threads=threads, parallel_min_work=0)
    _close(kern(a, b), a.astype(np.float64) @ b, dtype, kk)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dense_with_bias_and_strict_mode(dtype):
    X, W, Bv = ta.placeholder((6, 37), dtype, "X"), ta.placeholder((11, 37), dtype, "W"), \
        ta.placeholder((11,), dtype, "B")
    k = ta.reduce_axis((0, 37), "k")
    Y = ta.compute((6, 11), lambda i, j: ta.sum(X[i, k] * W[j, k], k), name="Y")
    Z = ta.compute((6, 11), lambda i, j: Y[i, j] + Bv[j], name="Z")
    x, w, bv = _rand((6, 37), dtype), _rand((11, 37), dtype), _rand((11,), dtype)
    want = x.astype(np.float64) @ w.T + bv
    for fast in (True, False):
        _close(ta.build([Z], [X, W, Bv], fastmath=fast)(x, w, bv), want, dtype, 40)


def test_argmax_custom_reducer_and_multi_output():
    def combine(x, y):
        take_x = x[1] >= y[1]
        return ta.select(take_x, x[0], y[0]), ta.select(take_x, x[1], y[1])

    argmax = ta.comm_reducer(combine, lambda t0, t1: (ta.const(-1, t0), ta.min_value(t1)), name="argmax")
    A = ta.placeholder((6, 9), "float64", "A")
    k = ta.reduce_axis((0, 9), "k")
    idx, val = ta.compute((6,), lambda i: argmax((k, A[i, k]), axis=k), name="am")
    a = _rand((6, 9), "float64")
    gi, gv = ta.build([idx, val], [A])(a)
    np.testing.assert_array_equal(gi, np.argmax(a, axis=1))
    np.testing.assert_array_equal(gv, a.max(axis=1))


def test_multi_output_elementwise():
    A = ta.placeholder((4, 6), "float32", "A")
    P, Q = ta.compute((4, 6), lambda i, j: (A[i, j] + 1.0, ta.select(i < j, A[i, j], 0.0)), name="PQ")
    a = _rand((4, 6), "float32")
    p, q = ta.build([P, Q], [A])(a)
    np.testing.assert_allclose(p, a + 1, rtol=1e-6)
    np.testing.assert_array_equal(q, np.where(np.arange(4)[:, None] < np.arange(6)[None, :], a, 0))


def test_if_then_else_padding_reads_only_in_bounds():
    A = ta.placeholder((6, 9), "float64", "A")
    P = ta.compute((8, 11), lambda i, j: ta.if_then_else(
        (i >= 1) & (i < 7) & (j >= 1) & (j < 10), A[i - 1, j - 1], -1.0), name="pad")
    a = _rand((6, 9), "float64")
    np.testing.assert_array_equal(ta.build([P], [A])(a), np.pad(a, 1, constant_values=-1.0))


def test_lazy_if_then_else_with_data_dependent_condition():
    A = ta.placeholder((10,), "float32", "A")
    Y = ta.compute((10,), lambda i: ta.if_then_else(A[i] > 0, ta.if_then_else(i >= 1, A[i - 1], 5.0), -A[i]),
                   name="Y")
    a = _rand((10,), "float32")
    want = np.where(a > 0, np.concatenate([[5.0], a[:-1]]), -a)
    np.testing.assert_array_equal(ta.build([Y], [A])(a), want.astype(np.float32))


@pytest.mark.parametrize("threads", [1, 2])
def test_conv2d_with_padding_and_stride(threads):
    X = ta.placeholder((2, 3, 9, 11), "float32", "X")
    W = ta.placeholder((4, 3, 3, 3), "float32", "W")
    P = ta.compute((2, 3, 11, 13), lambda n, c, h, w: ta.if_then_else(
        (h >= 1) & (h < 10) & (w >= 1) & (w < 12), X[n, c, h - 1, w - 1], 0.0), name="P")
    rc, rh, rw = ta.reduce_axis((0, 3), "rc"), ta.reduce_axis((0, 3), "rh"), ta.reduce_axis((0, 3), "rw")
    Y = ta.compute((2, 4, 5, 6), lambda n, f, y, x: ta.sum(
        P[n, rc, 2 * y + rh, 2 * x + rw] * W[f, rc, rh, rw], [rc, rh, rw]), name="Y")
    x, w = _rand((2, 3, 9, 11), "float32"), _rand((4, 3, 3, 3), "float32")
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 4, 5, 6))
    for yy in range(5):
        for xx in range(6):
            patch = xp[:, :, 2 * yy:2 * yy + 3, 2 * xx:2 * xx + 3]
            want[:, :, yy, xx] = np.einsum("nchw,fchw->nf", patch, w)
    _close(ta.build([Y], [X, W], num_threads=threads, parallel_min_work=0)(x, w), want, "float32", 30)


def test_avg_and_max_pool():
    X = ta.placeholder((2, 3, 8, 10), "float32", "X")
    rh, rw = ta.reduce_axis((0, 2), "rh"), ta.reduce_axis((0, 2), "rw")
    M = ta.compute((2, 3, 4, 5), lambda n, c, h, w: ta.max(X[n, c, 2 * h + rh, 2 * w + rw], [rh, rw]),
                   name="M")
    S = ta.compute((2, 3, 4, 5), lambda n, c, h, w: ta.sum(X[n, c, 2 * h + rh, 2 * w + rw], [rh, rw]),
                   name="S")
    A = ta.compute((2, 3, 4, 5), lambda n, c, h, w: S[n, c, h, w] * 0.25, name="A")
    x = _rand((2, 3, 8, 10), "float32")
    m, a = ta.build([M, A], [X])(x)
    blocks = x.reshape(2, 3, 4, 2, 5, 2)
    np.testing.assert_array_equal(m, blocks.max(axis=(3, 5)))
    np.testing.assert_allclose(a, blocks.mean(axis=(3, 5)), rtol=1e-6, atol=1e-6)


def test_softmax():
    X = ta.placeholder((5, 37), "float64", "X")
    k = ta.reduce_axis((0, 37), "k")
    M = ta.compute((5,), lambda i: ta.max(X[i, k], k), name="M")
    E = ta.compute((5, 37), lambda i, j: ta.exp(X[i, j] - M[i]), name="E")
    k2 = ta.reduce_axis((0, 37), "k2")
    S = ta.compute((5,), lambda i: ta.sum(E[i, k2], k2), name="S")
    Y = ta.compute((5, 37), lambda i, j: E[i, j] / S[i], name="Y")
    x = _rand((5, 37), "float64")
    e = np.exp(x - x.max(1, keepdims=True))
    _close(ta.build([Y], [X])(x), e / e.sum(1, keepdims=True), "float64")


def test_flatten_and_reshape_with_div_mod():
    X = ta.placeholder((3, 4, 5), "float32", "X")
    F = ta.compute((3, 20), lambda i, j: X[i, j // 5, j % 5], name="F")
    R = ta.compute((3, 4, 5), lambda a, b, c: F[a, b * 5 + c] * 2.0, name="R")
    x = _rand((3, 4, 5), "float32")
    f, r = ta.build([F, R], [X])(x)
    np.testing.assert_array_equal(f, x.reshape(3, 20))
    np.testing.assert_array_equal(r, 2 * x)


def test_flatten_gradient_reduction():
    H = ta.placeholder((2, 60), "float32", "H")
    k = ta.reduce_axis((0, 60), "k")
    G = ta.compute((2, 3, 4, 5), lambda b, c, h, w: ta.sum(
        H[b, k], k, where=(c == k // 20) & (h == (k // 5) % 4) & (w == k % 5)), name="G")
    h = _rand((2, 60), "float32")
    np.testing.assert_array_equal(ta.build([G], [H])(h), h.reshape(2, 3, 4, 5))


def test_triangular_and_select_domains_values():
    n = 23
    A = ta.placeholder((n, n), "float64", "A")
    k = ta.reduce_axis((0, n), "k")
    T = ta.compute((n,), lambda i: ta.sum(A[i, k], k, where=k <= i), name="T")
    S = ta.compute((n, n), lambda i, j: ta.select(j < i, A[i, j] * 3.0, 0.0), name="S")
    a = _rand((n, n), "float64")
    t, s = ta.build([T, S], [A])(a)
    _close(t, np.tril(a).sum(1), "float64")
    np.testing.assert_array_equal(s, np.tril(a, -1) * 3)


def test_reduction_with_outer_condition_fills_identity():
    A = ta.placeholder((6, 6), "float32", "A")
    k = ta.reduce_axis((0, 6), "k")
    M = ta.compute((6, 6), lambda i, j: ta.max(A[k, j], k, where=i == j), name="M")
    a = _rand((6, 6), "float32")
    want = np.full((6, 6), -np.inf, np.float32)
    np.fill_diagonal(want, a.max(0))
    np.testing.assert_array_equal(ta.build([M], [A])(a), want)


def test_zero_d_tensors_and_size_one_axes():
    Z = ta.placeholder((), "float32", "Z")
    A = ta.placeholder((1, 5), "float32", "A")
    k = ta.reduce_axis((0, 5), "k")
    s = ta.compute((), lambda: ta.sum(A[0, k], k) * Z[()], name="s")
    e = ta.compute((1, 1), lambda i, j: A[i, j + 4] + Z[()], name="e")
    a = _rand((1, 5), "float32")
    z = np.array(2.0, np.float32)
    got_s, got_e = ta.build([s, e], [Z, A])(z, a)
    assert got_s.shape == () and got_e.shape == (1, 1)
    np.testing.assert_allclose(got_s, a.sum() * 2, rtol=1e-6)
    np.testing.assert_allclose(got_e, a[:, 4:] + 2, rtol=1e-6)


def test_empty_tensors():
    A = ta.placeholder((0, 5), "float32", "A")
    k = ta.reduce_axis((0, 0), "k")
    B = ta.compute((0, 5), lambda i, j: A[i, j] + 1.0, name="B")
    C = ta.compute((3,), lambda i: ta.sum(A[k, i], k), name="C")
    b, c = ta.build([B, C], [A])(np.zeros((0, 5), np.float32))
    assert b.shape == (0, 5)
    np.testing.assert_array_equal(c, np.zeros(3, np.float32))


def test_integer_arithmetic_and_division():
    Ii = ta.placeholder((4, 5), "int32", "I")
    L = ta.placeholder((4, 5), "int64", "L")
    J = ta.compute((4, 5), lambda i, j: (Ii[i, j] // 7) + (Ii[i, j] % 3) * i - j, name="J")
    D = ta.compute((4, 5), lambda i, j: Ii[i, j] // Ii[3 - i, 4 - j] + Ii[i, j] % Ii[3 - i, 4 - j], name="D")
    W = ta.compute((4, 5), lambda i, j: L[i, j] * 3 + ta.cast("int64", Ii[i, j]), name="W")
    M = ta.compute((4, 5), lambda i, j: ta.maximum(Ii[i, j], 3) - ta.abs(Ii[i, j]), name="M")
    ii = RNG.integers(-50, 50, (4, 5)).astype(np.int32)
    ii[0, 0], ii[3, 4] = 0, 0  # division by zero gives 0
    ll = RNG.integers(-2**40, 2**40, (4, 5))
    j, d, w, m = ta.build([J, D, W, M], [Ii, L])(ii, ll)
    r = np.arange(4)[:, None]
    c = np.arange(5)[None, :]
    np.testing.assert_array_equal(j, ii // 7 + (ii % 3) * r - c)
    with np.errstate(all="ignore"):
        rev = ii[::-1, ::-1]
        want = np.where(rev == 0, 0, np.floor_divide(ii, np.where(rev == 0, 1, rev))
                        + np.mod(ii, np.where(rev == 0, 1, rev)))
    np.testing.assert_array_equal(d, want)
    np.testing.assert_array_equal(w, ll * 3 + ii)
    np.testing.assert_array_equal(m, np.maximum(ii, 3) - np.abs(ii))


def test_int32_values_wrap_like_numpy():
    Ii = ta.placeholder((3,), "int32", "I")
    Y = ta.compute((3,), lambda i: Ii[i] * 1000003, name="Y")
    ii = np.array([5000, -70000, 2**30], np.int32)
    np.testing.assert_array_equal(ta.build([Y], [Ii])(ii), ii * np.int32(1000003))


def test_bool_tensors_and_casts():
    Ii = ta.placeholder((4, 5), "int32", "I")
    Bi = ta.placeholder((4, 5), "bool", "Bi")
    Bo = ta.compute((4, 5), lambda i, j: ((Ii[i, j] > 0) & (Ii[i, j] < 30)) | ~Bi[i, j], name="Bo")
    F = ta.compute((4, 5), lambda i, j: ta.cast("float32", Bo[i, j]) + ta.cast("float32", Ii[i, j]), name="F")
    G = ta.compute((4, 5), lambda i, j: ta.cast("int32", ta.cast("float32", Ii[i, j]) * 0.5), name="G")
    ii = RNG.integers(-50, 50, (4, 5)).astype(np.int32)
    bi = RNG.random((4, 5)) > 0.5
    bo, f, g = ta.build([Bo, F, G], [Ii, Bi])(ii, bi)
    want = ((ii > 0) & (ii < 30)) | ~bi
    assert bo.dtype == np.bool_
    np.testing.assert_array_equal(bo, want)
    np.testing.assert_array_equal(f, want + ii.astype(np.float32))
    np.testing.assert_array_equal(g, (ii.astype(np.float32) * 0.5).astype(np.int32))


def test_index_variable_used_as_value():
    A = ta.placeholder((4, 6), "float32", "A")
    Y = ta.compute((4, 6), lambda i, j: A[i, j] * ta.cast("float32", i * 6 + j), name="Y")
    a = _rand((4, 6), "float32")
    np.testing.assert_allclose(ta.build([Y], [A])(a), a * np.arange(24).reshape(4, 6), rtol=1e-6)


def test_where_condition_with_data_dependent_part():
    A = ta.placeholder((6, 9), "float64", "A")
    k = ta.reduce_axis((0, 9), "k")
    W = ta.compute((6,), lambda i: ta.sum(A[i, k], k, where=(A[i, k] > 0) & (k >= i)), name="W")
    a = _rand((6, 9), "float64")
    want = [sum(a[i, q] for q in range(9) if a[i, q] > 0 and q >= i) for i in range(6)]
    _close(ta.build([W], [A])(a), want, "float64")


@pytest.mark.parametrize("n", [1, 15, 16, 17, 100])
def test_vector_tails(n):
    A = ta.placeholder((n,), "float32", "A")
    Y = ta.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="Y")
    k = ta.reduce_axis((0, n), "k")
    S = ta.compute((), lambda: ta.sum(A[k], k), name="S")
    a = _rand((n,), "float32")
    y, s = ta.build([Y, S], [A])(a)
    np.testing.assert_allclose(y, a * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(s, a.astype(np.float64).sum(), rtol=1e-5, atol=1e-5)


def test_unused_input_is_accepted():
    A, B = ta.placeholder((3,), "float32", "A"), ta.placeholder((2,), "float64", "B")
    Y = ta.compute((3,), lambda i: A[i] + 1.0, name="Y")
    a = _rand((3,), "float32")
    np.testing.assert_allclose(ta.build([Y], [A, B])(a, np.zeros(2)), a + 1)


@pytest.mark.parametrize("batch", [1, 2, 9])
def test_short_batch_axis_is_fused_for_parallelism(batch):
    X = ta.placeholder((batch, 3, 7, 19), "float64", "X")
    Y = ta.compute(X.shape, lambda a, b, c, d: X[a, b, c, d] * 2.0 + ta.cast("float64", b), name="Y")
    k = ta.reduce_axis((0, 19), "k")
    Z = ta.compute((batch, 3, 7), lambda a, b, c: ta.sum(X[a, b, c, k] * X[a, b, 6 - c, k], k), name="Z")
    text = str(ta.lower([Y, Z], [X], parallel_min_work=0))
    assert ("ao in range" in text) == (batch < 8)
    x = np.random.default_rng(batch).standard_normal((batch, 3, 7, 19))  # (the same data in any test order)
    y, z = ta.build([Y, Z], [X], num_threads=2, parallel_min_work=0)(x)
    np.testing.assert_allclose(y, x * 2 + np.arange(3)[None, :, None, None])
    # (a sum of 19 products may cancel: its rounding is bounded by the terms' size, not the sum's)
    np.testing.assert_allclose(z, np.einsum("abck,abck->abc", x, x[:, :, ::-1, :]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(2, 3), (5,), ()])
def test_identity_kernel_copies_an_input_that_is_also_an_output(shape):
    # ``ta.build([A], [A])`` raised "both an input and an output"
    A = ta.placeholder(shape, "float64", name="A")
    kern = ta.build([A], [A])
    a = np.random.default_rng(0).uniform(-1, 1, shape)
    got = kern(a)
    assert np.array_equal(got, a) and not np.shares_memory(got, a)
    B = ta.compute(shape, lambda *i: A[i] * 2.0 if i else A[()] * 2.0, name="B")
    both = ta.build([B, A], [A])
    b, a2 = both(a)
    assert np.array_equal(b, a * 2) and np.array_equal(a2, a)
