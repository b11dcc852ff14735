"""tensorad as a benchmarked system: build kernels with ``ta.build`` and run them.

Two variants share the forward pipeline up to the kernel:

* ``autodiff``: Y from ``ta.topi`` (as in the seed), gradients from
  ``ta.JacobianRecursive(Y, grads, H)``;
* ``hand``: Y and the gradients written by hand in the language (``handwritten.py``).

The preparation times (autodiff, lowering+JIT) are recorded beside the run times, and so is
the kernel's ``work`` (innermost-body executions: the work the optimizer left).  Workload
kernels allocate their outputs on every call, like the peers; sweep kernels write into
preallocated outputs (``out=``), so that the sweeps measure the loops, not page faults.
"""

from __future__ import annotations

import time

import numpy as np

from . import handwritten, spelled
from .systems import Phase, Unavailable, as_list, import_failure

_options: dict = {"num_threads": 1}   # ta.build options of this worker (threads, target)


def setup(threads: int, target: str = "") -> dict:
    try:
        import tensorad as ta
    except ImportError as e:
        raise import_failure("tensorad", e) from e
    _options["num_threads"] = threads
    if target:
        _options["target"] = target
    return {"version": getattr(ta, "__version__", "?"), "target": target or "host"}


def _ta():
    import tensorad as ta

    return ta


def topi_forward(kind: str, p: dict, params: dict | None = None):
    """Y built from ``ta.topi`` as a user would write it (the seed's kinds as in its notebook)."""
    ta = _ta()
    nn = ta.topi.nn
    params = params or {}
    if params.get("spelled"):
        return spelled.forward(kind, p, params)
    if kind == "dense":
        return nn.dense(p["X"], p["W"], p["B"])
    if kind == "conv2d":
        return nn.conv2d(p["X"], p["W"], 1, 0)
    if kind in ("avg_pool", "max_pool"):
        return nn.pool(p["X"], [2, 2], [2, 2], [0, 0, 0, 0], kind.split("_")[0])
    if kind == "softmax_homebrew":
        exps = ta.topi.exp(nn.dense(p["X"], p["W"]))
        return exps / ta.topi.sum(exps, axis=-1, keepdims=True)
    if kind == "flatten":
        return nn.flatten(p["X"])
    if kind == "softmax":
        return nn.softmax(p["X"])
    if kind == "conv_relu":
        return nn.relu(nn.conv2d(p["X"], p["W"], params["stride"], params["padding"]))
    if kind == "conv":
        return _conv(ta, p, params)
    if kind == "batch_norm":
        return nn.batch_norm(p["X"], p["gamma"], p["beta"], training=True)
    if kind == "max_pool_pad":
        return nn.pool(p["X"], [3, 3], [2, 2], [1, 1, 1, 1], "max")
    if kind == "global_avg_pool":
        return ta.topi.mean(p["X"], axis=(2, 3))
    if kind == "layer_norm":
        return nn.layer_norm(p["X"], p["gamma"], p["beta"])
    if kind == "attention":
        return nn.scaled_dot_product_attention(p["Q"], p["K"], p["V"])
    if kind == "gelu_mlp":
        return nn.dense(nn.gelu(nn.dense(p["X"], p["W1"], p["B1"])), p["W2"], p["B2"])
    if kind == "transformer":
        return _transformer(ta, p, params["heads"])
    if kind == "cnn":
        conv = nn.conv2d(p["X"], p["W"], 1, 1)
        bias = ta.topi.reshape(p["B"], (p["B"].shape[0], 1, 1))
        h = nn.pool(nn.relu(conv + bias), [2, 2], [2, 2], [0, 0, 0, 0], "max")
        return nn.cross_entropy(nn.dense(nn.flatten(h), p["Wd"], p["Bd"]), p["labels"])
    if kind == "resnet":
        return _resnet(ta, p)
    if kind == "mlp":
        h = nn.relu(nn.dense(p["X"], p["W1"], p["B1"]))
        h = nn.relu(nn.dense(h, p["W2"], p["B2"]))
        return nn.cross_entropy(nn.dense(h, p["W3"], p["B3"]), p["labels"])
    if kind == "lstm":
        return _lstm(ta, p)
    if kind == "group_norm":
        return nn.group_norm(p["X"], params["groups"], p["gamma"], p["beta"])
    if kind == "instance_norm":
        return nn.instance_norm(p["X"], p["gamma"], p["beta"])
    if kind == "rms_norm":
        return nn.rms_norm(p["X"], p["gamma"])
    if kind == "residual_layer_norm":
        return nn.layer_norm(p["X"] + p["R"], p["gamma"], p["beta"])
    if kind == "ce_smooth":
        return nn.cross_entropy(p["Z"], p["labels"], label_smoothing=params["smoothing"])
    if kind == "swiglu":
        gate = nn.silu(nn.dense(p["X"], p["W1"])) * nn.dense(p["X"], p["W3"])
        return nn.dense(gate, p["W2"])
    if kind == "causal_attention":
        return nn.scaled_dot_product_attention(p["Q"], p["K"], p["V"], causal=True)
    if kind == "embedding_mean":
        return ta.topi.mean(nn.embedding(p["E"], p["ids"]), axis=1)
    if kind == "log_softmax_nll":
        rows = p["Z"].shape[0]
        picked = ta.topi.multiply(p["T"], nn.log_softmax(p["Z"]))
        return ta.topi.multiply(ta.topi.sum(picked), -1.0 / rows)
    raise KeyError(kind)


def _conv(ta, p: dict, params: dict):
    """The ``convs`` suite's layer: conv2d (groups from the shapes) or conv2d_transpose, then
    an optional per-channel bias and ReLU."""
    nn, X, W = ta.topi.nn, p["X"], p["W"]
    s, pad, d = params["stride"], params["padding"], params["dilation"]
    if params.get("transposed"):
        y = nn.conv2d_transpose(X, W, s, pad, dilation=d)
    else:
        y = nn.conv2d(X, W, s, pad, d, groups=X.shape[1] // W.shape[1])
    if "B" in p:
        y = y + ta.topi.reshape(p["B"], (p["B"].shape[0], 1, 1))
    return nn.relu(y) if params.get("relu") else y


def _transformer(ta, p: dict, heads: int):
    """The pre-norm Transformer block of the ``models`` suite, only ``ta.topi`` calls."""
    topi, nn = ta.topi, ta.topi.nn
    b, n = p["tokens"].shape
    d = p["E"].shape[1]

    def split(t):  # [b, n, d] -> [b, heads, n, d / heads]
        return topi.transpose(topi.reshape(t, (b, n, heads, d // heads)), (0, 2, 1, 3))
    x = nn.embedding(p["E"], p["tokens"])
    h = nn.layer_norm(x, p["g1"], p["b1"])
    q, k, v = (split(topi.matmul(h, p[w])) for w in ("Wq", "Wk", "Wv"))
    a = nn.scaled_dot_product_attention(q, k, v, causal=True)
    x = x + topi.matmul(topi.reshape(topi.transpose(a, (0, 2, 1, 3)), (b, n, d)), p["Wo"])
    h = nn.gelu(topi.matmul(nn.layer_norm(x, p["g2"], p["b2"]), p["W1"]) + p["c1"])
    x = x + topi.matmul(h, p["W2"])
    return nn.cross_entropy(topi.matmul(x, p["Wout"]), p["labels"])


def _resnet(ta, p: dict):
    """The ``models`` suite's ResNet basic block with its classifier head, only ``ta.topi`` calls."""
    nn = ta.topi.nn

    def conv_bn(x, w: str, g: str, b: str):
        return nn.batch_norm(nn.conv2d(x, p[w], 1, 1), p[g], p[b], training=True)
    h = nn.relu(conv_bn(p["X"], "W1", "g1", "b1"))
    h = nn.relu(conv_bn(h, "W2", "g2", "b2") + p["X"])
    return nn.cross_entropy(nn.dense(ta.topi.mean(h, axis=(2, 3)), p["Wd"], p["Bd"]), p["labels"])


def _lstm(ta, p: dict):
    """The ``models`` suite's LSTM: one cell (gates i, f, g, o) applied to every step of ``X``."""
    topi, nn = ta.topi, ta.topi.nn
    h, c = p["h0"], p["c0"]
    for t in range(p["X"].shape[0]):
        gates = nn.dense(p["X"][t], p["Wih"]) + nn.dense(h, p["Whh"], p["b"])
        i, f, g, o = topi.split(gates, 4, axis=1)
        c = topi.sigmoid(f) * c + topi.sigmoid(i) * topi.tanh(g)
        h = topi.sigmoid(o) * topi.tanh(c)
    return topi.sum(h)


def _placeholders(arrays: dict[str, np.ndarray]) -> dict:
    ta = _ta()
    return {k: ta.placeholder(v.shape, str(v.dtype), k) for k, v in arrays.items()}


def _define(what: str, fn):
    """Run a definition step; a missing piece of tensorad becomes Unavailable, not a crash."""
    try:
        return fn()
    except (NotImplementedError, AttributeError) as e:
        raise Unavailable(f"{what}: {type(e).__name__}: {e}") from e


def _kernel_phase(outputs: list, inputs: list, args: list[np.ndarray], prep: dict,
                  preallocate: bool = False) -> Phase:
    """Build the kernel (timing it); ``preallocate`` runs it on output arrays made once."""
    ta = _ta()
    t0 = time.perf_counter()
    kernel = _define("ta.build", lambda: ta.build(outputs, inputs, **_options))
    prep["build"] = time.perf_counter() - t0
    info = {}
    work = getattr(kernel, "work", None)
    if isinstance(work, int):
        info["work"] = work
    fn = lambda: kernel(*args)
    if preallocate:
        outs = kernel(*args)
        fn = lambda: kernel(*args, out=outs)
    return Phase(fn=fn, outputs=lambda r: [np.asarray(x) for x in as_list(r)], prep_s=prep, info=info)


def _forward_tensor(workload, p: dict, variant: str):
    if variant == "hand":
        if workload.kind not in handwritten.BACKWARD:
            raise Unavailable(f"no hand-written formulas for {workload.kind}")
        return handwritten.forward(workload.kind, p)
    return _define("ta.topi", lambda: topi_forward(workload.kind, p, workload.params))


def forward(workload, arrays: dict[str, np.ndarray], variant: str) -> Phase:
    """The forward kernel; for a whole model (the ``models`` suite), the forward a training step runs:
    ``ta.function``'s, which also keeps the residuals its backward reads."""
    p = _placeholders(arrays)
    t0 = time.perf_counter()
    y = _forward_tensor(workload, p, variant)
    prep = {"define": time.perf_counter() - t0}
    if workload.suite != "models" or variant != "autodiff":
        return _kernel_phase([y], list(p.values()), list(arrays.values()), prep)
    ta, args = _ta(), list(arrays.values())
    f = _define("ta.function", lambda: ta.function(y, list(p.values()), wrt=[p[g] for g in workload.grads],
                                                   **_options))
    t0 = time.perf_counter()
    kernel = _define("ta.build", lambda: f.residual_kernel)
    prep["build"] = time.perf_counter() - t0
    info = {"work": kernel.work, "saved": [t.name for t in f.saved]}
    return Phase(fn=lambda: f.forward(*args), outputs=lambda r: [np.asarray(r[0])], prep_s=prep, info=info)


def backward(workload, arrays: dict[str, np.ndarray], head: np.ndarray, variant: str) -> Phase:
    """The backward of ``ta.function``: the forward runs once (untimed) and keeps its residuals
    (by the default policy, the reductions the gradients read: PyTorch's backward likewise reads
    the activations its forward saved); the timed backward reads them instead of recomputing.

    ``hand``: the handwritten gradients (their own head placeholder) are planned by the same
    residual planner, so both variants save and read the same kind of values.
    """
    ta = _ta()
    p = _placeholders(arrays)
    inputs, args = list(p.values()), list(arrays.values())
    t0 = time.perf_counter()
    y = _forward_tensor(workload, p, variant)
    want = [p[g] for g in workload.grads]
    if variant == "hand":
        H = ta.placeholder(y.shape, "float32", "H")
        grads = handwritten.backward(workload.kind, p, H, workload.grads)
        prep = {"define": time.perf_counter() - t0}
        return _planned_backward(H, grads, inputs, args, head, prep)
    f = _define("ta.function", lambda: ta.function(y, inputs, wrt=want, **_options))
    _define("ta.gradient", lambda: f.grads)
    prep = {"autodiff": time.perf_counter() - t0}
    t0 = time.perf_counter()
    kernel = _define("ta.build", lambda: f.backward_kernel)
    prep["build"] = time.perf_counter() - t0
    _, residuals = f.forward(*args)
    info = {"work": kernel.work, "saved": [t.name for t in f.saved]}
    return Phase(fn=lambda: f.backward(residuals, head),
                 outputs=lambda r: [np.asarray(x) for x in as_list(r)], prep_s=prep, info=info)


def _planned_backward(H, grads, inputs, args, head, prep) -> Phase:
    ta = _ta()
    from tensorad.training.residuals import plan_residuals

    plan = plan_residuals([], inputs, [H], grads, "default")  # y too is computed by the forward
    extras = []
    if plan.extras:  # computed once by a forward kernel
        extras = as_list(ta.build(list(plan.extras), inputs, **_options)(*args))
    residuals = [np.asarray(extras[k]) if kind == "extra" else args[k] for kind, k in plan.sources]
    back_inputs = [inputs[i] for i in plan.inputs] + list(plan.saved) + [H]
    return _kernel_phase(list(grads), back_inputs, list(residuals) + [head], prep)


# ---- sweeps ---------------------------------------------------------------------------------


def sweep(task: str, arrays: dict[str, np.ndarray]) -> Phase:
    ta = _ta()
    p = _placeholders(arrays)
    t0 = time.perf_counter()
    if task == "gemm":
        A, B = p["A"], p["B"]
        k = ta.reduce_axis((0, A.shape[1]), "k")
        out = ta.compute((A.shape[0], B.shape[1]), lambda i, j: ta.sum(A[i, k] * B[k, j], k), "C")
    elif task == "add":
        A, B = p["A"], p["B"]
        out = ta.compute(A.shape, lambda i: A[i] + B[i], "add")
    elif task == "relu":
        A = p["A"]
        out = ta.compute(A.shape, lambda i: ta.maximum(A[i], 0.0), "relu")
    elif task == "exp":
        A = p["A"]
        out = ta.compute(A.shape, lambda i: ta.exp(A[i]), "exp")
    elif task == "avg_pool":
        out = handwritten.pool(p["X"], "avg")
    else:
        raise Unavailable(f"no sweep task {task!r}")
    prep = {"define": time.perf_counter() - t0}
    return _kernel_phase([out], list(p.values()), list(arrays.values()), prep, preallocate=True)
