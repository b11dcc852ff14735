"""``ta.jax.function``: tensorad programs as JAX functions (first order; see
``test_jax_higher_order.py`` for second order and batched ``vmap``).

Oracles: ``jax.test_util.check_grads`` (finite differences taken by JAX, float64) for one op of
each kind of the gradient test table (the PyTorch bridge's tests take every op: the bridges share
``ta.function``), and the same layer written with ``jax.numpy``/``jax.lax`` under ``jit``,
``grad`` and ``vmap``.
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

import tensorad as ta

jax = pytest.importorskip("jax", reason="an optional extra; make test requires it")
jnp = pytest.importorskip("jax.numpy", reason="an optional extra; make test requires it")
nn = ta.topi.nn


def _topi_cases() -> dict:
    path = pathlib.Path(__file__).parents[1] / "tensorad" / "topi" / "test_topi_gradients.py"
    spec = importlib.util.spec_from_file_location("topi_gradient_cases_jax", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES


CASES = _topi_cases()
# one op of each kind: contraction, convolution, both pools, softmax, selecting and product
# reductions, broadcasting, a data-movement transform, a batched matmul, elementwise math
KINDS = ["dense_bias", "conv2d_stride_pad", "avg_pool_pad", "max_pool_pad_overlap", "log_softmax",
         "max_axis", "prod_axis", "divide_broadcast", "concatenate", "matmul_batched", "sqrt"]


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize("case", KINDS)
def test_check_grads_of_each_kind_of_topi_op(case, x64, rng):
    from jax.test_util import check_grads

    shapes, build, domain = CASES[case]
    xs = [ta.placeholder(s, "float64", f"in{k}") for k, s in enumerate(shapes)]
    f = ta.jax.function(build(*xs), xs)
    args = [jnp.asarray(rng.uniform(0.5, 1.5, s) if domain == "pos" else rng.standard_normal(s))
            for s in shapes]
    check_grads(f, args, order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-5)


def _layer_jax(x, w):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)])
    y = jnp.maximum(y, 0.0)
    return jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


@pytest.fixture(scope="module")
def layer():
    X, W = ta.placeholder((2, 2, 6, 6), "float32", "X"), ta.placeholder((3, 2, 3, 3), "float32", "W")
    return ta.jax.function(nn.pool(nn.relu(nn.conv2d(X, W, 1, 1)), 2, 2, 0, "max"), [X, W])


def _data(rng, batch=()):
    return (jnp.asarray(rng.standard_normal(batch + (2, 2, 6, 6)).astype(np.float32)),
            jnp.asarray(rng.standard_normal((3, 2, 3, 3)).astype(np.float32)))


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_jit_and_grad_match_jax(layer, rng):
    x, w = _data(rng)
    _close(jax.jit(layer)(x, w), _layer_jax(x, w))

    def loss(fn):
        return lambda x, w: (fn(x, w) ** 2).sum()
    got = jax.jit(jax.grad(loss(layer), argnums=(0, 1)))(x, w)
    want = jax.grad(loss(_layer_jax), argnums=(0, 1))(x, w)
    for g, r in zip(got, want):
        _close(g, r)


def test_vmap_of_the_function_and_of_its_gradient(layer, rng):
    xs, w = _data(rng, batch=(3,))
    _close(jax.vmap(layer, in_axes=(0, None))(xs, w), jax.vmap(_layer_jax, in_axes=(0, None))(xs, w))
    got = jax.vmap(jax.grad(lambda x, w: layer(x, w).sum(), argnums=1), in_axes=(0, None))(xs, w)
    want = jax.vmap(jax.grad(lambda x, w: _layer_jax(x, w).sum(), argnums=1), in_axes=(0, None))(xs, w)
    _close(got, want)


def test_the_saved_values_travel_as_one_block(layer, rng):
    """The forward under ``grad`` handed JAX each saved value as an operand of its own (a callback
    argument and a check each); it returns one block of bytes, which the backward reads as the
    PyTorch bridge's does, under ``jit`` as without it."""
    x, w = _data(rng)
    f = layer.function
    assert len(f.plan.extras) >= 2  # (the layer keeps values that are not outputs)

    def loss(x, w):
        return (layer(x, w) ** 2).sum()
    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(x, w).jaxpr
    calls = [e for e in jaxpr.eqns if e.primitive.name == "tensorad_call"]
    forward = calls[0].outvars
    assert len(forward) == len(f.outputs) + 1 and forward[-1].aval.dtype == np.uint8
    assert forward[-1].aval.shape == (f.layout.nbytes,)  # (wrt: both, as the function's)
    want = jax.grad(loss, argnums=(0, 1))(x, w)
    for g, r in zip(jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w), want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(r))


def test_inputs_outside_wrt_get_zero_cotangents(rng, x64):
    X, N = ta.placeholder((4,), "float64", "X"), ta.placeholder((4,), "int32", "N")
    S = ta.placeholder((4,), "float64", "S")
    Y = ta.compute((4,), lambda i: X[i] * S[i] * ta.cast("float64", N[i]), "Y")
    f = ta.jax.function(Y, [X, N, S], wrt=[X])
    x, n, s = jnp.asarray(rng.standard_normal(4)), jnp.arange(4, dtype=jnp.int32), jnp.ones(4)
    gx, gs = jax.grad(lambda x, s: f(x, n, s).sum(), argnums=(0, 1))(x, s)
    _close(gx, np.arange(4.0))
    _close(gs, np.zeros(4))


def test_bad_arguments_are_clear_errors(layer, rng):
    x, w = _data(rng)
    with pytest.raises(TypeError, match="takes 2 arrays \\(X, W\\), got 1"):
        layer(x)
    with pytest.raises(ValueError, match="input X: expected shape \\[2, 2, 6, 6\\], got \\[2, 6, 6\\]"):
        layer(x[0], w)
    with pytest.raises(TypeError, match="input W: expected dtype float32, got int32"):
        layer(x, w.astype(jnp.int32))
