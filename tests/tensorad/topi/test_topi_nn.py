"""ta.topi.nn forward values against NumPy formulas written here (via ta.evaluate)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

nn = ta.topi.nn


def _conv_ref(x, w, strides, pads, dil):
    """Direct NCHW/OIHW cross-correlation; pads = (top, left, bottom, right)."""
    (sh, sw), (dh, dw) = strides, dil
    t, left, b, r = pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (left, r)))
    n, c, h, wd = xp.shape
    f, _, kh, kw = w.shape
    ho = (h - dh * (kh - 1) - 1) // sh + 1
    wo = (wd - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, f, ho, wo))
    for ky in range(kh):
        for kx in range(kw):
            win = xp[:, :, ky * dh: ky * dh + sh * (ho - 1) + 1: sh, kx * dw: kx * dw + sw * (wo - 1) + 1: sw]
            y += np.einsum("nchw,fc->nfhw", win, w[:, :, ky, kx])
    return y


def _pool_ref(x, kernel, stride, pads, kind, include_pad=True):
    kh, kw = kernel
    sh, sw = stride
    t, left, b, r = pads
    h, w = x.shape[-2:]
    ho = (h + t + b - kh) // sh + 1
    wo = (w + left + r - kw) // sw + 1
    out = np.zeros(x.shape[:-2] + (ho, wo))
    for i in range(ho):
        for j in range(wo):
            y0, x0 = i * sh - t, j * sw - left
            ys, xs = slice(max(y0, 0), min(y0 + kh, h)), slice(max(x0, 0), min(x0 + kw, w))
            win = x[..., ys, xs]
            if kind == "max":
                out[..., i, j] = win.max(axis=(-2, -1))
            else:
                count = kh * kw if include_pad else win.shape[-2] * win.shape[-1]
                out[..., i, j] = win.sum(axis=(-2, -1)) / count
    return out


@pytest.mark.parametrize("bias", [False, True])
def test_dense(rng, bias):
    X = ta.placeholder((3, 5), name="X")
    W = ta.placeholder((4, 5), name="W")
    B = ta.placeholder((4,), name="B") if bias else None
    Y = nn.dense(X, W, B)
    assert Y.shape == (3, 4) and Y.name == "dense" and Y.op.tag == "dense"
    x, w, b = rng.standard_normal((3, 5)), rng.standard_normal((4, 5)), rng.standard_normal(4)
    feed = {X: x, W: w} | ({B: b} if bias else {})
    want = x @ w.T + (b if bias else 0)
    np.testing.assert_allclose(ta.evaluate(Y, feed), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("xshape, wshape, strides, padding, dilation, pads", [
    ((1, 1, 5, 5), (1, 1, 3, 3), 1, 0, 1, (0, 0, 0, 0)),
    ((2, 3, 7, 6), (4, 3, 3, 2), 1, 1, 1, (1, 1, 1, 1)),
    ((2, 3, 7, 6), (4, 3, 3, 3), 2, 1, 1, (1, 1, 1, 1)),
    ((1, 2, 9, 8), (3, 2, 3, 3), (2, 3), (2, 1), (1, 2), (2, 1, 2, 1)),
    ((1, 2, 9, 8), (2, 2, 2, 3), (3, 1), [1, 0, 2, 1], 2, (1, 0, 2, 1)),
    ((1, 1, 4, 4), (2, 1, 4, 4), 1, 0, 1, (0, 0, 0, 0)),  # kernel as large as the input
])
def test_conv2d(rng, xshape, wshape, strides, padding, dilation, pads):
    X = ta.placeholder(xshape, name="X")
    W = ta.placeholder(wshape, name="W")
    Y = nn.conv2d(X, W, strides, padding, dilation)
    x, w = rng.standard_normal(xshape), rng.standard_normal(wshape)
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)
    want = _conv_ref(x, w, pair(strides), pads, pair(dilation))
    assert Y.shape == want.shape and Y.name == "conv2d"
    np.testing.assert_allclose(ta.evaluate(Y, {X: x, W: w}), want, rtol=1e-4, atol=1e-4)


def test_conv2d_padding_is_a_guarded_tensor():
    X = ta.placeholder((1, 1, 3, 3), name="X")
    W = ta.placeholder((1, 1, 3, 3), name="W")
    Y = nn.conv2d(X, W, 1, 1)
    padded = [t for t in ta.ir.tensor_graph([Y]) if t.name == "conv2d.pad"]
    assert len(padded) == 1 and padded[0].shape == (1, 1, 5, 5)
    assert padded[0].op.body[0].op is ta.Op.IF_THEN_ELSE


@pytest.mark.parametrize("shape, kernel, stride, padding", [
    ((1, 2, 4, 4), (2, 2), (2, 2), [0, 0, 0, 0]),
    ((2, 1, 7, 5), (3, 2), (2, 2), [0, 0, 0, 0]),      # windows do not divide the input
    ((1, 2, 7, 6), 3, 2, [1, 1, 1, 1]),
    ((1, 1, 6, 7), (3, 3), (1, 2), [2, 0, 1, 2]),      # asymmetric padding
    ((2, 5, 5), (2, 3), (3, 1), [1, 2, 0, 1]),          # 3-d input: pools the last two axes
])
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_pool(rng, shape, kernel, stride, padding, kind):
    X = ta.placeholder(shape, name="X")
    Y = nn.pool(X, kernel, stride, padding, kind)
    x = rng.standard_normal(shape)
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)
    want = _pool_ref(x, pair(kernel), pair(stride), tuple(padding), kind)
    assert Y.shape == want.shape
    np.testing.assert_allclose(ta.evaluate(Y, {X: x}), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("padding", [[1, 1, 1, 1], [2, 0, 1, 2], [0, 0, 0, 0]])
def test_avg_pool_count_include_pad_false_divides_by_valid_elements(rng, padding):
    X = ta.placeholder((1, 2, 6, 7), name="X")
    Y = nn.pool(X, (3, 3), (2, 2), padding, "avg", count_include_pad=False)
    x = rng.standard_normal((1, 2, 6, 7))
    want = _pool_ref(x, (3, 3), (2, 2), tuple(padding), "avg", include_pad=False)
    np.testing.assert_allclose(ta.evaluate(Y, {X: x}), want, rtol=1e-5, atol=1e-6)


def test_avg_pool_of_ones_with_padding():
    """With padding, the window average of ones is 1 only when padding is not counted."""
    X = ta.placeholder((1, 1, 3, 3), name="X")
    ones = np.ones((1, 1, 3, 3))
    counted = ta.evaluate(nn.pool(X, 2, 1, [1, 1, 1, 1], "avg"), {X: ones})
    valid = ta.evaluate(nn.pool(X, 2, 1, [1, 1, 1, 1], "avg", count_include_pad=False), {X: ones})
    assert counted[0, 0, 0, 0] == pytest.approx(0.25) and counted[0, 0, 1, 1] == pytest.approx(1.0)
    np.testing.assert_allclose(valid, np.ones((1, 1, 4, 4)), rtol=1e-6)


def test_max_pool_with_negative_inputs_ignores_padding():
    X = ta.placeholder((1, 1, 2, 2), name="X")
    x = -np.arange(1.0, 5.0).reshape(1, 1, 2, 2)
    y = ta.evaluate(nn.pool(X, 2, 1, [1, 1, 1, 1], "max"), {X: x})
    np.testing.assert_allclose(y, _pool_ref(x, (2, 2), (1, 1), (1, 1, 1, 1), "max"))
    assert np.isfinite(y).all()


def _softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape, axis", [((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1), ((6,), 0),
                                         ((2, 3, 4), -3)])
def test_softmax_and_log_softmax(rng, shape, axis):
    X = ta.placeholder(shape, "float64", name="X")
    x = rng.standard_normal(shape) * 3
    want = _softmax_ref(x, axis)
    np.testing.assert_allclose(ta.evaluate(nn.softmax(X, axis), {X: x}), want, rtol=1e-12)
    np.testing.assert_allclose(ta.evaluate(nn.log_softmax(X, axis), {X: x}), np.log(want),
                               rtol=1e-10, atol=1e-12)


def test_softmax_is_stable_for_large_inputs():
    X = ta.placeholder((2, 3), name="X")
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, -1000.0]], np.float32)
    y = ta.evaluate(nn.softmax(X), {X: x})
    np.testing.assert_allclose(y, _softmax_ref(x.astype(np.float64), -1), rtol=1e-5)
    ly = ta.evaluate(nn.log_softmax(X), {X: x})
    assert np.isfinite(ly).all()


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 7), (2, 3, 1, 2, 2), (4,), (2, 1, 1)])
def test_flatten(rng, shape):
    X = ta.placeholder(shape, name="X")
    x = rng.standard_normal(shape)
    Y = nn.flatten(X)
    want = x.reshape(shape[0], -1)
    assert Y.shape == want.shape and Y.name == "flatten"
    np.testing.assert_array_equal(ta.evaluate(Y, {X: x}), want.astype(np.float32))


def test_flatten_of_4d_reads_with_div_and_mod():
    X = ta.placeholder((2, 3, 4, 5), name="X")
    text = ta.PrintTensorRecursively(nn.flatten(X))
    assert "X(ax0, (ax1 // 20), ((ax1 // 5) % 4), (ax1 % 5))" in text


def test_relu(rng):
    X = ta.placeholder((3, 4), name="X")
    x = rng.standard_normal((3, 4))
    np.testing.assert_array_equal(ta.evaluate(nn.relu(X), {X: x}), np.maximum(x, 0).astype(np.float32))
    N = ta.placeholder((5,), "int32", name="N")
    i = np.array([-2, -1, 0, 1, 2], np.int32)
    out = ta.evaluate(nn.relu(N), {N: i})
    assert out.dtype == np.int32 and out.tolist() == [0, 0, 0, 1, 2]


@pytest.mark.parametrize("shape, before, after, value, np_pad", [
    ((3, 2), (1, 2), (2, 0), 0.0, [(1, 2), (2, 0)]),
    ((2, 3, 2), (0, 1, 0), None, -1.5, [(0, 0), (1, 1), (0, 0)]),
    ((2, 3), 2, 1, 3.0, [(2, 1), (2, 1)]),
])
def test_pad(rng, shape, before, after, value, np_pad):
    X = ta.placeholder(shape, name="X")
    x = rng.standard_normal(shape)
    Y = nn.pad(X, before, after, value)
    want = np.pad(x, np_pad, constant_values=value)
    np.testing.assert_array_equal(ta.evaluate(Y, {X: x}), want.astype(np.float32))


def test_dense_takes_leading_axes_as_torch_linear():
    """``dense`` of ``X [..., in]`` is PyTorch's ``linear``: values and every gradient, in
    float64, against ``torch.nn.functional.linear`` and its autograd."""
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    rng = np.random.default_rng(3)
    X = ta.placeholder((2, 3, 5), "float64", "X")
    W = ta.placeholder((4, 5), "float64", "W")
    B = ta.placeholder((4,), "float64", "B")
    Y = ta.topi.nn.dense(X, W, B)
    H = ta.placeholder(Y.shape, "float64", "H")
    grads = ta.JacobianRecursive(Y, [X, W, B], H)
    x, w, b, h = (rng.standard_normal(t.shape) for t in (X, W, B, H))
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    yt = torch.nn.functional.linear(xt, wt, bt)
    yt.backward(torch.tensor(h))
    got = ta.build([Y, *grads], [X, W, B, H])(x, w, b, h)
    for g, want in zip(got, (yt, xt.grad, wt.grad, bt.grad)):
        np.testing.assert_allclose(g, want.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert Y.shape == (2, 3, 4)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        ta.topi.nn.dense(ta.placeholder((5,), "float64", "v"), W)
