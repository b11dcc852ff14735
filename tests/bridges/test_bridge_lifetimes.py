"""The bridges release what they build: a function the user drops is freed, with its kernels,
whatever PyTorch or JAX ran it (eager, autograd, ``jit``, ``grad``, ``vmap``); and a float64
program under JAX without 64-bit mode is a clear error naming the switch.

Oracle: ``weakref`` (the function object is collected or not) and the bridges' registry of
live operator pairs, whose size must not grow with the number of functions made and dropped.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import tensorad as ta

torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
jax = pytest.importorskip("jax", reason="an optional extra; make test requires it")
jnp = pytest.importorskip("jax.numpy", reason="an optional extra; make test requires it")


def _dense_tanh(batch: int, dtype: str = "float32"):
    X = ta.placeholder((batch, 3), dtype, "X")
    W = ta.placeholder((4, 3), dtype, "W")
    return ta.topi.tanh(ta.topi.nn.dense(X, W)), X, W


def _torch_dense(batch: int):
    Y, X, W = _dense_tanh(batch)
    return ta.torch.function(Y, [X, W])


def test_a_dropped_torch_function_is_freed_after_backward():
    f = _torch_dense(2)
    r = weakref.ref(f.function)
    x, w = torch.randn(2, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    f(x, w).sum().backward()
    with torch.no_grad():
        f(x, w)
    del f
    gc.collect()
    assert r() is None


def test_a_live_autograd_graph_keeps_its_function_until_backward():
    f = _torch_dense(2)
    r = weakref.ref(f.function)
    x, w = torch.randn(2, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    y = f(x, w)
    del f
    gc.collect()
    assert r() is not None  # the graph still needs the backward
    y.sum().backward()
    torch.testing.assert_close(w.grad, ((1 - y.detach() ** 2).T @ x.detach()))
    del y
    gc.collect()
    assert r() is None


def test_many_batch_sizes_hold_a_bounded_number_of_operators():
    from tensorad.bridges import torch as bridge

    w = torch.randn(4, 3, requires_grad=True)
    before = len(bridge._LIVE)
    alive = []
    for batch in range(1, 7):  # (any function kept alive would show: one is enough)
        f = _torch_dense(batch)
        alive.append(weakref.ref(f.function))
        f(torch.randn(batch, 3), w).sum().backward()
        del f
    gc.collect()
    assert len(bridge._LIVE) <= before
    assert sum(r() is not None for r in alive) == 0


def _run_jax(mode: str, f, x, w):
    if mode == "eager":
        return f(x, w)
    if mode == "jit":
        return jax.jit(lambda a, b: f(a, b))(x, w)
    if mode == "grad":
        return jax.grad(lambda a, b: f(a, b).sum(), argnums=1)(x, w)
    if mode == "jit_grad":
        return jax.jit(jax.grad(lambda a, b: f(a, b).sum(), argnums=1))(x, w)
    return jax.vmap(lambda a: f(a, w))(jnp.stack([x] * 5))


@pytest.mark.parametrize("mode", ["eager", "jit", "grad", "jit_grad", "vmap"])
def test_a_dropped_jax_function_is_freed(mode):
    """Nothing of tensorad's keeps a dropped function.  Under ``jax.jit`` the executable JAX
    compiled calls the kernel back, and JAX keeps recent executables in caches of its own
    (``jax.clear_caches()`` empties them): those are JAX's to bound, so they are emptied first."""
    Y, X, W = _dense_tanh(2)
    f = ta.jax.function(Y, [X, W])
    refs = [weakref.ref(f.function), weakref.ref(f.base)]
    np.asarray(_run_jax(mode, f, jnp.ones((2, 3)), jnp.ones((4, 3))))
    del f
    if "jit" in mode:
        jax.clear_caches()
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_float64_without_jax_x64_names_the_switch():
    Y, X, W = _dense_tanh(2, "float64")
    f = ta.jax.function(Y, [X, W])
    x, w = np.ones((2, 3)), np.ones((4, 3))
    with jax.enable_x64(False):
        with pytest.raises(TypeError, match=r'jax.config.update\("jax_enable_x64", True\)'):
            f(x, w)
        with pytest.raises(TypeError, match=r'jax.config.update\("jax_enable_x64", True\)'):
            jax.jit(f)(x, w)
    with jax.enable_x64(True):
        want = np.tanh(x @ w.T)
        np.testing.assert_allclose(f(x, w), want)
        np.testing.assert_allclose(jax.jit(f)(x, w), want)
