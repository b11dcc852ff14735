"""The whole pipeline, compiled: optimized gradients built with ``ta.build`` against float64
central finite differences of ``ta.evaluate`` of the forward program.

Every workload of the optimizer's bar (dense, conv2d with strides/padding/dilation, average and
max pooling -- overlapping, non-overlapping and padded --, softmax, log-softmax, the homebrew
softmax, flatten, reshape, transpose, broadcast add, relu, sigmoid, tanh, concatenate, split) is
drawn at random shapes (seeded per workload and thread count), among them shapes whose
windows and strides do not divide the input evenly.  Its gradient for a random head is compiled
for 1 thread and for 2 threads (``parallel_min_work=0``, so small nests do get parallel loops),
and compared with the finite differences; some of them also in float32 with every contraction on
the packed micro-kernel.  Then: second order (the gradient of a gradient), jvp
and hvp of a small MLP through ``ta.build``, and random programs' gradients (2 threads),
second-order gradients and jvps (1 or 2 threads) compiled, against ``ta.evaluate`` of the same
tensors.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import random_feed, random_program

import tensorad as ta

F = "float64"
topi, nn = ta.topi, ta.topi.nn


def _ph(shape, name, dtype=F):
    return ta.placeholder(tuple(int(s) for s in shape), dtype, name=name)


def _uneven(size: int, lo: int, hi: int, window: int, stride: int) -> int:
    """``size`` or ``size + 1``: the one whose padded extent leaves a remainder by ``stride``."""
    if stride > 1 and (size + lo + hi - window) % stride == 0:
        return size + 1
    return size


# ---- workloads at random shapes: each takes (rng, uneven, dtype) and returns (Y, inputs) -----

def _dense(rng, uneven, dtype=F):
    b, n_in, n_out = rng.integers(1, 5), rng.integers(2, 8), rng.integers(1, 6)
    X, W, B = _ph((b, n_in), "X", dtype), _ph((n_out, n_in), "W", dtype), _ph((n_out,), "B", dtype)
    return nn.dense(X, W, B), [X, W, B]


def _conv2d(stride, pad, dilation):
    def make(rng, uneven, dtype=F):
        n, c, f, k = 1, rng.integers(1, 3), rng.integers(1, 3), 3
        top, left, bottom, right = pad if isinstance(pad, list) else [pad] * 4
        sh, sw = stride if isinstance(stride, tuple) else (stride, stride)
        win = dilation * (k - 1) + 1
        h = rng.integers(max(win - top - bottom, 1), win + 5)
        w = rng.integers(max(win - left - right, 1), win + 5)
        if uneven:
            h, w = _uneven(h, top, bottom, win, sh), _uneven(w, left, right, win, sw)
        X, Wt = _ph((n, c, h, w), "X", dtype), _ph((f, c, k, k), "W", dtype)
        return nn.conv2d(X, Wt, stride, pad, dilation), [X, Wt]
    return make


def _pool(kind, k, stride, pad, count_include_pad=True):
    def make(rng, uneven, dtype=F):
        n, c = rng.integers(1, 3), rng.integers(1, 3)
        h, w = rng.integers(max(k - 2 * pad, 1), k + 6), rng.integers(max(k - 2 * pad, 1), k + 6)
        if uneven:
            h, w = _uneven(h, pad, pad, k, stride), _uneven(w, pad, pad, k, stride)
        X = _ph((n, c, h, w), "X", dtype)
        return nn.pool(X, k, stride, [pad] * 4, kind, count_include_pad=count_include_pad), [X]
    return make


def _softmax(axis):
    def make(rng, uneven, dtype=F):
        X = _ph((rng.integers(1, 5), rng.integers(2, 7)), "X", dtype)
        return nn.softmax(X, axis), [X]
    return make


def _log_softmax(rng, uneven, dtype=F):
    X = _ph((rng.integers(1, 5), rng.integers(2, 7)), "X", dtype)
    return nn.log_softmax(X), [X]


def _homebrew_softmax(rng, uneven, dtype=F):
    n, k, m = rng.integers(1, 4), rng.integers(2, 6), rng.integers(2, 6)
    X, W = _ph((n, k), "X", dtype), _ph((m, k), "W", dtype)
    E = topi.exp(nn.dense(X, W))
    return E / topi.sum(E, axis=-1, keepdims=True), [X, W]


def _flatten(rng, uneven, dtype=F):
    X = _ph(rng.integers(1, 4, size=4) + np.array([0, 1, 1, 1]), "X", dtype)
    return nn.flatten(X), [X]


def _reshape(rng, uneven, dtype=F):
    a, b, c = (int(v) for v in rng.integers(2, 4, size=3))
    X = _ph((a, b, c), "X", dtype)
    return topi.reshape(X, (c, a * b)), [X]


def _transpose(rng, uneven, dtype=F):
    X = _ph(rng.integers(1, 5, size=3), "X", dtype)
    return topi.transpose(X, (2, 0, 1)), [X]


def _broadcast_add(rng, uneven, dtype=F):
    n, m = rng.integers(1, 5), rng.integers(1, 6)
    A, b = _ph((n, m), "A", dtype), _ph((m,), "b", dtype)
    return A + b, [A, b]


def _elementwise(fn):
    def make(rng, uneven, dtype=F):
        X = _ph((rng.integers(1, 5), rng.integers(1, 6)), "X", dtype)
        return fn(X), [X]
    return make


def _concatenate(rng, uneven, dtype=F):
    m = rng.integers(1, 5)
    A, B = _ph((rng.integers(1, 4), m), "A", dtype), _ph((rng.integers(1, 5), m), "B", dtype)
    return topi.concatenate([A, topi.tanh(B)], 0), [A, B]


def _split(rng, uneven, dtype=F):
    rows, m = rng.integers(4, 8), rng.integers(1, 5)
    X = _ph((rows, m), "X", dtype)
    cut = int(rng.integers(1, rows - 1))
    top, bottom = topi.split(X, [cut], axis=0)
    n = min(cut, rows - cut)
    # reads the first n rows of both pieces: the rows of X between them get no gradient
    return ta.compute((n, m), lambda i, j: top[i, j] * 2.0 + ta.sin(bottom[i, j]), name="Y"), [X]


WORKLOADS = {
    "dense": _dense,
    "conv2d(s=1,p=0)": _conv2d(1, 0, 1),
    "conv2d(s=2,p=1)": _conv2d(2, 1, 1),
    "conv2d(s=2,p=0,d=2)": _conv2d(2, 0, 2),
    "conv2d(s=3,p=2)": _conv2d(3, 2, 1),
    "conv2d(s=(2,1),p=[1,0,2,1],d=2)": _conv2d((2, 1), [1, 0, 2, 1], 2),
    "avg_pool(k=2,s=2)": _pool("avg", 2, 2, 0),
    "avg_pool(k=3,s=2)": _pool("avg", 3, 2, 0),
    "avg_pool(k=3,s=2,p=1)": _pool("avg", 3, 2, 1),
    "avg_pool(k=3,s=2,p=1,exclude_pad)": _pool("avg", 3, 2, 1, count_include_pad=False),
    "max_pool(k=2,s=2)": _pool("max", 2, 2, 0),
    "max_pool(k=3,s=2)": _pool("max", 3, 2, 0),
    "max_pool(k=3,s=1,p=1)": _pool("max", 3, 1, 1),
    "max_pool(k=2,s=3,p=1)": _pool("max", 2, 3, 1),
    "softmax": _softmax(-1),
    "softmax(axis=0)": _softmax(0),
    "log_softmax": _log_softmax,
    "softmax_homebrew": _homebrew_softmax,
    "flatten": _flatten,
    "reshape": _reshape,
    "transpose": _transpose,
    "broadcast_add": _broadcast_add,
    "relu": _elementwise(nn.relu),
    "sigmoid": _elementwise(topi.sigmoid),
    "tanh": _elementwise(topi.tanh),
    "concatenate": _concatenate,
    "split": _split,
}


def _options(threads: int) -> dict:
    return {"num_threads": 1} if threads == 1 else {"num_threads": 2, "parallel_min_work": 0}


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_built_gradient_matches_finite_differences(name, threads, numeric_grad):
    rng = np.random.default_rng(zlib.crc32(f"{name}/{threads}".encode()))
    Y, inputs = WORKLOADS[name](rng, uneven=threads == 1)
    H = _ph(Y.shape, "H")
    grads = ta.gradient(Y, inputs, H)
    kern = ta.build(grads, inputs + [H], **_options(threads))
    arrays = [rng.uniform(-1, 1, size=x.shape) for x in inputs]
    head = rng.uniform(-1, 1, size=Y.shape)
    got = _as_tuple(kern(*arrays, head))
    want = numeric_grad(lambda *a: ta.evaluate(Y, dict(zip(inputs, a))), arrays, head=head)
    for x, g, w in zip(inputs, got, want):
        assert g.shape == x.shape and g.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7,
                                   err_msg=f"{name}: gradient by {x.name} {list(x.shape)}")


FLOAT32 = ["dense", "conv2d(s=1,p=0)", "conv2d(s=2,p=1)", "softmax_homebrew", "avg_pool(k=3,s=2,p=1)",
           "max_pool(k=3,s=2)", "softmax", "log_softmax"]


@pytest.mark.parametrize("name", FLOAT32)
def test_float32_gradient_with_the_micro_kernel(name, numeric_grad):
    """float32 kernels, every contraction on the packed micro-kernel, against float64 finite
    differences of the same program in float64 on the same (float32-rounded) data."""
    for attempt in range(100):  # shapes without unit axes, so that contractions are matrix products
        seed = zlib.crc32(f"{name}/float32/{attempt}".encode())
        Y, inputs = WORKLOADS[name](np.random.default_rng(seed), True, "float32")
        if min(d for x in inputs for d in x.shape[x.ndim // 4:]) >= 2:  # (conv2d's N is 1)
            break
    Y64, inputs64 = WORKLOADS[name](np.random.default_rng(seed), True, F)
    assert [x.shape for x in inputs] == [x.shape for x in inputs64]
    H = _ph(Y.shape, "H", "float32")
    kern = ta.build(ta.gradient(Y, inputs, H), inputs + [H], microkernel=True, num_threads=2,
                    parallel_min_work=0)
    if name in ("dense", "conv2d(s=1,p=0)", "softmax_homebrew"):
        assert "micro-kernel" in str(kern.lowered)  # the gradient's contractions take that path
    rng = np.random.default_rng(seed + 1)
    arrays = [rng.uniform(-1, 1, size=x.shape).astype(np.float32) for x in inputs]
    head = rng.uniform(-1, 1, size=Y.shape).astype(np.float32)
    got = _as_tuple(kern(*arrays, head))
    want = numeric_grad(lambda *a: ta.evaluate(Y64, dict(zip(inputs64, a))), arrays, head=head)
    for x, g, w in zip(inputs, got, want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{name}: gradient by {x.name}")


def test_uneven_shapes_are_drawn():
    """The 1-thread cases really include windows and strides that do not divide the input."""
    Y, (X, _) = _conv2d(3, 2, 1)(np.random.default_rng(zlib.crc32(b"conv2d(s=3,p=2)/1")), True)
    assert (X.shape[2] + 4 - 3) % 3 and (X.shape[3] + 4 - 3) % 3
    Y, (X,) = _pool("max", 3, 2, 0)(np.random.default_rng(zlib.crc32(b"max_pool(k=3,s=2)/1")), True)
    assert (X.shape[2] - 3) % 2 and (X.shape[3] - 3) % 2


def test_two_thread_build_has_parallel_loops():
    """The 2-thread variant above is not the 1-thread program: its nests run in parallel."""
    Y, inputs = _pool("max", 3, 1, 1)(np.random.default_rng(3), False)
    H = _ph(Y.shape, "H")
    grads = ta.gradient(Y, inputs, H)
    assert "parallel for" in str(ta.lower(grads, inputs + [H], **_options(2)))
    assert "parallel for" not in str(ta.lower(grads, inputs + [H], parallel=False))


# ---- second order, jvp and hvp of a small MLP ------------------------------------------------

def _mlp():
    """loss = sum(log_softmax(tanh(X W1^T + b1) W2^T) * T): a scalar, smooth in every input."""
    X, W1, b1, W2, T = _ph((3, 4), "X"), _ph((5, 4), "W1"), _ph((5,), "b1"), _ph((2, 5), "W2"), \
        _ph((3, 2), "T")
    hidden = topi.tanh(nn.dense(X, W1, b1))
    loss = topi.sum(nn.log_softmax(nn.dense(hidden, W2)) * T)
    return loss, [X, W1, b1, W2], T


def _mlp_data(rng, params, T):
    data = {p: rng.uniform(-1, 1, size=p.shape) for p in params}
    data[T] = rng.uniform(0, 1, size=T.shape)
    return data


@pytest.mark.parametrize("threads", [1, 2])
def test_second_order_gradient_of_a_mlp(threads, rng, numeric_grad):
    loss, params, T = _mlp()
    X, W1, b1, W2 = params
    gW1, gW2 = ta.gradient(loss, [W1, W2])
    V = _ph(gW1.shape, "V")
    # d/d(W1, W2, X) of sum(gW1 * V): the Hessian rows of W1 along V (and a mixed block by X)
    second = ta.gradient(gW1, [W1, W2, X], V)
    inputs = params + [T, V]
    kern = ta.build(second, inputs, **_options(threads))
    data = _mlp_data(rng, params, T)
    data[V] = rng.uniform(-1, 1, size=V.shape)
    got = kern(*[data[t] for t in inputs])
    first = ta.build([gW1], params + [T], **_options(threads))
    np.testing.assert_allclose(first(*[data[t] for t in params + [T]]),
                               ta.evaluate(gW1, data), rtol=1e-10, atol=1e-12)

    def grad_w1(w1, w2, x):
        return ta.evaluate(gW1, {**data, W1: w1, W2: w2, X: x})

    want = numeric_grad(grad_w1, [data[W1], data[W2], data[X]], head=data[V])
    for g, w, name in zip(got, want, ["W1", "W2", "X"]):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7, err_msg=f"d(gW1 . V)/d{name}")
    assert gW2.shape == W2.shape


@pytest.mark.parametrize("threads", [1, 2])
def test_jvp_of_a_mlp_built(threads, rng):
    loss, params, T = _mlp()
    X, W1, b1, W2 = params
    hidden = topi.sigmoid(nn.dense(X, W1, b1))
    Y = nn.softmax(nn.dense(hidden, W2))
    tangents = [_ph(p.shape, f"d{p.name}") for p in params]
    dY = ta.jvp(Y, params, tangents)
    kern = ta.build([dY], params + tangents, **_options(threads))
    data = {p: rng.uniform(-1, 1, size=p.shape) for p in params + tangents}
    got = kern(*[data[t] for t in params + tangents])
    eps = 1e-6

    def at(sign):
        return ta.evaluate(Y, {p: data[p] + sign * eps * data[v] for p, v in zip(params, tangents)})

    np.testing.assert_allclose(got, (at(1) - at(-1)) / (2 * eps), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("threads", [1, 2])
def test_hvp_of_a_mlp_built(threads, rng):
    loss, params, T = _mlp()
    vectors = [_ph(p.shape, f"v{p.name}") for p in params]
    hv = ta.hessian_vector_product(loss, params, vectors)
    grads = ta.gradient(loss, params)
    inputs = params + [T] + vectors
    kern = ta.build(hv, inputs, **_options(threads))
    data = _mlp_data(rng, params, T)
    data.update({v: rng.uniform(-1, 1, size=v.shape) for v in vectors})
    got = kern(*[data[t] for t in inputs])
    eps = 1e-6

    def grads_at(sign):
        return ta.evaluate(grads, {**data, **{p: data[p] + sign * eps * data[v]
                                              for p, v in zip(params, vectors)}})

    plus, minus = grads_at(1), grads_at(-1)
    for p, g, a, b in zip(params, got, plus, minus):
        np.testing.assert_allclose(g, (a - b) / (2 * eps), rtol=1e-6, atol=1e-7, err_msg=f"Hv by {p.name}")


# ---- random programs: higher-order and forward-mode tensors compiled -------------------------

SETTINGS = dict(deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _build_vs_evaluate(outputs, inputs, threads, seed):
    feed = random_feed(inputs, np.random.default_rng(seed))
    want = ta.evaluate(outputs, feed)
    got = _as_tuple(ta.build(outputs, inputs, **_options(threads))(*[feed[p] for p in inputs]))
    for t, g, w in zip(outputs, got, want):
        ok = np.isfinite(w)
        assert np.array_equal(np.isfinite(g), ok), t.name
        np.testing.assert_allclose(g[ok], np.asarray(w)[ok], rtol=1e-9, atol=1e-9, err_msg=t.name)


@settings(max_examples=25, **SETTINGS)
@given(random_program(dtype=F, max_inputs=3, max_computes=4, depth=2))
def test_random_gradients_built_with_parallel_loops(program):
    """(tests/codegen covers first-order gradients on one thread; these run their nests on 2.)"""
    inputs = [p for p in program.placeholders if p.dtype in ta.FLOAT_DTYPES]
    h = _ph(program.output.shape, "H")
    grads = ta.gradient(program.output, inputs, h)
    _build_vs_evaluate(list(grads), list(program.placeholders) + [h], 2, 5)


@settings(max_examples=25, **SETTINGS)
@given(random_program(dtype=F, max_inputs=2, max_computes=3, depth=2), st.sampled_from([1, 2]))
def test_random_second_order_gradients_built(program, threads):
    inputs = [p for p in program.placeholders if p.dtype in ta.FLOAT_DTYPES]
    y = program.output
    h = _ph(y.shape, "H")
    g = ta.gradient(y, inputs, h)[0]
    h2 = _ph(g.shape, "H2")
    second = ta.gradient(g, inputs + [h], h2)
    _build_vs_evaluate(list(second), list(program.placeholders) + [h, h2], threads, 3)


@settings(max_examples=25, **SETTINGS)
@given(random_program(dtype=F, max_inputs=2, max_computes=3, depth=2), st.sampled_from([1, 2]))
def test_random_jvps_built(program, threads):
    inputs = [p for p in program.placeholders if p.dtype in ta.FLOAT_DTYPES]
    tangents = [_ph(p.shape, f"d{p.name}") for p in inputs]
    dy = ta.jvp(program.output, inputs, tangents)
    _build_vs_evaluate([dy], list(program.placeholders) + tangents, threads, 4)
