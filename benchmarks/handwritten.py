"""Every workload written by hand in the tensorad language: forward and backward formulas.

This is the ``tensorad-hand`` system: what a person writes without autodiff, compiled by the
same ``ta.build``.  It is the reference the autodiff gradients (``tensorad``) should match in
speed, and it runs as soon as code generation works, before autodiff and ``ta.topi`` land.
Each backward function receives the input placeholders and the head ``H`` (of Y's shape) and
returns the requested gradients; the math is in the comments.
"""

from __future__ import annotations

import tensorad as ta

# ---- forward ---------------------------------------------------------------------------------


def dense(X, W, B=None):
    """Y[i,j] = sum_k X[i,k] W[j,k] (+ B[j])."""
    k = ta.reduce_axis((0, X.shape[1]), "k")
    if B is None:
        return ta.compute((X.shape[0], W.shape[0]), lambda i, j: ta.sum(X[i, k] * W[j, k], k), "dense")
    return ta.compute((X.shape[0], W.shape[0]), lambda i, j: ta.sum(X[i, k] * W[j, k], k) + B[j], "dense")


def conv2d(X, W):
    """Y[n,o,y,x] = sum_{c,ky,kx} X[n,c,y+ky,x+kx] W[o,c,ky,kx] (stride 1, no padding)."""
    n, c, h, w = X.shape
    o, _, kh, kw = W.shape
    rc, ry, rx = ta.reduce_axis((0, c), "rc"), ta.reduce_axis((0, kh), "ry"), ta.reduce_axis((0, kw), "rx")
    return ta.compute((n, o, h - kh + 1, w - kw + 1),
                      lambda b, f, y, x: ta.sum(X[b, rc, y + ry, x + rx] * W[f, rc, ry, rx], [rc, ry, rx]),
                      "conv2d")


def pool(X, kind):
    """Y[n,c,i,j] = max or mean over r,s < 2 of X[n,c,2i+r,2j+s] (2x2, stride 2)."""
    n, c, h, w = X.shape
    r, s = ta.reduce_axis((0, 2), "r"), ta.reduce_axis((0, 2), "s")
    if kind == "max":
        return ta.compute((n, c, h // 2, w // 2),
                          lambda b, f, i, j: ta.max(X[b, f, 2 * i + r, 2 * j + s], [r, s]), "max_pool")
    return ta.compute((n, c, h // 2, w // 2),
                      lambda b, f, i, j: ta.sum(X[b, f, 2 * i + r, 2 * j + s], [r, s]) * 0.25, "avg_pool")


def softmax_rows(Z, stable=True):
    """Y[i,j] = exp(Z[i,j] - M[i]) / sum_k exp(Z[i,k] - M[i]); M = max_k Z[i,k] (0 if not stable)."""
    rows, cols = Z.shape
    if stable:
        k = ta.reduce_axis((0, cols), "k")
        M = ta.compute((rows,), lambda i: ta.max(Z[i, k], k), "rowmax")
        E = ta.compute(Z.shape, lambda i, j: ta.exp(Z[i, j] - M[i]), "exp")
    else:
        E = ta.compute(Z.shape, lambda i, j: ta.exp(Z[i, j]), "exp")
    k2 = ta.reduce_axis((0, cols), "k2")
    S = ta.compute((rows,), lambda i: ta.sum(E[i, k2], k2), "rowsum")
    return ta.compute(Z.shape, lambda i, j: E[i, j] / S[i], "softmax")


def flatten(X):
    """Y[b, f] = X[b, f // (H W) % C, f // W % H, f % W] for X of shape (N, C, H, W)."""
    n, c, h, w = X.shape
    return ta.compute((n, c * h * w), lambda b, f: X[b, f // (h * w), f // w % h, f % w], "flatten")


def forward(kind: str, p: dict):
    """The forward tensor Y of a workload from its input placeholders ``p``."""
    if kind == "dense":
        return dense(p["X"], p["W"], p["B"])
    if kind == "conv2d":
        return conv2d(p["X"], p["W"])
    if kind in ("avg_pool", "max_pool"):
        return pool(p["X"], kind.split("_")[0])
    if kind == "softmax_homebrew":
        return softmax_rows(dense(p["X"], p["W"]), stable=False)
    if kind == "flatten":
        return flatten(p["X"])
    if kind == "softmax":
        return softmax_rows(p["X"])
    raise KeyError(kind)

# ---- backward --------------------------------------------------------------------------------


def _dense_bwd(p, H, want):
    X, W = p["X"], p["W"]
    b, m = X.shape[0], W.shape[0]
    g = {}
    if "X" in want:   # dX[i,k] = sum_j H[i,j] W[j,k]
        j = ta.reduce_axis((0, m), "j")
        g["X"] = ta.compute(X.shape, lambda i, k: ta.sum(H[i, j] * W[j, k], j), "dX")
    if "W" in want:   # dW[j,k] = sum_i H[i,j] X[i,k]
        i = ta.reduce_axis((0, b), "i")
        g["W"] = ta.compute(W.shape, lambda j, k: ta.sum(H[i, j] * X[i, k], i), "dW")
    if "B" in want:   # dB[j] = sum_i H[i,j]
        i2 = ta.reduce_axis((0, b), "i")
        g["B"] = ta.compute((m,), lambda j: ta.sum(H[i2, j], i2), "dB")
    return g


def _conv2d_bwd(p, H, want):
    X, W = p["X"], p["W"]
    n, c, h, w = X.shape
    o, _, kh, kw = W.shape
    oh, ow = H.shape[2:]
    g = {}
    if "X" in want:
        # Hp = H zero-padded by (kh-1, kw-1); dX[n,c,y,x] = sum_{o,ky,kx} Hp[n,o,y+ky,x+kx]
        #                                                   * W[o,c,kh-1-ky,kw-1-kx]
        Hp = ta.compute((n, o, oh + 2 * (kh - 1), ow + 2 * (kw - 1)),
                        lambda b, f, y, x: ta.if_then_else(
                            (y >= kh - 1) & (y < oh + kh - 1) & (x >= kw - 1) & (x < ow + kw - 1),
                            H[b, f, y - (kh - 1), x - (kw - 1)], 0.0), "H_pad")
        ro, ry, rx = (ta.reduce_axis((0, o), "ro"), ta.reduce_axis((0, kh), "ry"),
                      ta.reduce_axis((0, kw), "rx"))
        g["X"] = ta.compute(X.shape, lambda b, ch, y, x: ta.sum(
            Hp[b, ro, y + ry, x + rx] * W[ro, ch, kh - 1 - ry, kw - 1 - rx], [ro, ry, rx]), "dX")
    if "W" in want:
        # dW[o,c,ky,kx] = sum_{n,y,x} H[n,o,y,x] X[n,c,y+ky,x+kx]
        rn, ry2, rx2 = (ta.reduce_axis((0, n), "rn"), ta.reduce_axis((0, oh), "ry"),
                        ta.reduce_axis((0, ow), "rx"))
        g["W"] = ta.compute(W.shape, lambda f, ch, ky, kx: ta.sum(
            H[rn, f, ry2, rx2] * X[rn, ch, ry2 + ky, rx2 + kx], [rn, ry2, rx2]), "dW")
    return g


def _inside(y, x, oh, ow):
    return (y // 2 < oh) & (x // 2 < ow)


def _avg_pool_bwd(p, H, want):
    # dX[n,c,y,x] = H[n,c,y//2,x//2] / 4 where (y, x) lies in a window, else 0.
    X = p["X"]
    oh, ow = H.shape[2:]
    if X.shape[2] == 2 * oh and X.shape[3] == 2 * ow:
        return {"X": ta.compute(X.shape, lambda b, f, y, x: H[b, f, y // 2, x // 2] * 0.25, "dX")}
    return {"X": ta.compute(X.shape, lambda b, f, y, x: ta.if_then_else(
        _inside(y, x, oh, ow), H[b, f, y // 2, x // 2] * 0.25, 0.0), "dX")}


def _max_pool_bwd(p, H, want):
    # dX[n,c,y,x] = H[n,c,y//2,x//2] where X[n,c,y,x] is its window's maximum, else 0.  (With
    # ties every maximum gets the head; the inputs are random floats, so there are none.)
    X = p["X"]
    Y = pool(X, "max")
    oh, ow = H.shape[2:]
    assert X.shape[2] == 2 * oh and X.shape[3] == 2 * ow, "hand-written max pool needs even sizes"
    return {"X": ta.compute(X.shape, lambda b, f, y, x: ta.select(
        X[b, f, y, x] == Y[b, f, y // 2, x // 2], H[b, f, y // 2, x // 2], 0.0), "dX")}


def _softmax_dz(Y, H):
    # dZ[i,j] = Y[i,j] (H[i,j] - D[i]),  D[i] = sum_k H[i,k] Y[i,k]
    k = ta.reduce_axis((0, Y.shape[1]), "k")
    D = ta.compute((Y.shape[0],), lambda i: ta.sum(H[i, k] * Y[i, k], k), "D")
    return ta.compute(Y.shape, lambda i, j: Y[i, j] * (H[i, j] - D[i]), "dZ")


def _softmax_homebrew_bwd(p, H, want):
    X, W = p["X"], p["W"]
    dZ = _softmax_dz(softmax_rows(dense(X, W), stable=False), H)
    g = {}
    if "X" in want:   # dX[i,k] = sum_j dZ[i,j] W[j,k]
        j = ta.reduce_axis((0, W.shape[0]), "j")
        g["X"] = ta.compute(X.shape, lambda i, k: ta.sum(dZ[i, j] * W[j, k], j), "dX")
    if "W" in want:   # dW[j,k] = sum_i dZ[i,j] X[i,k]
        i = ta.reduce_axis((0, X.shape[0]), "i")
        g["W"] = ta.compute(W.shape, lambda j, k: ta.sum(dZ[i, j] * X[i, k], i), "dW")
    return g


def _flatten_bwd(p, H, want):
    # dX[n,c,y,x] = H[n, (c H + y) W + x]
    X = p["X"]
    _, _, h, w = X.shape
    return {"X": ta.compute(X.shape, lambda b, ch, y, x: H[b, (ch * h + y) * w + x], "dX")}


BACKWARD = {
    "dense": _dense_bwd,
    "conv2d": _conv2d_bwd,
    "avg_pool": _avg_pool_bwd,
    "max_pool": _max_pool_bwd,
    "softmax_homebrew": _softmax_homebrew_bwd,
    "flatten": _flatten_bwd,
    "softmax": lambda p, H, want: {"X": _softmax_dz(softmax_rows(p["X"]), H)},
}


def backward(kind: str, p: dict, H, want: tuple[str, ...]) -> list:
    """The requested gradients, in the order of ``want``."""
    g = BACKWARD[kind](p, H, want)
    return [g[name] for name in want]
