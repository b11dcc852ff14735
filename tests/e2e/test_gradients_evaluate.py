"""End to end: gradients of the seed's workloads through the facade, checked with ta.evaluate.

Each workload of the seed's benchmark table (in small shapes) is differentiated with
``ta.JacobianRecursive`` -- the optimizer included, as a user gets it -- and with
``ta.Jacobian`` where the seed shows it, then compared with central finite differences of
``ta.evaluate`` of the forward program in float64.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

F = "float64"


def _check(y, inputs, rng, numeric_grad, head=True, lo=-1.0, hi=1.0):
    data = {x: rng.uniform(lo, hi, size=x.shape) for x in inputs}
    h = None
    if head:
        h = ta.placeholder(y.shape, F, name="H")
        data[h] = rng.uniform(-1, 1, size=y.shape)
    grads = ta.JacobianRecursive(y, inputs, h)
    got = ta.evaluate(grads, data)
    want = numeric_grad(lambda *a: ta.evaluate(y, dict(zip(inputs, a))), [data[x] for x in inputs],
                        head=data[h] if head else None)
    for g, a, w, x in zip(grads, got, want, inputs):
        assert g.shape == w.shape and g.dtype == x.dtype
        np.testing.assert_allclose(a, w, atol=1e-7, rtol=1e-6, err_msg=f"gradient by {x.name}")


def _dense():
    x = ta.placeholder((3, 5), F, name="X")
    w = ta.placeholder((4, 5), F, name="W")
    b = ta.placeholder((4,), F, name="B")
    return ta.topi.nn.dense(x, w, b), [x, w, b]


def _conv2d():
    x = ta.placeholder((2, 2, 5, 5), F, name="X")
    w = ta.placeholder((3, 2, 3, 3), F, name="W")
    return ta.topi.nn.conv2d(x, w, 1, 0), [x, w]


def _conv2d_padded_strided():
    x = ta.placeholder((1, 2, 5, 5), F, name="X")
    w = ta.placeholder((2, 2, 3, 3), F, name="W")
    return ta.topi.nn.conv2d(x, w, 2, 1), [x, w]


def _avg_pool():
    x = ta.placeholder((1, 2, 6, 6), F, name="X")
    return ta.topi.nn.pool(x, [2, 2], [2, 2], [0, 0, 0, 0], "avg"), [x]


def _avg_pool_overlapping():
    x = ta.placeholder((1, 1, 7, 7), F, name="X")
    return ta.topi.nn.pool(x, [3, 3], [2, 2], [1, 1, 1, 1], "avg"), [x]


def _max_pool():
    x = ta.placeholder((1, 2, 6, 6), F, name="X")
    return ta.topi.nn.pool(x, [2, 2], [2, 2], [0, 0, 0, 0], "max"), [x]


def _max_pool_padded():
    x = ta.placeholder((1, 1, 5, 5), F, name="X")
    return ta.topi.nn.pool(x, [3, 3], [2, 2], [1, 1, 1, 1], "max"), [x]


def _softmax_homebrew():
    x = ta.placeholder((3, 4), F, name="X")
    w = ta.placeholder((5, 4), F, name="W")
    exps = ta.topi.exp(ta.topi.nn.dense(x, w))
    sumexps = ta.topi.sum(exps, axis=-1, keepdims=True)
    return exps / sumexps, [x, w]


def _softmax_topi():
    x = ta.placeholder((3, 5), F, name="X")
    return ta.topi.nn.softmax(x), [x]


def _flatten():
    x = ta.placeholder((2, 3, 2, 4), F, name="X")
    return ta.topi.nn.flatten(x), [x]


def _mlp_loss():
    x = ta.placeholder((4, 3), F, name="X")
    w1 = ta.placeholder((5, 3), F, name="W1")
    w2 = ta.placeholder((2, 5), F, name="W2")
    h = ta.topi.nn.relu(ta.topi.nn.dense(x, w1))
    logits = ta.topi.nn.dense(h, w2)
    logp = ta.topi.nn.log_softmax(logits)
    return ta.topi.sum(logp), [x, w1, w2]


WORKLOADS = {"dense": _dense, "conv2d": _conv2d, "conv2d_padded_strided": _conv2d_padded_strided,
             "avg_pool": _avg_pool, "avg_pool_overlapping": _avg_pool_overlapping,
             "max_pool": _max_pool, "max_pool_padded": _max_pool_padded,
             "softmax_homebrew": _softmax_homebrew, "softmax_topi": _softmax_topi,
             "flatten": _flatten, "mlp_loss": _mlp_loss}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workload_gradients(name, rng, numeric_grad):
    y, inputs = WORKLOADS[name]()
    _check(y, inputs, rng, numeric_grad)


def test_scalar_loss_default_head(rng, numeric_grad):
    y, inputs = _mlp_loss()
    _check(y, inputs, rng, numeric_grad, head=False)


def test_full_jacobian_with_default_head(rng, numeric_grad):
    x = ta.placeholder((2, 3), F, name="X")
    y = ta.topi.nn.softmax(x)
    _check(y, [x], rng, numeric_grad, head=False)


def test_seed_jacobian_optimized_and_not_agree(rng):
    x = ta.placeholder((3, 5), F, name="X")
    w = ta.placeholder((4, 5), F, name="W")
    y = ta.topi.nn.dense(x, w)
    data = {x: rng.normal(size=x.shape), w: rng.normal(size=w.shape)}
    raw = ta.evaluate(ta.Jacobian(y, w, False), data)
    opt = ta.evaluate(ta.Jacobian(y, w), data)
    want = np.einsum("ik,jl->ijlk", data[x], np.eye(4))  # d Y[i,j] / d W[l,k] = X[i,k] [j == l]
    np.testing.assert_allclose(raw, want, atol=1e-12)
    np.testing.assert_allclose(opt, want, atol=1e-12)


def test_hessian_vector_product_of_a_loss(rng, numeric_grad):
    y, (x, w1, w2) = _mlp_loss()
    v = ta.placeholder(w2.shape, F, name="V")
    (hv,) = ta.hessian_vector_product(y, [w2], [v])
    (g,) = ta.JacobianRecursive(y, [w2])
    data = {x: rng.uniform(-1, 1, x.shape), w1: rng.uniform(-1, 1, w1.shape),
            w2: rng.uniform(-1, 1, w2.shape), v: rng.uniform(-1, 1, w2.shape)}
    jac = numeric_grad(lambda a: ta.evaluate(g, {**data, w2: a}), [data[w2]])[0]
    want = np.tensordot(jac, data[v], axes=2)
    np.testing.assert_allclose(ta.evaluate(hv, data), want, atol=1e-6)


def test_gradcheck_through_the_facade():
    y, inputs = _softmax_homebrew()
    assert ta.gradcheck(y, inputs)
