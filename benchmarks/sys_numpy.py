"""NumPy forward formulas and hand-written backward formulas for every workload kind.

They serve twice: in float64 as the reference every system is checked against, and in
float32 as the NumPy peer.  Backward formulas recompute what they need from the inputs (like
tensorad's gradient kernels and ``jax.vjp`` under ``jit``), and compute only the gradients
the workload asks for.  Results are materialised arrays (``flatten`` copies), since every
other system writes its outputs too.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

# ---- forward ---------------------------------------------------------------------------------


def _dense(a):
    return a["X"] @ a["W"].T + a["B"]


def _conv2d(a):
    # windows[n, c, y, x, ky, kx] = X[n, c, y + ky, x + kx]
    kh, kw = a["W"].shape[2:]
    win = sliding_window_view(a["X"], (kh, kw), axis=(2, 3))
    y = np.tensordot(win, a["W"], axes=([1, 4, 5], [1, 2, 3]))  # n, y, x, o
    return np.ascontiguousarray(y.transpose(0, 3, 1, 2))


def _pool_view(x, kind):
    # The four strided corners of the 2x2 windows, combined elementwise (much faster in NumPy
    # than a reduction over the axes of a 6-d reshaped view).
    h, w = x.shape[2] // 2 * 2, x.shape[3] // 2 * 2
    a, b = x[:, :, 0:h:2, 0:w:2], x[:, :, 0:h:2, 1:w:2]
    c, d = x[:, :, 1:h:2, 0:w:2], x[:, :, 1:h:2, 1:w:2]
    if kind == "avg":
        return ((a + b) + (c + d)) * x.dtype.type(0.25)
    return np.maximum(np.maximum(a, b), np.maximum(c, d))


def _softmax_rows(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_homebrew_y(a):
    e = np.exp(a["X"] @ a["W"].T)
    return e / e.sum(axis=-1, keepdims=True)


def _conv_relu(a, params):
    s, p = params["stride"], params["padding"]
    x = np.pad(a["X"], ((0, 0), (0, 0), (p, p), (p, p)))
    kh, kw = a["W"].shape[2:]
    win = sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::s, ::s]
    y = np.tensordot(win, a["W"], axes=([1, 4, 5], [1, 2, 3]))  # n, y, x, o
    return np.maximum(np.ascontiguousarray(y.transpose(0, 3, 1, 2)), 0)


def _normalize(x, axes, eps=1e-5):
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def _max_pool_pad(x):
    # 3x3 windows, stride 2, padding 1 (padding never wins: -inf)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    return sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(4, 5))


def _attention(a):
    q, k, v = a["Q"], a["K"], a["V"]
    return _softmax_rows(q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]).astype(q.dtype)) @ v


def _log_softmax_nll(a):
    z = a["Z"] - a["Z"].max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return np.asarray(-(a["T"] * logp).sum() / a["Z"].shape[0])


# the layers suite: NumPy forwards (the peer); their reference is PyTorch's float64 autograd
LAYER_FORWARD = {
    "conv_relu": _conv_relu,
    "batch_norm": lambda a, _: (_normalize(a["X"], (0, 2, 3)) * a["gamma"][:, None, None]
                                + a["beta"][:, None, None]),
    "max_pool_pad": lambda a, _: _max_pool_pad(a["X"]),
    "global_avg_pool": lambda a, _: a["X"].mean(axis=(2, 3)),
    "layer_norm": lambda a, _: _normalize(a["X"], (-1,)) * a["gamma"] + a["beta"],
    "attention": lambda a, _: _attention(a),
    "log_softmax_nll": lambda a, _: _log_softmax_nll(a),
}

FORWARD = {
    "dense": _dense,
    "conv2d": _conv2d,
    "avg_pool": lambda a: _pool_view(a["X"], "avg"),
    "max_pool": lambda a: _pool_view(a["X"], "max"),
    "softmax_homebrew": _softmax_homebrew_y,
    "flatten": lambda a: a["X"].reshape(a["X"].shape[0], -1).copy(),
    "softmax": lambda a: _softmax_rows(a["X"]),
}

# ---- backward (hand-written) ---------------------------------------------------------------


def _dense_bwd(a, h, want):
    g = {}
    if "X" in want: g["X"] = h @ a["W"]            # dX[i,k] = sum_j H[i,j] W[j,k]
    if "W" in want: g["W"] = h.T @ a["X"]          # dW[j,k] = sum_i H[i,j] X[i,k]
    if "B" in want: g["B"] = h.sum(axis=0)         # dB[j]   = sum_i H[i,j]
    return g


def _conv2d_bwd(a, h, want):
    x, w = a["X"], a["W"]
    kh, kw = w.shape[2:]
    g = {}
    if "X" in want:
        # dX[n,c,y,x] = sum_{o,ky,kx} H[n,o,y-ky,x-kx] W[o,c,ky,kx]: a full correlation of the
        # zero-padded head with the flipped kernel.
        hp = np.pad(h, ((0, 0), (0, 0), (kh - 1, kh - 1), (kw - 1, kw - 1)))
        win = sliding_window_view(hp, (kh, kw), axis=(2, 3))          # n, o, y, x, ky, kx
        dx = np.tensordot(win, w[:, :, ::-1, ::-1], axes=([1, 4, 5], [0, 2, 3]))  # n, y, x, c
        g["X"] = np.ascontiguousarray(dx.transpose(0, 3, 1, 2))
    if "W" in want:
        # dW[o,c,ky,kx] = sum_{n,y,x} H[n,o,y,x] X[n,c,y+ky,x+kx]
        win = sliding_window_view(x, (kh, kw), axis=(2, 3))           # n, c, y, x, ky, kx
        g["W"] = np.tensordot(h, win, axes=([0, 2, 3], [0, 2, 3]))    # o, c, ky, kx
    return g


def _avg_pool_bwd(a, h, want):
    # dX[n,c,y,x] = H[n,c,y//2,x//2] / 4 inside the pooled area, 0 outside it.
    x = a["X"]
    n, c, oh, ow = h.shape
    q = h * x.dtype.type(0.25)
    if x.shape[2:] == (2 * oh, 2 * ow):
        dx = np.empty_like(x)
    else:
        dx = np.zeros_like(x)
    for r in (0, 1):
        for s in (0, 1):
            dx[:, :, r:2 * oh:2, s:2 * ow:2] = q
    return {"X": dx}


def _max_pool_bwd(a, h, want):
    # The head goes to the first maximum of each window.
    x = a["X"]
    n, c, oh, ow = h.shape
    win = x[:, :, : oh * 2, : ow * 2].reshape(n, c, oh, 2, ow, 2).transpose(0, 1, 2, 4, 3, 5)
    win = win.reshape(n, c, oh, ow, 4)
    onehot = np.arange(4) == win.argmax(axis=-1)[..., None]
    d = (onehot * h[..., None]).reshape(n, c, oh, ow, 2, 2).transpose(0, 1, 2, 4, 3, 5)
    dx = np.zeros_like(x)
    dx[:, :, : oh * 2, : ow * 2] = d.reshape(n, c, oh * 2, ow * 2)
    return {"X": dx}


def _softmax_bwd_z(y, h):
    # dZ[i,j] = Y[i,j] (H[i,j] - sum_k H[i,k] Y[i,k])
    return y * (h - (h * y).sum(axis=-1, keepdims=True))


def _softmax_homebrew_bwd(a, h, want):
    dz = _softmax_bwd_z(_softmax_homebrew_y(a), h)
    g = {}
    if "X" in want: g["X"] = dz @ a["W"]
    if "W" in want: g["W"] = dz.T @ a["X"]
    return g


BACKWARD = {
    "dense": _dense_bwd,
    "conv2d": _conv2d_bwd,
    "avg_pool": _avg_pool_bwd,
    "max_pool": _max_pool_bwd,
    "softmax_homebrew": _softmax_homebrew_bwd,
    "flatten": lambda a, h, want: {"X": h.reshape(a["X"].shape).copy()},
    "softmax": lambda a, h, want: {"X": _softmax_bwd_z(_softmax_rows(a["X"]), h)},
}


def forward(kind: str, arrays: dict[str, np.ndarray], params: dict | None = None) -> np.ndarray:
    if kind in LAYER_FORWARD:
        return LAYER_FORWARD[kind](arrays, params or {})
    return FORWARD[kind](arrays)


def backward(kind: str, arrays: dict[str, np.ndarray], head: np.ndarray,
             want: tuple[str, ...]) -> dict[str, np.ndarray]:
    return BACKWARD[kind](arrays, head, want)


def reference(kind: str, arrays: dict[str, np.ndarray], head: np.ndarray,
              want: tuple[str, ...]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Forward output and gradients in float64: the oracle of every check."""
    a64 = {k: v.astype(np.float64) for k, v in arrays.items()}
    h64 = head.astype(np.float64)
    return forward(kind, a64), backward(kind, a64, h64, want)
