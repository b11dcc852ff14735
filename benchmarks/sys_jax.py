"""JAX as a peer: ``jax.jit`` of the forward, and ``jax.jit`` of ``jax.vjp`` with the head.

The compile time of the first call is recorded as ``jit``; every timed call ends with
``block_until_ready`` (JAX dispatches asynchronously).  Inputs are put on the device once.
"""

from __future__ import annotations

import time

import numpy as np

from .systems import Phase, Unavailable, as_list, import_failure

jax = jnp = None


def setup(threads: int) -> dict:
    global jax, jnp
    try:
        import jax as _jax
        import jax.numpy as _jnp
    except ImportError as e:
        raise import_failure("jax", e) from e
    jax, jnp = _jax, _jnp
    jax.config.update("jax_enable_x64", False)
    return {"version": jax.__version__, "backend": jax.default_backend()}


def _pool(x, kind):
    # A Python-scalar init lets JAX recognise the max/sum window reduction (and its derivative).
    init, op = (-float("inf"), jax.lax.max) if kind == "max" else (0.0, jax.lax.add)
    y = jax.lax.reduce_window(x, init, op, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    return y if kind == "max" else y * jnp.float32(0.25)


def _model(kind: str):
    def softmax_homebrew(X, W):
        e = jnp.exp(X @ W.T)
        return e / e.sum(-1, keepdims=True)
    return {
        "dense": lambda X, W, B: X @ W.T + B,
        "conv2d": lambda X, W: jax.lax.conv_general_dilated(X, W, (1, 1), "VALID"),
        "avg_pool": lambda X: _pool(X, "avg"),
        "max_pool": lambda X: _pool(X, "max"),
        "softmax_homebrew": softmax_homebrew,
        "flatten": lambda X: X.reshape(X.shape[0], -1),
        "softmax": lambda X: jax.nn.softmax(X, axis=-1),
    }[kind]


def _block(r):
    return jax.block_until_ready(r)


def _jitted(fn, args) -> Phase:
    t0 = time.perf_counter()
    _block(fn(*args))
    jit_s = time.perf_counter() - t0
    return Phase(fn=lambda: fn(*args), outputs=lambda r: [np.asarray(x) for x in as_list(r)],
                 sync=_block, prep_s={"jit": jit_s})


def forward(workload, arrays) -> Phase:
    return _jitted(jax.jit(_model(workload.kind)), [jnp.asarray(a) for a in arrays.values()])


def backward(workload, arrays, head) -> Phase:
    f = _model(workload.kind)
    names = list(arrays)
    idx = [names.index(g) for g in workload.grads]

    def vjp(*args):
        h = args[-1]
        _, pullback = jax.vjp(f, *args[:-1])
        grads = pullback(h)
        return tuple(grads[i] for i in idx)
    args = [jnp.asarray(a) for a in arrays.values()] + [jnp.asarray(head)]
    return _jitted(jax.jit(vjp), args)


def sweep(task: str, arrays) -> Phase:
    fns = {
        "gemm": lambda A, B: A @ B,
        "add": lambda A, B: A + B,
        "relu": lambda A: jnp.maximum(A, 0.0),
        "avg_pool": lambda X: _pool(X, "avg"),
    }
    if task not in fns:
        raise Unavailable(f"no sweep task {task!r}")
    return _jitted(jax.jit(fns[task]), [jnp.asarray(a) for a in arrays.values()])
