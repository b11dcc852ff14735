"""Max and min pooling gradients scatter from the saved winner (max pool backward).

The forward of ``ta.function`` saves the winner reduction (value, flattened index, tie
count); the backward adds the head at each window's winner -- one add per output, whatever
the window, stride or padding -- and visits a window's other points only when it has ties
(``codegen/strategies/scatter.py``: the test ``T > 1`` hoisted out of the window loop).  Oracles:
PyTorch's ``max_pool2d`` in float32 and float64 (data without ties), and a NumPy loop over
the windows for ties (every maximum of a window gets ``H / ties``, PyTorch's ``amax`` rule).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorad as ta

torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")

# (kernel, stride, padding): overlapping, tiling, stride 1, a wide stride, rectangular
CONFIGS = [((3, 3), (2, 2), 1), ((2, 2), (2, 2), 0), ((3, 3), (1, 1), 1), ((5, 5), (3, 3), 2),
           ((2, 3), (1, 2), (1, 0))]


def _pool(x, kernel, stride, padding, kind):
    pad = [padding] * 4 if isinstance(padding, int) else [padding[0], padding[1]] * 2
    if kind == "max":
        return ta.topi.nn.pool(x, list(kernel), list(stride), pad, kind)
    # min pooling, written in the language: padding is +inf under a lazy guard
    n, c, h, w = x.shape
    ph, pw = pad[:2]
    shape = (n, c, (h + 2 * ph - kernel[0]) // stride[0] + 1, (w + 2 * pw - kernel[1]) // stride[1] + 1)
    ry, rx = ta.reduce_axis((0, kernel[0]), "ry"), ta.reduce_axis((0, kernel[1]), "rx")

    def body(b, f, i, j):
        y, xx = i * stride[0] - ph + ry, j * stride[1] - pw + rx
        inside = (y >= 0) & (y < h) & (xx >= 0) & (xx < w)
        return ta.min(ta.if_then_else(inside, x[b, f, y, xx], float("inf")), [ry, rx])
    return ta.compute(shape, body, "min_pool")


def _torch_pool(x, kernel, stride, padding, kind):
    sign = 1.0 if kind == "max" else -1.0
    return sign * torch.nn.functional.max_pool2d(sign * x, kernel, stride, padding)


def _windows(x, kernel, stride, padding, out_hw):
    """Yield ``(n, c, oy, ox, [(y, x), ...])``: every window's points inside ``x``."""
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            for oy in range(out_hw[0]):
                for ox in range(out_hw[1]):
                    pts = [(oy * stride[0] - ph + r, ox * stride[1] - pw + s)
                           for r in range(kernel[0]) for s in range(kernel[1])]
                    yield n, c, oy, ox, [(y, xx) for y, xx in pts
                                         if 0 <= y < x.shape[2] and 0 <= xx < x.shape[3]]


# every window shape in float32 max pooling, and a spread of float64 and min pooling
CASES = [(c, "float32", "max") for c in CONFIGS] + [
    (CONFIGS[0], "float64", "min"), (CONFIGS[1], "float64", "max"), (CONFIGS[2], "float32", "min"),
    (CONFIGS[3], "float64", "max"), (CONFIGS[4], "float64", "min")]


@pytest.mark.parametrize("config,dtype,kind", CASES,
                         ids=[f"{c[0]}/{c[1]}/{c[2]}-{d}-{k}" for c, d, k in CASES])
def test_pool_gradient_matches_torch(config, dtype, kind, rng):
    kernel, stride, padding = config
    X = ta.placeholder((2, 3, 11, 13), dtype, "X")
    Y = _pool(X, kernel, stride, padding, kind)
    f = ta.function(Y, [X], num_threads=1)
    x = rng.permutation(X.size).reshape(X.shape).astype(dtype) / X.size - 0.5  # no ties
    h = rng.standard_normal(Y.shape).astype(dtype)
    y, res = f.forward(x)
    (gx,) = f.backward(res, h)
    tx = torch.tensor(x, requires_grad=True)
    ty = _torch_pool(tx, kernel, stride, padding, kind)
    ty.backward(torch.tensor(h))
    np.testing.assert_array_equal(y, ty.detach().numpy())
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-6 if dtype == "float32" else 1e-14)
    # the gradient built directly (the winner computed in the same kernel) agrees
    H = ta.placeholder(Y.shape, dtype, "H")
    direct = ta.build(ta.gradient(Y, [X], H), [X, H], num_threads=1)(x, h)
    np.testing.assert_array_equal(direct, gx)


@pytest.mark.parametrize("config", [CONFIGS[0], CONFIGS[2]], ids=lambda c: f"{c[0]}/{c[1]}/{c[2]}")
def test_pool_gradient_splits_ties_evenly(config, rng):
    kernel, stride, padding = config
    X = ta.placeholder((2, 2, 9, 10), "float64", "X")
    Y = _pool(X, kernel, stride, padding, "max")
    f = ta.function(Y, [X], num_threads=1)
    x = np.maximum(np.round(rng.uniform(-2, 2, X.shape)), 0.0)  # a ReLU's zeros: many ties
    h = rng.standard_normal(Y.shape)
    _, res = f.forward(x)
    (gx,) = f.backward(res, h)
    want = np.zeros(X.shape)
    for n, c, oy, ox, pts in _windows(x, kernel, stride, padding, Y.shape[2:]):
        best = max(x[n, c, p, q] for p, q in pts)
        winners = [(p, q) for p, q in pts if x[n, c, p, q] == best]
        for p, q in winners:
            want[n, c, p, q] += h[n, c, oy, ox] / len(winners)
    np.testing.assert_allclose(gx, want, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c[0]}/{c[1]}/{c[2]}")
def test_pool_backward_work_is_one_add_per_window(config):
    """One add at the winner and one test for ties per window, for any window and stride
    (a gather would visit every window of every input element: 9x the windows at 3x3),
    both in one pass over the windows; the routing of a tied window's share to each of its
    points runs under that test and counts as taken (the worst case): ``kh * kw`` per window."""
    kernel, stride, padding = config
    X = ta.placeholder((2, 3, 11, 13), "float32", "X")
    Y = _pool(X, kernel, stride, padding, "max")
    f = ta.function(Y, [X])
    assert f.lower_backward().work == Y.size * (1 + math.prod(kernel))
    assert "scatter-add" in str(f.lower_backward())


def test_pool_scatter_runs_in_parallel_over_channels_with_the_same_result(rng):
    X = ta.placeholder((2, 8, 30, 30), "float32", "X")
    Y = _pool(X, (3, 3), (2, 2), 1, "max")
    H = ta.placeholder(Y.shape, "float32", "H")
    g = ta.gradient(Y, [X], H)
    lowered = ta.lower(g, [X, H], num_threads=2, parallel_min_work=1)
    scatter = [n for n in lowered.program.steps if "scatter-add" in getattr(n, "note", "")]
    assert scatter and all(n.parallel for n in scatter)
    x = np.maximum(rng.standard_normal(X.shape), 0).astype(np.float32)  # ties too
    h = rng.standard_normal(Y.shape).astype(np.float32)
    one = ta.build(g, [X, H], num_threads=1)(x, h)
    two = ta.build(g, [X, H], num_threads=2, parallel_min_work=1)(x, h)
    np.testing.assert_array_equal(one, two)


def test_forward_with_residuals_computes_the_maximum_once(rng):
    """The maximum is computed once, as the output, which the backward reads as it is (no
    copy); the winner is one sum over each window's points equal to it.  Both passes visit
    the points inside ``X`` only (loop bounds, no padding test); the padding's share is an
    index-only sum, one int per window position."""
    X = ta.placeholder((2, 3, 12, 12), "float32", "X")
    Y = _pool(X, (3, 3), (2, 2), 1, "max")
    f = ta.function(Y, [X])
    lowered = f.lower_forward()
    inside = 2 * 3 * sum(min(12, 2 * o + 2) - max(0, 2 * o - 1) for o in range(6)) ** 2
    assert 2 * inside <= lowered.work < 2 * inside + 36 and "winner" not in lowered.text
    x = rng.standard_normal(X.shape).astype(np.float32)
    y, res = f.forward(x)
    np.testing.assert_array_equal(y, f(x))
    assert any(r is y for r in res) and not f._copied  # the output is the saved maximum
    outs = [np.empty(Y.shape, np.float32)] + [np.empty(t.shape, t.dtype) for t in f.plan.extras]
    got = f.residual_kernel(x, out=tuple(outs))
    assert got[0] is outs[0]
    np.testing.assert_array_equal(outs[0], y)
