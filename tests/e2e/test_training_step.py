"""A user's workflow: train a 2-layer MLP with softmax cross-entropy by SGD on NumPy arrays.

The model and loss are written with ``ta.topi`` (a scalar loss), the gradients come from
``ta.gradient`` (with ``head=None`` and with a scalar head), the loss and its gradients are
compiled into kernels with ``ta.build``, and the training loop is plain NumPy.  The oracle is the
hand-derived backward pass of the MLP, written below in NumPy:

    Z1 = X W1^T + b1,  A = relu(Z1),  Z = A W2^T + b2,  P = softmax(Z) (rows)
    loss = -1/n sum_{i,c} T[i,c] log P[i,c]
    dZ  = (P * rowsum(T) - T) / n          dW2 = dZ^T A      db2 = sum_i dZ
    dA  = dZ W2                            dZ1 = dA * [Z1 > 0]
    dW1 = dZ1^T X                          db1 = sum_i dZ1
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

topi, nn = ta.topi, ta.topi.nn
N, D, HIDDEN, C = 24, 5, 8, 3


def _model(dtype="float32"):
    X, T = ta.placeholder((N, D), dtype, "X"), ta.placeholder((N, C), dtype, "T")
    W1, b1 = ta.placeholder((HIDDEN, D), dtype, "W1"), ta.placeholder((HIDDEN,), dtype, "b1")
    W2, b2 = ta.placeholder((C, HIDDEN), dtype, "W2"), ta.placeholder((C,), dtype, "b2")
    hidden = nn.relu(nn.dense(X, W1, b1))
    logp = nn.log_softmax(nn.dense(hidden, W2, b2))
    loss = topi.multiply(topi.sum(topi.multiply(T, logp)), -1.0 / N)
    return loss, [X, T], [W1, b1, W2, b2]


def _numpy_loss_and_grads(x, t, w1, b1, w2, b2):
    x, t, w1, b1, w2, b2 = (np.asarray(a, np.float64) for a in (x, t, w1, b1, w2, b2))
    z1 = x @ w1.T + b1
    a = np.maximum(z1, 0.0)
    z = a @ w2.T + b2
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    p = np.exp(logp)
    loss = -(t * logp).sum() / len(x)
    dz = (p * t.sum(axis=1, keepdims=True) - t) / len(x)
    dw2, db2 = dz.T @ a, dz.sum(axis=0)
    dz1 = (dz @ w2) * (z1 > 0)
    dw1, db1 = dz1.T @ x, dz1.sum(axis=0)
    return loss, [dw1, db1, dw2, db2]


def _problem(rng):
    """Three Gaussian blobs in 5-d, one-hot labels, and small random initial weights."""
    centers = rng.normal(0, 2.0, size=(C, D))
    labels = np.arange(N) % C
    x = (centers[labels] + rng.normal(0, 0.7, size=(N, D))).astype(np.float32)
    t = np.eye(C, dtype=np.float32)[labels]
    params = [rng.normal(0, 0.5, size=(HIDDEN, D)), rng.uniform(0.05, 0.2, size=HIDDEN),
              rng.normal(0, 0.5, size=(C, HIDDEN)), np.zeros(C)]
    return x, t, [p.astype(np.float32) for p in params]


def test_loss_is_a_scalar_and_gradients_have_the_parameters_shapes():
    loss, _, params = _model()
    assert loss.shape == () and loss.dtype == "float32"
    for p, g in zip(params, ta.gradient(loss, params)):
        assert g.shape == p.shape and g.dtype == p.dtype


@pytest.mark.parametrize("threads", [1, 2])
def test_sgd_on_compiled_kernels(threads, rng):
    loss, data_in, params = _model()
    grads = ta.gradient(loss, params)  # head=None: the scalar loss's own gradient
    inputs = data_in + params
    step = ta.build([loss, *grads], inputs, num_threads=threads, parallel_min_work=0)
    x, t, values = _problem(rng)
    outs = (np.empty((), np.float32),) + tuple(np.empty(p.shape, np.float32) for p in params)
    lr, losses = 0.3, []
    for _ in range(40):
        got_loss, *got = step(x, t, *values, out=outs)  # preallocated outputs, reused each step
        want_loss, want = _numpy_loss_and_grads(x, t, *values)
        np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
        for p, g, w in zip(params, got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=f"gradient by {p.name}")
        losses.append(float(got_loss))
        values = [v - np.float32(lr) * g for v, g in zip(values, got)]
    assert all(b <= a + 1e-6 for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.5 * losses[0], losses


def test_scalar_head_scales_the_gradient(rng):
    """A 0-d head (the upstream gradient of the loss) multiplies every gradient."""
    loss, data_in, params = _model()
    s = ta.placeholder((), "float32", "s")
    grads = ta.gradient(loss, params, s)
    kern = ta.build(grads, data_in + params + [s])
    x, t, values = _problem(rng)
    _, want = _numpy_loss_and_grads(x, t, *values)
    for scale in (1.0, -2.5):
        got = kern(x, t, *values, np.array(scale, np.float32))
        for p, g, w in zip(params, got, want):
            np.testing.assert_allclose(g, scale * w, rtol=1e-4, atol=1e-6, err_msg=f"{p.name} x {scale}")


def test_float64_training_step_matches_the_formula_tightly(rng):
    loss, data_in, params = _model("float64")
    kern = ta.build(ta.gradient(loss, params), data_in + params, fastmath=False)
    x, t, values = _problem(rng)
    x, t, values = x.astype(np.float64), t.astype(np.float64), [v.astype(np.float64) for v in values]
    _, want = _numpy_loss_and_grads(x, t, *values)
    for p, g, w in zip(params, kern(x, t, *values), want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14, err_msg=f"gradient by {p.name}")
