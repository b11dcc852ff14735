"""conv -> bias -> ReLU -> max pool: the gradient through the pool is one masked scatter buffer.

The pool's gradient is two scatter-adds (the winners, the other tied points); behind a ReLU
both consumers of the pool input's gradient (the weight and the bias gradients) read
``select(z <= 0, 0, R1 + R2)``.  ``codegen/passes/shared_scatters.py`` makes that one tensor that both
scatters add into under the mask (one fill; each consumer reads one array).  Oracle: the pool
gradient by a NumPy loop over the windows (every maximum of a window gets ``H / ties``, the
convention of docs/conventions.md), pushed through convolution, bias and ReLU by float64 torch
autograd; ties both from the ReLU's zeros and between positive values (integer data).
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
nn = ta.topi.nn

# (kernel, stride, padding): tiling, overlapping with padding, stride 1
CONFIGS = [(2, 2, 0), (3, 2, 1), (3, 1, 1)]


def _positive_part(Z):
    """ReLU written with the zero in the other branch (``select(z > 0, z, 0)``): its gradient
    masks with ``select(c, R, 0)``, the mask not negated."""
    return ta.compute(Z.shape, lambda *i: ta.select(Z[i] > 0, Z[i], ta.const(0.0, Z.dtype)), "pos")


def _program(shape, wshape, dtype, kernel, stride, padding, relu=nn.relu):
    X = ta.placeholder(shape, dtype, "X")
    W = ta.placeholder(wshape, dtype, "W")
    B = ta.placeholder((wshape[0],), dtype, "B")
    Z = nn.conv2d(X, W, 1, 1) + ta.topi.reshape(B, (wshape[0], 1, 1))
    Y = nn.pool(relu(Z), kernel, stride, [padding] * 4, "max")
    return X, W, B, Y


def _pool_gradient(a, h, kernel, stride, padding):
    """d(max pool)/d(input) applied to ``h``, ties split evenly (NumPy loop over windows)."""
    g = np.zeros(a.shape)
    for n in range(a.shape[0]):
        for c in range(a.shape[1]):
            for oy in range(h.shape[2]):
                for ox in range(h.shape[3]):
                    pts = [(oy * stride - padding + r, ox * stride - padding + s)
                           for r in range(kernel) for s in range(kernel)]
                    pts = [(y, x) for y, x in pts if 0 <= y < a.shape[2] and 0 <= x < a.shape[3]]
                    best = max(a[n, c, y, x] for y, x in pts)
                    winners = [(y, x) for y, x in pts if a[n, c, y, x] == best]
                    for y, x in winners:
                        g[n, c, y, x] += h[n, c, oy, ox] / len(winners)
    return g


def _oracle(x, w, b, h, kernel, stride, padding):
    tx, tw, tb = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (x, w, b))
    z = torch.nn.functional.conv2d(tx, tw, tb, padding=1)
    a = torch.relu(z)
    a.backward(torch.tensor(_pool_gradient(a.detach().numpy(), h, kernel, stride, padding)))
    return tw.grad.numpy(), tb.grad.numpy()


# (config, threads, ReLU's spelling, checkpoint policy: recompute_all recomputes the
# convolution in the backward, so the shared tensor's mask reads a value computed there)
TIES = [(c, t, "relu", "default") for c in CONFIGS for t in (1, 2)] + [
    (CONFIGS[0], 1, "positive part", "default"), (CONFIGS[1], 2, "positive part", "recompute_all"),
    (CONFIGS[2], 1, "relu", "recompute_all")]


@pytest.mark.parametrize("config,threads,relu,policy", TIES,
                         ids=[f"{c[0]}x{c[0]}/{c[1]} pad {c[2]}-{t}t-{r}-{p}" for c, t, r, p in TIES])
def test_weight_and_bias_gradients_at_ties(config, threads, relu, policy, rng):
    kernel, stride, padding = config
    X, W, B, Y = _program((2, 1, 9, 10), (3, 1, 3, 3), "float64", kernel, stride, padding,
                          nn.relu if relu == "relu" else _positive_part)
    f = ta.function(Y, [X, W, B], wrt=[W, B], policy=policy, num_threads=threads, parallel_min_work=1)
    # small integers: exact sums, so windows tie between positive values as well as at the
    # ReLU's zeros
    x = rng.integers(-2, 3, X.shape).astype(np.float64)
    w = rng.integers(-1, 2, W.shape).astype(np.float64)
    b = np.array([0.0, 1.0, -1.0])
    h = rng.standard_normal(Y.shape)
    _, res = f.forward(x, w, b)
    gw, gb = f.backward(res, h)
    a = np.maximum(_oracle_preactivation(x, w, b), 0)
    assert _has_positive_ties(a, kernel, stride, padding)  # (else the test shows less)
    want_w, want_b = _oracle(x, w, b, h, kernel, stride, padding)
    np.testing.assert_allclose(gw, want_w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, want_b, rtol=1e-12, atol=1e-12)


def _oracle_preactivation(x, w, b):
    return torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), padding=1).numpy()


def _has_positive_ties(a, kernel, stride, padding):
    n, c = a.shape[:2]
    for oy in range(0, a.shape[2] - kernel + 1, stride):
        for ox in range(0, a.shape[3] - kernel + 1, stride):
            win = a[:, :, oy:oy + kernel, ox:ox + kernel].reshape(n, c, -1)
            best = win.max(axis=2, keepdims=True)
            if ((win == best).sum(axis=2)[best[..., 0] > 0] > 1).any():
                return True
    return False


def test_float32_matches_torch_without_ties(rng):
    """Random data (no ties): the weight and bias gradients of PyTorch's own layer."""
    X, W, B, Y = _program((4, 1, 12, 12), (8, 1, 3, 3), "float32", 2, 2, 0)
    f = ta.function(Y, [X, W, B], wrt=[W, B])
    x = rng.standard_normal(X.shape).astype(np.float32)
    w = (0.3 * rng.standard_normal(W.shape)).astype(np.float32)
    b = (0.1 * rng.standard_normal(B.shape)).astype(np.float32)
    h = rng.standard_normal(Y.shape).astype(np.float32)
    _, res = f.forward(x, w, b)
    gw, gb = f.backward(res, h)
    tw, tb = (torch.tensor(v, requires_grad=True) for v in (w, b))
    F = torch.nn.functional
    F.max_pool2d(F.relu(F.conv2d(torch.tensor(x), tw, tb, padding=1)), 2, 2).backward(torch.tensor(h))
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gb, tb.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c[0]}x{c[0]}/{c[1]} pad {c[2]}")
@pytest.mark.parametrize("relu", ["relu", "positive part"])
def test_one_masked_scatter_buffer_feeds_both_consumers(config, relu):
    """The backward allocates one activation-sized buffer (not the winners' and the ties'
    separately), both scatters add into it in one nest, and neither consumer reads the mask's
    operands again."""
    kernel, stride, padding = config
    X, W, B, Y = _program((2, 4, 12, 12), (6, 4, 3, 3), "float32", kernel, stride, padding,
                          nn.relu if relu == "relu" else _positive_part)
    f = ta.function(Y, [X, W, B], wrt=[W, B])
    lowered = f.lower_backward()
    activation = (2, 6, 12, 12)
    assert [s for _, s, _ in lowered.temporaries].count(activation) == 1, str(lowered)
    scatters = [n for n in lowered.program.steps if "scatter-add" in getattr(n, "note", "")]
    assert len(scatters) == 1 and " + " in scatters[0].note
    shared = next(n for n, s, _ in lowered.temporaries if s == activation)
    nests = str(lowered).split("# nest ")[1:]
    consumers = [t for t in nests if f"{shared}[" in t and "scatter-add" not in t.splitlines()[0]]
    assert len(consumers) >= 2 and all("conv2d[" not in t for t in consumers)
