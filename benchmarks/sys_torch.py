"""PyTorch eager as a peer: forward under ``no_grad`` (a whole model's with gradients enabled, as a
training step runs it); backward by autograd with the same head.

The backward phase runs the forward once with gradients enabled, then times
``torch.autograd.grad(y, inputs, H, retain_graph=True)`` -- the work of ``y.backward(H)``
without accumulating into ``.grad`` -- so it uses the tensors autograd saved in the forward
(PyTorch's normal training path), where tensorad and JAX recompute what they need.
"""

from __future__ import annotations

import numpy as np

from .systems import Phase, Unavailable, as_list, import_failure
from .threads import configure_torch

torch = None


def setup(threads: int) -> dict:
    global torch
    try:
        import torch as _torch
    except ImportError as e:
        raise import_failure("torch", e) from e
    torch = _torch
    configure_torch(torch, threads)
    return {"version": torch.__version__, "threads": torch.get_num_threads()}


def _transformer(heads: int):
    F = torch.nn.functional

    def block(tokens, labels, E, g1, b1, Wq, Wk, Wv, Wo, g2, b2, W1, c1, W2, Wout):
        b, n = tokens.shape
        d = E.shape[1]

        def split(t):  # [b, n, d] -> [b, heads, n, d / heads]
            return t.reshape(b, n, heads, d // heads).transpose(1, 2)
        x = F.embedding(tokens.long(), E)
        h = F.layer_norm(x, (d,), g1, b1)
        a = F.scaled_dot_product_attention(split(h @ Wq), split(h @ Wk), split(h @ Wv), is_causal=True)
        x = x + a.transpose(1, 2).reshape(b, n, d) @ Wo
        h = F.gelu(F.layer_norm(x, (d,), g2, b2) @ W1 + c1)
        x = x + h @ W2
        return F.cross_entropy((x @ Wout).reshape(b * n, -1), labels.long().reshape(-1))
    return block


def _cnn(X, W, B, Wd, Bd, labels):
    F = torch.nn.functional
    h = F.max_pool2d(F.relu(F.conv2d(X, W, B, padding=1)), 2, 2)
    return F.cross_entropy(F.linear(h.flatten(1), Wd, Bd), labels.long())


def _resnet(X, W1, g1, b1, W2, g2, b2, Wd, Bd, labels):
    F = torch.nn.functional

    def conv_bn(x, w, g, b):
        return F.batch_norm(F.conv2d(x, w, padding=1), None, None, g, b, training=True, eps=1e-5)
    h = F.relu(conv_bn(X, W1, g1, b1))
    h = F.relu(conv_bn(h, W2, g2, b2) + X)
    return F.cross_entropy(F.linear(h.mean((2, 3)), Wd, Bd), labels.long())


def _mlp(X, W1, B1, W2, B2, W3, B3, labels):
    F = torch.nn.functional
    h = F.relu(F.linear(F.relu(F.linear(X, W1, B1)), W2, B2))
    return F.cross_entropy(F.linear(h, W3, B3), labels.long())


def _lstm(X, h0, c0, Wih, Whh, b):
    F = torch.nn.functional
    h, c = h0, c0
    for x in X:
        i, f, g, o = (F.linear(x, Wih) + F.linear(h, Whh, b)).chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    return h.sum()


def _conv(params: dict):
    """The ``convs`` suite's layer (``workloads._conv``): groups from the shapes."""
    F = torch.nn.functional
    s, p, d = params["stride"], params["padding"], params["dilation"]

    def layer(X, W, B=None):
        if params.get("transposed"):
            y = F.conv_transpose2d(X, W, B, stride=s, padding=p, dilation=d)
        else:
            y = F.conv2d(X, W, B, stride=s, padding=p, dilation=d, groups=X.shape[1] // W.shape[1])
        return F.relu(y) if params.get("relu") else y
    return layer


def forward_fn(kind: str, params: dict | None = None):
    """The workload's forward in PyTorch, as its users write it (``torch.nn.functional``)."""
    F = torch.nn.functional
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
    if kind == "conv_relu":
        return lambda X, W: F.relu(F.conv2d(X, W, stride=params["stride"], padding=params["padding"]))
    if kind == "conv":
        return _conv(params)
    return {
        "dense": lambda X, W, B: F.linear(X, W, B),
        "conv2d": lambda X, W: F.conv2d(X, W),
        "avg_pool": lambda X: F.avg_pool2d(X, 2, 2),
        "max_pool": lambda X: F.max_pool2d(X, 2, 2),
        "softmax_homebrew": lambda X, W: (lambda e: e / e.sum(-1, keepdim=True))(torch.exp(X @ W.T)),
        "flatten": lambda X: torch.flatten(X, 1),
        "softmax": lambda X: torch.softmax(X, -1),
        "batch_norm": lambda X, g, b: F.batch_norm(X, None, None, g, b, training=True, eps=1e-5),
        "max_pool_pad": lambda X: F.max_pool2d(X, 3, 2, 1),
        "global_avg_pool": lambda X: X.mean((2, 3)),
        "layer_norm": lambda X, g, b: F.layer_norm(X, g.shape, g, b, 1e-5),
        "attention": lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V),
        "gelu_mlp": lambda X, W1, B1, W2, B2: F.linear(F.gelu(F.linear(X, W1, B1)), W2, B2),
        "log_softmax_nll": lambda Z, T: -(T * F.log_softmax(Z, -1)).sum() / Z.shape[0],
        # the norms suite
        "group_norm": lambda X, g, b: F.group_norm(X, params["groups"], g, b, 1e-5),
        "instance_norm": lambda X, g, b: F.instance_norm(X, weight=g, bias=b, eps=1e-5),
        "rms_norm": lambda X, g: F.rms_norm(X, g.shape, g),
        "residual_layer_norm": lambda X, R, g, b: F.layer_norm(X + R, g.shape, g, b, 1e-5),
        "ce_smooth": lambda Z, L: F.cross_entropy(Z, L.long(), label_smoothing=params["smoothing"]),
        "swiglu": lambda X, W1, W3, W2: F.linear(F.silu(F.linear(X, W1)) * F.linear(X, W3), W2),
        "causal_attention": lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V, is_causal=True),
        "embedding_mean": lambda E, ids: F.embedding(ids.long(), E).mean(1),
    }[kind]


def _outputs(r) -> list[np.ndarray]:
    return [x.detach().numpy() for x in as_list(r)]


def step_arguments(workload, arrays) -> list:
    """The forward's arguments: for a whole model (the ``models`` suite) those a training step
    differentiates require gradients, so that its forward is the one a step runs (recording what the
    backward reads)."""
    step = workload.suite == "models"
    return [torch.from_numpy(a.copy() if step else a).requires_grad_(step and k in workload.grads)
            for k, a in arrays.items()]


def forward(workload, arrays) -> Phase:
    f = forward_fn(workload.kind, workload.params)
    args = step_arguments(workload, arrays)

    def run():
        with torch.set_grad_enabled(workload.suite == "models"):
            return f(*args)
    return Phase(fn=run, outputs=_outputs)


def backward(workload, arrays, head) -> Phase:
    f = forward_fn(workload.kind, workload.params)
    args = {k: torch.from_numpy(a.copy()).requires_grad_(k in workload.grads) for k, a in arrays.items()}
    y = f(*args.values())
    h = torch.from_numpy(head)
    want = [args[g] for g in workload.grads]
    return Phase(fn=lambda: torch.autograd.grad(y, want, h, retain_graph=True), outputs=_outputs)


def sweep(task: str, arrays) -> Phase:
    """Preallocated outputs (``out=``) where PyTorch has them (not for avg_pool2d)."""
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}
    F = torch.nn.functional
    a = t.get("A")
    c = torch.empty(a.shape[0], t["B"].shape[1]) if task == "gemm" else \
        torch.empty_like(a) if a is not None else None
    fns = {
        "gemm": lambda: torch.mm(a, t["B"], out=c),
        "add": lambda: torch.add(a, t.get("B"), out=c),
        "relu": lambda: torch.clamp_min(a, 0.0, out=c),
        "exp": lambda: torch.exp(a, out=c),
        "avg_pool": lambda: F.avg_pool2d(t.get("X"), 2, 2),
    }
    if task not in fns:
        raise Unavailable(f"no sweep task {task!r}")
    fn = fns[task]

    def run():
        with torch.no_grad():
            return fn()
    return Phase(fn=run, outputs=_outputs)


def autograd_reference(workload, arrays: dict[str, np.ndarray], make_head):
    """(Y, head, gradients): the float64 forward, the head ``make_head(Y.shape)`` and the
    gradients by PyTorch's autograd: the oracle of the layers suite."""
    import torch as _torch

    global torch
    torch = torch or _torch
    f = forward_fn(workload.kind, workload.params)
    args = {k: _torch.from_numpy(a.astype(np.float64) if a.dtype.kind == "f" else a)
            .requires_grad_(k in workload.grads) for k, a in arrays.items()}
    y = f(*args.values())
    head = make_head(tuple(y.shape))
    h = _torch.from_numpy(head.astype(np.float64))
    grads = _torch.autograd.grad(y, [args[g] for g in workload.grads], h)
    return y.detach().numpy(), head, {g: d.numpy() for g, d in zip(workload.grads, grads)}
