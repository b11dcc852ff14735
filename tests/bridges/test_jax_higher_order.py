"""``ta.jax.function`` at second order and under a batched ``vmap``.

Oracles: ``jax.test_util.check_grads(order=2)`` (finite differences of the first-order
derivatives, taken by JAX, float64, forward and reverse), the same functions written with
``jax.numpy`` (``jax.grad(jax.grad)``, ``jax.hessian``), and for ``vmap`` the sequential result
(one call per batch element) and pure JAX.
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

import tensorad as ta

jax = pytest.importorskip("jax", reason="an optional extra; make test requires it")
jnp = pytest.importorskip("jax.numpy", reason="an optional extra; make test requires it")
bridge = pytest.importorskip("tensorad.bridges.jax", reason="an optional extra; make test requires it")
nn, topi = ta.topi.nn, ta.topi


def _topi_cases() -> dict:
    path = pathlib.Path(__file__).parents[1] / "tensorad" / "topi" / "test_topi_gradients.py"
    spec = importlib.util.spec_from_file_location("topi_gradient_cases_jax2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES


CASES = _topi_cases()
# a selecting reduction with overlapping windows (the winner is a saved residual at first
# order), a softmax (a shift that cancels), a product reduction; a contraction is in the
# grad-of-grad and Hessian test below
SECOND_ORDER = ["max_pool_pad_overlap", "log_softmax", "prod_axis"]


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


def _args(case, rng):
    shapes, _, domain = CASES[case]
    return [jnp.asarray(rng.uniform(0.5, 1.5, s) if domain == "pos" else rng.standard_normal(s))
            for s in shapes]


@pytest.mark.parametrize("case", SECOND_ORDER)
def test_check_grads_order_two(case, x64, rng):
    from jax.test_util import check_grads

    shapes, build, _ = CASES[case]
    xs = [ta.placeholder(s, "float64", f"in{k}") for k, s in enumerate(shapes)]
    f = ta.jax.function(build(*xs), xs)
    check_grads(f, _args(case, rng), order=2, modes=["fwd", "rev"], eps=1e-5, atol=1e-5, rtol=1e-4)


def _softmax_loss(x, w):
    e = jnp.exp(x @ w.T)
    return (e / e.sum(axis=-1, keepdims=True) * jnp.arange(1.0, 4.0)).sum()


@pytest.fixture
def softmax_loss():
    X, W = ta.placeholder((2, 2), "float64", "X"), ta.placeholder((3, 2), "float64", "W")
    E = topi.exp(nn.dense(X, W))
    C = ta.compute((3,), lambda i: ta.cast("float64", i) + 1.0)
    S = topi.sum(E / topi.sum(E, axis=-1, keepdims=True) * C)
    return ta.jax.function(S, [X, W])


def _close(a, b, tol=1e-9):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


@pytest.mark.slow
def test_grad_of_grad_and_hessian_match_jax(softmax_loss, x64, rng):
    x, w = jnp.asarray(rng.standard_normal((2, 2))), jnp.asarray(rng.standard_normal((3, 2)))

    def second(fn):  # reverse over reverse, mixed partials included
        return jax.grad(lambda x, w: (jax.grad(fn, argnums=1)(x, w) ** 2).sum(), argnums=(0, 1))
    for g, r in zip(jax.jit(second(softmax_loss))(x, w), second(_softmax_loss)(x, w)):
        _close(g, r)
    for g, r in zip(jax.hessian(softmax_loss, argnums=(0, 1))(x, w),  # forward over reverse
                    jax.hessian(_softmax_loss, argnums=(0, 1))(x, w)):
        for a, b in zip(g, r):
            _close(a, b)


def test_first_order_reads_the_saved_winner(x64, rng):
    """Under grad the backward kernel reads where max pooling's winners land from the forward;
    higher orders recompute (the saved values carry no derivative of their own)."""
    X = ta.placeholder((1, 1, 5, 5), "float64", "X")
    P = nn.pool(X, 3, 2, 1, "max")
    f = ta.jax.function(topi.sum(P * P), [X])
    x = jnp.asarray(rng.standard_normal((1, 1, 5, 5)))
    g = jax.grad(f)(x)
    ref = jax.grad(lambda x: (jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 3, 3), (1, 1, 2, 2),
                                                    [(0, 0), (0, 0), (1, 1), (1, 1)]) ** 2).sum())(x)
    _close(g, ref)
    (level,) = f._levels.values()
    assert any(t.name == "max_pool.dest" for t in level.fn.saved)  # where each winner lands


def test_inputs_outside_wrt_carry_no_derivative_at_any_order(x64, rng):
    X, S = ta.placeholder((3,), "float64", "X"), ta.placeholder((3,), "float64", "S")
    f = ta.jax.function(topi.sum(topi.exp(X * S)), [X, S], wrt=[X])
    x, s = jnp.asarray(rng.standard_normal(3)), jnp.asarray(rng.standard_normal(3))
    _close(jax.grad(f)(x, s), s * jnp.exp(x * s))
    _close(jax.grad(lambda x, s: jax.grad(f)(x, s).sum(), argnums=1)(x, s), np.zeros(3))
    _close(jax.jacfwd(jax.grad(f), argnums=1)(x, s), np.zeros((3, 3)))
    _close(jax.grad(lambda x, s: jax.grad(f)(x, s).sum())(x, s), s * s * jnp.exp(x * s))


# ---- vmap -----------------------------------------------------------------------------------
def _layer_jax(x, w):
    y = jax.lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)])
    window = (1, 1, 2, 2)
    return jax.lax.reduce_window(jnp.maximum(y, 0.0), -jnp.inf, jax.lax.max, window, window, "VALID")


@pytest.fixture(scope="module")
def layer():
    X, W = ta.placeholder((2, 2, 6, 6), "float32", "X"), ta.placeholder((3, 2, 3, 3), "float32", "W")
    return ta.jax.function(nn.pool(nn.relu(nn.conv2d(X, W, 1, 1)), 2, 2, 0, "max"), [X, W])


def _count_runs(monkeypatch):
    calls = []
    run = bridge.Program.run

    def counted(self, *arrays):
        calls.append(tuple(tuple(a.shape) for a in arrays))
        return run(self, *arrays)
    monkeypatch.setattr(bridge.Program, "run", counted)
    return calls


@pytest.mark.parametrize("jit", [False, True])
def test_vmap_runs_one_batched_kernel(layer, rng, monkeypatch, jit):
    xs = jnp.asarray(rng.standard_normal((4, 2, 2, 6, 6)).astype(np.float32))
    w = jnp.asarray(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    fn = jax.vmap(layer, in_axes=(0, None))
    calls = _count_runs(monkeypatch)
    got = (jax.jit(fn) if jit else fn)(xs, w)
    assert calls == [((4, 2, 2, 6, 6), (3, 2, 3, 3))]  # one call, the whole batch
    monkeypatch.undo()
    sequential = jnp.stack([layer(x, w) for x in xs])
    _close(got, sequential, 1e-6)
    _close(got, jax.vmap(_layer_jax, in_axes=(0, None))(xs, w), 1e-5)


def test_vmap_over_other_axes_and_of_gradients(layer, rng):
    xs = jnp.asarray(rng.standard_normal((2, 2, 6, 3, 6)).astype(np.float32))  # batch on axis 3
    ws = jnp.asarray(rng.standard_normal((3, 2, 3, 3, 5)).astype(np.float32))  # batch on axis 4
    x0 = jnp.moveaxis(xs, 3, 0)
    w0 = jnp.moveaxis(ws, 4, 0)
    got = jax.vmap(layer, in_axes=(3, None))(xs, w0[0])
    _close(got, jax.vmap(_layer_jax, in_axes=(0, None))(x0, w0[0]), 1e-5)
    got = jax.vmap(jax.vmap(layer, in_axes=(None, 4)), in_axes=(3, None))(xs, ws)  # nested: 3 x 5
    want = jax.vmap(jax.vmap(_layer_jax, in_axes=(None, 0)), in_axes=(0, None))(x0, w0)
    _close(got, want, 1e-5)

    def loss(fn):
        return jax.grad(lambda x, w: (fn(x, w) ** 2).sum(), argnums=(0, 1))
    for g, r in zip(jax.vmap(loss(layer), in_axes=(3, None))(xs, w0[0]),
                    jax.vmap(loss(_layer_jax), in_axes=(0, None))(x0, w0[0])):
        _close(g, r, 1e-4)

    def batch_loss(fn):
        return jax.grad(lambda x, w: (jax.vmap(fn, in_axes=(0, None))(x, w) ** 2).sum(), (0, 1))
    for g, r in zip(batch_loss(layer)(x0, w0[0]), batch_loss(_layer_jax)(x0, w0[0])):
        _close(g, r, 1e-4)
