"""JAX as a peer: ``jax.jit`` of the forward; the backward applies a saved pullback.

The backward runs ``jax.vjp`` of the jitted forward once, outside the timing, and times a
jitted application of the pullback it returned to the head: the residuals the forward saved are
reused, as in a training step (PyTorch's autograd does the same).  The compile time of the
first call is recorded as ``jit``; every timed call ends with ``block_until_ready`` (JAX
dispatches asynchronously).  Inputs are put on the device once.
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


def _pool(x, kind, window=2, stride=2, pad=0):
    # A Python-scalar init lets JAX recognise the max/sum window reduction (and its derivative).
    init, op = (-float("inf"), jax.lax.max) if kind == "max" else (0.0, jax.lax.add)
    pads = [(0, 0), (0, 0), (pad, pad), (pad, pad)]
    y = jax.lax.reduce_window(x, init, op, (1, 1, window, window), (1, 1, stride, stride), pads)
    return y if kind == "max" else y * jnp.float32(1.0 / (window * window))


def _normalize(x, axes, eps=1e-5):
    mean = x.mean(axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axes, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps)


def _nll(logits, labels):
    lp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(lp, labels.reshape(-1, 1), axis=1).mean()


def _transformer(heads: int):
    def block(tokens, labels, E, g1, b1, Wq, Wk, Wv, Wo, g2, b2, W1, c1, W2, Wout):
        b, n = tokens.shape
        d = E.shape[1]

        def split(t):  # [b, n, d] -> [b, heads, n, d / heads]
            return t.reshape(b, n, heads, d // heads).transpose(0, 2, 1, 3)
        x = E[tokens]
        h = _normalize(x, (-1,)) * g1 + b1
        q, k, v = split(h @ Wq), split(h @ Wk), split(h @ Wv)
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(d // heads))
        s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -jnp.inf)
        a = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)
        x = x + a.transpose(0, 2, 1, 3).reshape(b, n, d) @ Wo
        h = jax.nn.gelu((_normalize(x, (-1,)) * g2 + b2) @ W1 + c1, approximate=False)
        x = x + h @ W2
        return _nll((x @ Wout).reshape(b * n, -1), labels)
    return block


def _cnn(X, W, B, Wd, Bd, labels):
    y = jax.lax.conv_general_dilated(X, W, (1, 1), [(1, 1), (1, 1)]) + B[None, :, None, None]
    h = _pool(jax.nn.relu(y), "max")
    return _nll(h.reshape(h.shape[0], -1) @ Wd.T + Bd, labels)


def _resnet(X, W1, g1, b1, W2, g2, b2, Wd, Bd, labels):
    def conv_bn(x, w, g, b):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)])
        return _normalize(y, (0, 2, 3)) * g[:, None, None] + b[:, None, None]
    h = jax.nn.relu(conv_bn(X, W1, g1, b1))
    h = jax.nn.relu(conv_bn(h, W2, g2, b2) + X)
    return _nll(h.mean((2, 3)) @ Wd.T + Bd, labels)


def _mlp(X, W1, B1, W2, B2, W3, B3, labels):
    h = jax.nn.relu(jax.nn.relu(X @ W1.T + B1) @ W2.T + B2)
    return _nll(h @ W3.T + B3, labels)


def _lstm(X, h0, c0, Wih, Whh, b):
    h, c = h0, c0
    for x in X:   # unrolled, like the other systems' programs
        i, f, g, o = jnp.split(x @ Wih.T + h @ Whh.T + b, 4, axis=1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return h.sum()


def _conv(params: dict):
    """The ``convs`` suite's layer in ``jax.lax`` (groups from the shapes).  The transposed
    convolution is the convolution of the stride-dilated input with the flipped kernel,
    ``W [in, out, kh, kw]`` read as ``[out, in]``, padded ``d (k - 1) - p`` on each side."""
    s, p, d = params["stride"], params["padding"], params["dilation"]

    def layer(X, W, B=None):
        if params.get("transposed"):
            kh, kw = W.shape[2:]
            pads = [(d * (kh - 1) - p,) * 2, (d * (kw - 1) - p,) * 2]
            y = jax.lax.conv_general_dilated(X, jnp.flip(W, (2, 3)).transpose(1, 0, 2, 3), (1, 1), pads,
                                             lhs_dilation=(s, s), rhs_dilation=(d, d))
        else:
            y = jax.lax.conv_general_dilated(X, W, (s, s), [(p, p), (p, p)], rhs_dilation=(d, d),
                                             feature_group_count=X.shape[1] // W.shape[1])
        if B is not None:
            y = y + B[None, :, None, None]
        return jax.nn.relu(y) if params.get("relu") else y
    return layer


def _model(kind: str, params: dict | None = None):
    """The workload's forward in JAX, as its users write it (``jax.numpy``, ``jax.nn``)."""
    params = params or {}
    if kind == "transformer":
        return _transformer(params["heads"])
    if kind == "cnn":
        return _cnn
    if kind == "resnet":
        return _resnet
    if kind == "mlp":
        return _mlp
    if kind == "lstm":
        return _lstm
    if kind == "conv":
        return _conv(params)

    def softmax_homebrew(X, W):
        e = jnp.exp(X @ W.T)
        return e / e.sum(-1, keepdims=True)

    def conv_relu(X, W):
        s, p = params["stride"], params["padding"]
        return jax.nn.relu(jax.lax.conv_general_dilated(X, W, (s, s), [(p, p), (p, p)]))

    def attention(Q, K, V, causal=False):
        scores = jnp.einsum("bqd,bkd->bqk", Q, K) / jnp.sqrt(jnp.float32(Q.shape[-1]))
        if causal:  # key j <= query i
            n = Q.shape[-2]
            scores = jnp.where(jnp.arange(n)[None, :] <= jnp.arange(n)[:, None], scores, -jnp.inf)
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(scores, axis=-1), V)

    def group_norm(X, g, b):
        n, c = X.shape[:2]
        y = _normalize(X.reshape(n, params["groups"], -1), (-1,)).reshape(X.shape)
        return y * g[:, None, None] + b[:, None, None]

    def rms_norm(X, g):
        eps = jnp.finfo(X.dtype).eps
        return X * jax.lax.rsqrt((X * X).mean(-1, keepdims=True) + eps) * g

    def ce_smooth(Z, L):
        e = params["smoothing"]
        lp = jax.nn.log_softmax(Z, axis=-1)
        nll = -jnp.take_along_axis(lp, L.reshape(-1, 1), axis=1)[:, 0]
        return ((1 - e) * nll - e * lp.mean(-1)).mean()
    return {
        "dense": lambda X, W, B: X @ W.T + B,
        "conv2d": lambda X, W: jax.lax.conv_general_dilated(X, W, (1, 1), "VALID"),
        "avg_pool": lambda X: _pool(X, "avg"),
        "max_pool": lambda X: _pool(X, "max"),
        "softmax_homebrew": softmax_homebrew,
        "flatten": lambda X: X.reshape(X.shape[0], -1),
        "softmax": lambda X: jax.nn.softmax(X, axis=-1),
        "conv_relu": conv_relu,
        "batch_norm": lambda X, g, b: _normalize(X, (0, 2, 3)) * g[:, None, None] + b[:, None, None],
        "max_pool_pad": lambda X: _pool(X, "max", 3, 2, 1),
        "global_avg_pool": lambda X: X.mean((2, 3)),
        "layer_norm": lambda X, g, b: _normalize(X, (-1,)) * g + b,
        "attention": attention,
        "gelu_mlp": lambda X, W1, B1, W2, B2: jax.nn.gelu(X @ W1.T + B1, approximate=False) @ W2.T + B2,
        "log_softmax_nll": lambda Z, T: -(T * jax.nn.log_softmax(Z, axis=-1)).sum() / Z.shape[0],
        # the norms suite
        "group_norm": group_norm,
        "instance_norm": lambda X, g, b: _normalize(X, (2, 3)) * g[:, None, None] + b[:, None, None],
        "rms_norm": rms_norm,
        "residual_layer_norm": lambda X, R, g, b: _normalize(X + R, (-1,)) * g + b,
        "ce_smooth": ce_smooth,
        "swiglu": lambda X, W1, W3, W2: (jax.nn.silu(X @ W1.T) * (X @ W3.T)) @ W2.T,
        "causal_attention": lambda Q, K, V: attention(Q, K, V, causal=True),
        "embedding_mean": lambda E, ids: E[ids].mean(1),
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
    return _jitted(jax.jit(_model(workload.kind, workload.params)), [jnp.asarray(a) for a in arrays.values()])


def backward(workload, arrays, head) -> Phase:
    f = jax.jit(_model(workload.kind, workload.params))
    names = list(arrays)
    idx = tuple(names.index(g) for g in workload.grads)
    args = [jnp.asarray(a) for a in arrays.values()]
    t0 = time.perf_counter()
    _, pullback = jax.vjp(f, *args)          # the forward, once, keeping its residuals
    forward_s = time.perf_counter() - t0

    @jax.jit
    def apply(pb, h):
        grads = pb(h)
        return tuple(grads[i] for i in idx)
    h = jnp.asarray(head)
    phase = _jitted(lambda: apply(pullback, h), [])
    phase.prep_s["vjp_forward"] = forward_s
    return phase


def sweep(task: str, arrays) -> Phase:
    fns = {
        "gemm": lambda A, B: A @ B,
        "add": lambda A, B: A + B,
        "relu": lambda A: jnp.maximum(A, 0.0),
        "exp": jnp.exp,
        "avg_pool": lambda X: _pool(X, "avg"),
    }
    if task not in fns:
        raise Unavailable(f"no sweep task {task!r}")
    return _jitted(jax.jit(fns[task]), [jnp.asarray(a) for a in arrays.values()])


def compile_seconds(workload, arrays) -> dict[str, float]:
    """A cold ``jax.jit(...).lower(...).compile()`` of the forward and of the gradient program
    (the inputs and the head to the gradients asked for, as ``ta.build`` of the gradients
    takes them), neither run: wall seconds ``fwd``/``bwd`` and CPU seconds ``cpu_fwd``/``cpu_bwd``
    (the process's, XLA's threads included)."""
    model = _model(workload.kind, workload.params)
    idx = tuple(list(arrays).index(g) for g in workload.grads)

    def gradients(*args):
        _, pullback = jax.vjp(model, *args[:-1])
        grads = pullback(args[-1])
        return tuple(grads[i] for i in idx)
    args = [jnp.asarray(a) for a in arrays.values()]
    y = jax.eval_shape(model, *args)
    out: dict[str, float] = {}
    for stage, fn, fn_args in (("fwd", model, args), ("bwd", gradients, args + [jnp.ones(y.shape, y.dtype)])):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.jit(fn).lower(*fn_args).compile()
        out[stage], out["cpu_" + stage] = time.perf_counter() - t0, time.process_time() - c0
    return out
