"""A matrix product's elementwise consumer applied by the product to each block of C it
finishes (``strategies.ProductEpilogue``): ``gelu(X @ W + b)``, ``relu(conv2d(...))``, a
gradient's ``dY * f'(u)`` after its product.  C lives in the consumer's buffer; no temporary,
no second pass.  Oracles: NumPy float64 formulas written here, ``ta.evaluate``, and the same
program built with ``fuse=False`` (no fusion at all)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorad as ta
from tensorad.topi import nn

TARGETS = ("llvm", "llvm -mcpu=haswell")
FUSED = "applied to each finished block"


def _fused_products(tensors, inputs, **opts) -> int:
    return str(ta.lower(tensors, inputs, **opts)).count(FUSED)


def test_dense_bias_gelu_is_one_pass(rng):
    X = ta.placeholder((70, 48), "float32", "X")
    W = ta.placeholder((100, 48), "float32", "W")
    B = ta.placeholder((100,), "float32", "B")
    Y = nn.gelu(nn.dense(X, W, B))
    text = str(ta.lower([Y], [X, W, B]))
    assert FUSED in text and "allocate" not in text  # (no temporary for the product)
    x, w, b = (rng.uniform(-1, 1, t.shape).astype(np.float32) for t in (X, W, B))
    u = x.astype(np.float64) @ w.T.astype(np.float64) + b
    want = 0.5 * u * (1 + np.vectorize(math.erf)(u / np.sqrt(2)))
    for target in TARGETS:
        for threads in (1, 2):
            got = ta.build([Y], [X, W, B], target=target, num_threads=threads, parallel_min_work=0)(x, w, b)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_padded_convolution_with_relu_applies_relu_per_block(rng):
    X = ta.placeholder((3, 8, 13, 11), "float32", "X")
    W = ta.placeholder((16, 8, 3, 3), "float32", "W")
    Y = nn.relu(nn.conv2d(X, W, 1, 1))
    x = rng.standard_normal(X.shape).astype(np.float32)
    w = rng.standard_normal(W.shape).astype(np.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = sum(np.einsum("ncyx,fc->nfyx", xp[:, :, ry:ry + 13, rx:rx + 11], w[:, :, ry, rx])
               for ry in range(3) for rx in range(3))
    want = np.maximum(conv, 0)
    assert _fused_products([Y], [X, W], microkernel=True) >= 1
    for target in TARGETS:
        for threads in (1, 2):
            got = ta.build([Y], [X, W], target=target, num_threads=threads, microkernel=True,
                           parallel_min_work=0)(x, w)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_gradient_of_an_mlp_matches_the_unfused_build(rng):
    X = ta.placeholder((128, 40), "float32", "X")
    W1 = ta.placeholder((192, 40), "float32", "W1")
    B1 = ta.placeholder((192,), "float32", "B1")
    W2 = ta.placeholder((64, 192), "float32", "W2")
    Y = nn.dense(nn.gelu(nn.dense(X, W1, B1)), W2)
    H = ta.placeholder(Y.shape, "float32", "H")
    ins = [X, W1, B1, W2]
    grads = list(ta.gradient(Y, ins, H))
    assert _fused_products(grads, ins + [H]) >= 1  # (dY @ W2 times gelu's derivative)
    args = [rng.uniform(-1, 1, t.shape).astype(np.float32) for t in ins + [H]]
    want = ta.build(grads, ins + [H], fuse=False)(*args)
    for target in TARGETS:
        got = ta.build(grads, ins + [H], target=target, parallel_min_work=0)(*args)
        for g, v in zip(got, want):
            np.testing.assert_allclose(g, v, rtol=1e-5, atol=1e-5)


def test_excluded_terms_are_repaired_before_the_consumer_runs():
    # a term the condition excludes meets an inf of the other side: the packed product gives
    # 0 * inf = NaN there, the repair sums the term as written, then tanh applies
    n = 40
    A = ta.placeholder((n, n), "float32", "A")
    Bm = ta.placeholder((n, n), "float32", "B")
    r = ta.reduce_axis((0, n), "r")
    C = ta.compute((n, n), lambda i, j: ta.sum(A[r, i] * Bm[r, j], axis=r, where=r >= j), name="C")
    T = ta.compute((n, n), lambda i, j: ta.tanh(C[i, j] * 0.1), name="T")
    a = np.random.default_rng(3).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(4).standard_normal((n, n)).astype(np.float32)
    b[0, 5] = np.inf  # read by column 5 only at r = 0 < 5: excluded
    assert _fused_products([T], [A, Bm], microkernel=True) == 1
    got = ta.build([T], [A, Bm], microkernel=True, parallel_min_work=0)(a, b)
    want = ta.evaluate(T, {A: a, Bm: b})
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_product_read_elsewhere_or_returned_keeps_its_buffer():
    X = ta.placeholder((64, 64), "float32", "X")
    W = ta.placeholder((64, 64), "float32", "W")
    P = nn.dense(X, W)
    R = nn.relu(P)
    assert _fused_products([R], [X, W]) == 1
    assert _fused_products([R, P], [X, W]) == 0  # (the product is an output)
    S = ta.compute((64, 64), lambda i, j: R[i, j] + P[j, i], name="S")  # (P read transposed)
    assert _fused_products([S], [X, W]) == 0
    assert _fused_products([R], [X, W], fuse=False) == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 40), batch=st.integers(1, 3),
       consumer=st.sampled_from(["relu", "exp", "bias", "mask", "square", "other"]),
       threads=st.sampled_from([1, 2]), target=st.sampled_from(TARGETS),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2 ** 16))
def test_random_products_with_a_consumer_match_evaluate(m, n, k, batch, consumer, threads, target, dtype,
                                                        seed):
    A = ta.placeholder((batch, m, k), dtype, "A")
    B = ta.placeholder((batch, k, n), dtype, "B")
    V = ta.placeholder((n,), dtype, "V")
    Q = ta.placeholder((batch, m, n), dtype, "Q")
    r = ta.reduce_axis((0, k), "r")
    C = ta.compute((batch, m, n), lambda z, i, j: ta.sum(A[z, i, r] * B[z, r, j], axis=r), name="C")
    body = {"relu": lambda z, i, j: ta.select(C[z, i, j] <= 0, 0.0, C[z, i, j]),
            "exp": lambda z, i, j: ta.exp(C[z, i, j] * 0.05),
            "bias": lambda z, i, j: C[z, i, j] + V[j],
            "mask": lambda z, i, j: ta.select(i >= j, C[z, i, j] * V[j], 0.0),
            "square": lambda z, i, j: C[z, i, j] * C[z, i, j] - V[j],
            "other": lambda z, i, j: ta.tanh(C[z, i, j] + Q[z, i, j]) * Q[z, m - 1 - i, j]}[consumer]
    T = ta.compute((batch, m, n), body, name="T")
    rng = np.random.default_rng(seed)
    a, b, v, q = (rng.uniform(-1, 1, t.shape).astype(dtype) for t in (A, B, V, Q))
    got = ta.build([T], [A, B, V, Q], target=target, num_threads=threads, microkernel=True,
                   parallel_min_work=0)(a, b, v, q)
    want = ta.evaluate(T, {A: a, B: b, V: v, Q: q})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1, k))


def test_a_sum_inside_the_consumer_is_computed_first_and_read_by_the_finisher(rng):
    # the consumer's own sum is lifted into a tensor of its own (lowering), which the finisher
    # then reads elementwise (it evaluates no reduction itself)
    A = ta.placeholder((64, 64), "float32", "A")
    B = ta.placeholder((64, 64), "float32", "B")
    V = ta.placeholder((64,), "float32", "V")
    k = ta.reduce_axis((0, 64), "k")
    C = ta.compute((64, 64), lambda i, j: ta.sum(A[i, k] * B[k, j], axis=k), name="C")
    r = ta.reduce_axis((0, 64), "r")
    T = ta.compute((64, 64), lambda i, j: C[i, j] * ta.sum(V[r] * V[r], axis=r) + 1.0, name="T")
    assert _fused_products([T], [A, B, V], microkernel=True) == 1
    a, b, v = (rng.uniform(-1, 1, t.shape).astype(np.float32) for t in (A, B, V))
    want = (a.astype(np.float64) @ b) * float((v.astype(np.float64) ** 2).sum()) + 1.0
    got = ta.build([T], [A, B, V], microkernel=True)(a, b, v)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 3), c=st.integers(1, 6), f=st.integers(1, 20), hw=st.integers(3, 12),
       stride=st.sampled_from([1, 2]), pad=st.sampled_from([0, 1]),
       consumer=st.sampled_from(["relu", "bias_tanh"]), threads=st.sampled_from([1, 2]),
       target=st.sampled_from(TARGETS), seed=st.integers(0, 2 ** 16))
def test_random_convolutions_with_a_consumer_match_evaluate(n, c, f, hw, stride, pad, consumer, threads,
                                                            target, seed):
    X = ta.placeholder((n, c, hw, hw + 1), "float32", "X")
    W = ta.placeholder((f, c, 3, 3), "float32", "W")
    Bv = ta.placeholder((f,), "float32", "Bv")
    conv = nn.conv2d(X, W, stride, pad)
    if consumer == "relu":
        Y = nn.relu(conv)
    else:
        Y = ta.compute(conv.shape, lambda a, o, y, x: ta.tanh(conv[a, o, y, x] * 0.3 + Bv[o]), name="Y")
    rng = np.random.default_rng(seed)
    x, w, bv = (rng.uniform(-1, 1, t.shape).astype(np.float32) for t in (X, W, Bv))
    got = ta.build([Y], [X, W, Bv], target=target, num_threads=threads, microkernel=True,
                   parallel_min_work=0)(x, w, bv)
    np.testing.assert_allclose(got, ta.evaluate(Y, {X: x, W: w, Bv: bv}), rtol=1e-5, atol=1e-5)


def test_a_consumer_reading_through_a_checked_gather_keeps_its_own_nest(rng):
    # The finisher emitted a gather index under mode="raise" without the
    # run-time test only a nest emits ("internal error: ... emitted without its run-time check")
    A = ta.placeholder((48, 40), "float32", "A")
    B = ta.placeholder((40, 36), "float32", "B")
    V = ta.placeholder((7,), "float32", "V")
    idx = ta.placeholder((36,), "int32", "idx")
    k = ta.reduce_axis((0, 40), "k")
    C = ta.compute((48, 36), lambda i, j: ta.sum(A[i, k] * B[k, j], axis=k), name="C")
    T = ta.compute((48, 36), lambda i, j: C[i, j] * V[idx[j]], name="T")
    assert _fused_products([T], [A, B, V, idx], microkernel=True) == 0
    a, b, v = (rng.uniform(-1, 1, t.shape).astype(np.float32) for t in (A, B, V))
    ix = rng.integers(0, 7, 36).astype(np.int32)
    kern = ta.build([T], [A, B, V, idx], microkernel=True, parallel_min_work=0)
    np.testing.assert_allclose(kern(a, b, v, ix), (a.astype(np.float64) @ b) * v[ix][None, :],
                               rtol=1e-5, atol=1e-5)
    ix[3] = 7
    with pytest.raises(IndexError):
        kern(a, b, v, ix)


def _finisher_ir(kernel) -> str:
    found = re.search(r"^define [^\n]*_finish\(.*?^}", kernel.llvm_ir, re.M | re.S)
    assert found is not None
    return found.group(0)


@pytest.mark.parametrize("target", ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"])
def test_the_finisher_is_one_vector_loop_without_overlap_checks(target):
    """The finisher read the epilogue's tensors through pointers LLVM could not tell apart from C's,
    so its loop was vectorized behind run-time overlap checks with a scalar copy beside; and on AVX-512
    LLVM emitted the epilogue three times (vector loop, vector epilogue, scalar remainder), the bulk of
    a layer's compile.  C's pointer is ``noalias``, and with masked vector memory the loop's remainder
    is folded into masked iterations: one copy of the epilogue."""
    X = ta.placeholder((70, 48), "float32", "X")
    W = ta.placeholder((100, 48), "float32", "W")
    B = ta.placeholder((100,), "float32", "B")
    Y = nn.gelu(nn.dense(X, W, B))
    body = _finisher_ir(ta.build([Y], [X, W, B], target=target))
    assert "vector.memcheck" not in body and "vec.epilog" not in body
    if "avx512" in target:
        assert body.count("vector.body:") == 1 and "llvm.masked.store" in body
        assert re.search(r"^\s+store ", body, re.M) is None  # (no scalar remainder)


def test_without_masked_memory_the_finishers_vector_loop_runs_whole_vectors_only():
    """Without masked vector memory (AVX2) the finisher's vector loop runs only whole vectors, and the
    rest of a run is a scalar loop of its own: beside a scalar remainder of LLVM's, the vector loop
    broadcasts more of the consumer's constants again on each iteration (35 for GELU's erf, 20 without)."""
    X = ta.placeholder((70, 48), "float32", "X")
    W = ta.placeholder((100, 48), "float32", "W")
    B = ta.placeholder((100,), "float32", "B")
    body = _finisher_ir(ta.build([nn.gelu(nn.dense(X, W, B))], [X, W, B], target="llvm -mcpu=haswell"))
    assert body.count("vector.body:") == 1 and "middle.block" not in body and "vector.memcheck" not in body
    assert len(re.findall(r"^\s+store float ", body, re.M)) == 1  # (the rest, one element at a time)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("target", TARGETS)
def test_a_consumer_on_columns_past_whole_vectors_matches_numpy(rng, dtype, target):
    """Each run of columns the finisher applies the consumer to: whole vectors, then the columns past
    them (0 to lanes - 1 of them, at odd widths and in the last, narrower column block)."""
    for m, k, n in ((7, 5, 1), (13, 11, 9), (29, 17, 23), (37, 64, 150), (5, 33, 203)):
        X = ta.placeholder((m, k), dtype, "X")
        W = ta.placeholder((n, k), dtype, "W")
        B = ta.placeholder((n,), dtype, "B")
        Y = nn.gelu(nn.dense(X, W, B))
        assert _fused_products([Y], [X, W, B], microkernel=True, target=target) == 1
        x, w, b = (rng.uniform(-2, 2, t.shape).astype(dtype) for t in (X, W, B))
        u = x.astype(np.float64) @ w.T.astype(np.float64) + b
        want = 0.5 * u * (1 + np.vectorize(math.erf)(u / np.sqrt(2)))
        got = ta.build([Y], [X, W, B], microkernel=True, target=target, parallel_min_work=0)(x, w, b)
        tol = 1e-5 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1, k))
