"""Probe layers no benchmark suite holds: tensorad vs PyTorch eager, forward and backward.

Each case is written the way a user would (``ta.placeholder``/``ta.compute``/``ta.topi``),
checked first against PyTorch in float64 (tight tolerances), then timed in float32 (or the
case's storage dtype) at 1 thread (``--threads``): CPU-time medians of interleaved runs, in
ms.  Usage::

    python tools/probe_unseen.py [--no-check] [--reps N] [NAME ...]

A ``--target`` narrower than the host holds PyTorch to that instruction set (``--peer-isa
match``, as the benchmark does).  Not a test: timing belongs here, never in the suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

import tensorad as ta
from tensorad import topi

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.threads import run_again_with_peer_cap  # noqa: E402

F = torch.nn.functional


def _data(spec, shape, dtype, rng):
    """An input array: ``spec`` is "f" (uniform [-1, 1]), "pos" ([0.5, 1.5]), "mask" (0/1)
    or ("int", n) (integers in [0, n))."""
    if isinstance(spec, tuple):
        return rng.integers(0, spec[1], size=shape).astype(np.int32)
    if spec == "pos":
        return rng.uniform(0.5, 1.5, shape).astype(dtype)
    if spec == "mask":
        return (rng.uniform(0, 1, shape) < 0.8).astype(dtype)
    return rng.uniform(-1, 1, shape).astype(dtype)


def _to_torch(a, grad, half=None):
    t = torch.tensor(a)
    if half is not None and t.is_floating_point():
        t = t.to(half)
    return t.requires_grad_(grad)


def _setup(shapes, grads, ta_fn, torch_fn, dtype, rng, half=None):
    """Placeholders, data, tensorad function and PyTorch graph at one dtype."""
    phs, data = {}, {}
    for k, (s, spec) in shapes.items():
        isint = isinstance(spec, tuple)
        pdt = "int32" if isint else (half or np.dtype(dtype).name)
        phs[k] = ta.placeholder(s, pdt, name=k)
        data[k] = _data(spec, s, np.float32 if half else dtype, rng)
    Y = ta_fn(**phs)
    ins = list(phs.values())
    wrt = [phs[g] for g in grads]
    h = rng.uniform(-1, 1, Y.shape).astype(np.float32 if half else dtype)
    hdt = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(half)
    tx = {k: _to_torch(v, k in grads, hdt) for k, v in data.items()}
    y = torch_fn(**tx)
    th = torch.tensor(h).to(y.dtype)
    if half:
        import ml_dtypes

        npdt = ml_dtypes.bfloat16 if half == "bfloat16" else np.float16
        data = {k: (v.astype(npdt) if v.dtype == np.float32 else v) for k, v in data.items()}
        h = h.astype(npdt)
    return phs, ins, wrt, data, Y, h, tx, y, th


def _grads(fn, args, h):
    _, res = fn.forward(*args)
    g = fn.backward(res, h)
    return list(g) if isinstance(g, (list, tuple)) else [g]


def check64(name, shapes, grads, ta_fn, torch_fn, rng, target="llvm"):
    """tensorad in float64 against PyTorch in float64: forward and every gradient."""
    phs, ins, wrt, data, Y, h, tx, y, th = _setup(shapes, grads, ta_fn, torch_fn, np.float64, rng)
    args = [data[k] for k in shapes]
    fn = ta.function(Y, ins, wrt=wrt, num_threads=1, target=target)
    got = fn(*args)
    np.testing.assert_allclose(got, y.detach().numpy(), rtol=1e-9, atol=1e-9, err_msg=f"{name} forward")
    tg = torch.autograd.grad(y, [tx[g] for g in grads], th)
    for g, a, b in zip(grads, _grads(fn, args, h), tg):
        b = b.numpy()
        np.testing.assert_allclose(
            a, b, rtol=1e-8, atol=1e-8 * max(1.0, float(np.abs(b).max())), err_msg=f"{name} grad {g}"
        )


def timed(name, shapes, grads, ta_fn, torch_fn, rng, reps, half=None, target="llvm", threads=1):
    """CPU-time medians (ms) of interleaved runs: tensorad and PyTorch, forward and backward,
    both at ``threads`` threads."""
    phs, ins, wrt, data, Y, h, tx, y, th = _setup(shapes, grads, ta_fn, torch_fn, np.float32, rng, half)
    args = [data[k] for k in shapes]
    t0 = time.perf_counter()
    fwd = ta.build([Y], ins, num_threads=threads, target=target)
    fn = ta.function(Y, ins, wrt=wrt, num_threads=threads, target=target)
    _, res = fn.forward(*args)
    cold = time.perf_counter() - t0
    tol = 3e-2 if half else 2e-3
    got = np.asarray(fwd(*args), np.float32)
    np.testing.assert_allclose(got, y.detach().float().numpy(), rtol=tol, atol=tol)
    targets = [tx[g] for g in grads]
    fns = {
        "ta_f": lambda: fwd(*args),
        "ta_b": lambda: fn.backward(res, h),
        "pt_f": lambda: torch_fn(**tx),
        "pt_b": lambda: torch.autograd.grad(y, targets, th, retain_graph=True),
    }
    for f in fns.values():
        f()
        f()
    ts = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t = time.process_time()
            f()
            ts[k].append(time.process_time() - t)
    m = {k: statistics.median(v) * 1e3 for k, v in ts.items()}
    print(
        f"{name:34s} cold {cold:5.2f}s  fwd {m['ta_f']:7.2f}/{m['pt_f']:7.2f} = {m['ta_f'] / m['pt_f']:4.2f}"
        f"   bwd {m['ta_b']:7.2f}/{m['pt_b']:7.2f} = {m['ta_b'] / m['pt_b']:4.2f}",
        flush=True,
    )
    return m


# ---------------------------------------------------------------- the layers, as a user writes them


def _gru_ta(X, Hh, Wx, Wh, bx, bh):
    gx = topi.add(topi.nn.dense(X, Wx), bx)
    gh = topi.add(topi.nn.dense(Hh, Wh), bh)
    xr, xz, xn = topi.split(gx, 3, axis=1)
    hr, hz, hn = topi.split(gh, 3, axis=1)
    r = topi.sigmoid(topi.add(xr, hr))
    z = topi.sigmoid(topi.add(xz, hz))
    n = topi.tanh(topi.add(xn, topi.multiply(r, hn)))
    return topi.add(topi.multiply(topi.subtract(1.0, z), n), topi.multiply(z, Hh))


def _gru_pt(X, Hh, Wx, Wh, bx, bh):
    xr, xz, xn = (X @ Wx.T + bx).chunk(3, 1)
    hr, hz, hn = (Hh @ Wh.T + bh).chunk(3, 1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    return (1 - z) * n + z * Hh


def _conv1d_ta(X, W):
    n, c, length = X.shape
    o, _, kw = W.shape
    rc, rk = ta.reduce_axis((0, c), "c"), ta.reduce_axis((0, kw), "k")
    pad = kw // 2
    return ta.compute(
        (n, o, length),
        lambda b, oc, i: ta.sum(
            ta.if_then_else((i + rk - pad >= 0) & (i + rk - pad < length), X[b, rc, i + rk - pad], 0.0)
            * W[oc, rc, rk],
            axis=[rc, rk],
        ),
        name="conv1d",
    )


def _dwsep_ta(X, Wd, Wp):
    return topi.nn.relu(topi.nn.conv2d(topi.nn.relu(topi.nn.conv2d(X, Wd, 1, 1, groups=X.shape[1])), Wp))


def _dwsep_pt(X, Wd, Wp):
    return F.relu(F.conv2d(F.relu(F.conv2d(X, Wd, padding=1, groups=X.shape[1])), Wp))


def _se_block_ta(X, W1, W2):
    s = topi.mean(X, axis=(2, 3))
    e = topi.sigmoid(topi.nn.dense(topi.nn.relu(topi.nn.dense(s, W1)), W2))
    return ta.compute(X.shape, lambda b, c, i, j: X[b, c, i, j] * e[b, c], name="se_scale")


def _se_block_pt(X, W1, W2):
    e = torch.sigmoid(F.linear(F.relu(F.linear(X.mean((2, 3)), W1)), W2))
    return X * e[:, :, None, None]


def _masked_attn_ta(Q, K, V, M):
    S = topi.add(topi.multiply(topi.matmul(Q, topi.transpose(K, (0, 2, 1))), 0.125), M)
    return topi.matmul(topi.nn.softmax(S, axis=-1), V)


def _masked_attn_pt(Q, K, V, M):
    return torch.softmax(Q @ K.transpose(1, 2) * 0.125 + M, -1) @ V


def _sqdist_ta(X, Y):
    k = ta.reduce_axis((0, X.shape[1]), "k")
    return ta.compute(
        (X.shape[0], Y.shape[0]),
        lambda i, j: ta.sum((X[i, k] - Y[j, k]) * (X[i, k] - Y[j, k]), axis=k),
        name="sqdist",
    )


def _l2norm_ta(X):
    k = ta.reduce_axis((0, X.shape[1]), "k")
    ss = ta.compute((X.shape[0],), lambda i: ta.sum(X[i, k] * X[i, k], axis=k), name="ss")
    return ta.compute(X.shape, lambda i, j: X[i, j] / ta.sqrt(ss[i] + 1e-12), name="l2n")


def _bce_ta(Z, T):
    # mean(max(z, 0) - z t + log(1 + exp(-|z|)))
    e = ta.compute(
        Z.shape,
        lambda i, j: ta.maximum(Z[i, j], 0.0) - Z[i, j] * T[i, j] + ta.log(1.0 + ta.exp(-ta.abs(Z[i, j]))),
        name="bce",
    )
    return topi.mean(e)


def _softplus_ta(X):
    return ta.compute(X.shape, lambda i, j: ta.log(1.0 + ta.exp(X[i, j])), name="softplus")


def _mish_ta(X):
    return ta.compute(X.shape, lambda i, j: X[i, j] * ta.tanh(ta.log(1.0 + ta.exp(X[i, j]))), name="mish")


def _pixel_shuffle_ta(X):
    n, c, h, w = X.shape
    r = 2
    return ta.compute(
        (n, c // (r * r), h * r, w * r),
        lambda b, oc, i, j: X[b, oc * r * r + (i % r) * r + j % r, i // r, j // r],
        name="pixel_shuffle",
    )


def _linear3d_ta(X, W, B):
    return topi.nn.gelu(topi.add(topi.matmul(X, W), B), approximate="tanh")


def _linear3d_pt(X, W, B):
    return F.gelu(X @ W + B, approximate="tanh")


def _gmaxpool_ta(X):
    return topi.max(X, axis=(2, 3))


def _smoothl1_ta(A, B):
    e = ta.compute(
        A.shape,
        lambda i, j: ta.if_then_else(
            ta.abs(A[i, j] - B[i, j]) < 1.0,
            0.5 * (A[i, j] - B[i, j]) * (A[i, j] - B[i, j]),
            ta.abs(A[i, j] - B[i, j]) - 0.5,
        ),
        name="smoothl1",
    )
    return topi.mean(e)


def _lse_ta(X):
    m = topi.max(X, axis=1)
    k = ta.reduce_axis((0, X.shape[1]), "k")
    s = ta.compute((X.shape[0],), lambda i: ta.sum(ta.exp(X[i, k] - m[i]), axis=k), name="sumexp")
    return ta.compute((X.shape[0],), lambda i: ta.log(s[i]) + m[i], name="lse")


def _bilinear_form_ta(A, W, B):
    i_, j_ = ta.reduce_axis((0, A.shape[1]), "i"), ta.reduce_axis((0, B.shape[1]), "j")
    return ta.compute(
        (A.shape[0], W.shape[0]),
        lambda b, o: ta.sum(A[b, i_] * W[o, i_, j_] * B[b, j_], axis=[i_, j_]),
        name="bilinear",
    )


def _masked_mean_ta(X, M):
    t = ta.reduce_axis((0, X.shape[1]), "t")
    cnt = ta.compute((X.shape[0],), lambda b: ta.sum(M[b, t], axis=t), name="cnt")
    t2 = ta.reduce_axis((0, X.shape[1]), "t2")
    return ta.compute(
        (X.shape[0], X.shape[2]),
        lambda b, c: ta.sum(X[b, t2, c] * M[b, t2], axis=t2) / cnt[b],
        name="masked_mean",
    )


def _conv_nhwc_ta(X, W):
    n, h, w, c = X.shape
    kh, kw, _, o = W.shape
    rc, ry, rx = ta.reduce_axis((0, c), "c"), ta.reduce_axis((0, kh), "ry"), ta.reduce_axis((0, kw), "rx")
    return ta.compute(
        (n, h, w, o),
        lambda b, y, x, oc: ta.sum(
            ta.if_then_else(
                (y + ry >= 1) & (y + ry <= h) & (x + rx >= 1) & (x + rx <= w),
                X[b, y + ry - 1, x + rx - 1, rc],
                0.0,
            )
            * W[ry, rx, rc, oc],
            axis=[ry, rx, rc],
        ),
        name="conv_nhwc",
    )


def _conv_nhwc_pt(X, W):
    return F.conv2d(X.permute(0, 3, 1, 2), W.permute(3, 2, 0, 1), padding=1).permute(0, 2, 3, 1)


def _dropout_ta(X, M):
    return ta.compute(X.shape, lambda i, j: X[i, j] * M[i, j] * 1.25, name="dropout")


def _leaky_ta(X):
    return ta.compute(X.shape, lambda i, j: ta.select(X[i, j] > 0, X[i, j], 0.01 * X[i, j]), name="leaky")


def _hardswish_ta(X):
    return ta.compute(
        X.shape,
        lambda i, j: X[i, j] * ta.minimum(ta.maximum(X[i, j] + 3.0, 0.0), 6.0) / 6.0,
        name="hardswish",
    )


def _grouped_linear_ta(X, W):
    k = ta.reduce_axis((0, X.shape[2]), "k")
    return ta.compute(
        (X.shape[0], X.shape[1], W.shape[2]),
        lambda g, b, o: ta.sum(X[g, b, k] * W[g, k, o], axis=k),
        name="glinear",
    )


def _cumsum_ta(X):
    k = ta.reduce_axis((0, X.shape[1]), "k")
    return ta.compute(X.shape, lambda i, j: ta.sum(X[i, k], axis=k, where=k <= j), name="cumsum")


def _cosine_ta(A, B):
    k1, k2, k3 = (ta.reduce_axis((0, A.shape[1]), n) for n in ("k1", "k2", "k3"))
    dot = ta.compute((A.shape[0],), lambda i: ta.sum(A[i, k1] * B[i, k1], axis=k1), name="dot")
    na = ta.compute((A.shape[0],), lambda i: ta.sum(A[i, k2] * A[i, k2], axis=k2), name="na")
    nb = ta.compute((A.shape[0],), lambda i: ta.sum(B[i, k3] * B[i, k3], axis=k3), name="nb")
    return ta.compute((A.shape[0],), lambda i: dot[i] / ta.sqrt(na[i] * nb[i] + 1e-8), name="cos")


f, pos, mask = "f", "pos", "mask"
CASES = {
    "gru": (
        "GRU cell 64x512 (x 256)",
        {
            "X": ((64, 256), f),
            "Hh": ((64, 512), f),
            "Wx": ((1536, 256), f),
            "Wh": ((1536, 512), f),
            "bx": ((1536,), f),
            "bh": ((1536,), f),
        },
        ("X", "Hh", "Wx", "Wh", "bx", "bh"),
        _gru_ta,
        _gru_pt,
    ),
    "conv1d": (
        "conv1d k3 p1 256ch L512 (compute)",
        {"X": ((8, 256, 512), f), "W": ((256, 256, 3), f)},
        ("X", "W"),
        _conv1d_ta,
        lambda X, W: F.conv1d(X, W, padding=1),
    ),
    "embedding": (
        "embedding 32000x512, 16x128 ids",
        {"E": ((32000, 512), f), "ids": ((16, 128), ("int", 32000))},
        ("E",),
        lambda E, ids: topi.nn.embedding(E, ids),
        lambda E, ids: F.embedding(ids.long(), E),
    ),
    "dwsep": (
        "dw3x3+relu+pw1x1 64->128 +relu 56",
        {"X": ((8, 64, 56, 56), f), "Wd": ((64, 1, 3, 3), f), "Wp": ((128, 64, 1, 1), f)},
        ("X", "Wd", "Wp"),
        _dwsep_ta,
        _dwsep_pt,
    ),
    "maxpool2": (
        "max pool 2x2 s2 (8,64,56,56)",
        {"X": ((8, 64, 56, 56), f)},
        ("X",),
        lambda X: topi.nn.pool(X, 2, 2, 0, "max"),
        lambda X: F.max_pool2d(X, 2, 2),
    ),
    "avgpool2": (
        "avg pool 2x2 s2 (8,64,56,56)",
        {"X": ((8, 64, 56, 56), f)},
        ("X",),
        lambda X: topi.nn.pool(X, 2, 2, 0, "avg"),
        lambda X: F.avg_pool2d(X, 2, 2),
    ),
    "se": (
        "squeeze-excite 128ch 28x28",
        {"X": ((8, 128, 28, 28), f), "W1": ((32, 128), f), "W2": ((128, 32), f)},
        ("X", "W1", "W2"),
        _se_block_ta,
        _se_block_pt,
    ),
    "masked_attn": (
        "attention + additive mask 8x256x64",
        {"Q": ((8, 256, 64), f), "K": ((8, 256, 64), f), "V": ((8, 256, 64), f), "M": ((256, 256), f)},
        ("Q", "K", "V"),
        _masked_attn_ta,
        _masked_attn_pt,
    ),
    "sqdist": (
        "pairwise sq. distance 1024x1024x128",
        {"X": ((1024, 128), f), "Y": ((1024, 128), f)},
        ("X", "Y"),
        _sqdist_ta,
        lambda X, Y: ((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1),
    ),
    "l2norm": (
        "L2-normalize rows 4096x256",
        {"X": ((4096, 256), f)},
        ("X",),
        _l2norm_ta,
        lambda X: X / torch.sqrt((X * X).sum(1, keepdim=True) + 1e-12),
    ),
    "bce": (
        "BCE with logits, mean 256x1000",
        {"Z": ((256, 1000), f), "T": ((256, 1000), mask)},
        ("Z",),
        _bce_ta,
        lambda Z, T: F.binary_cross_entropy_with_logits(Z, T),
    ),
    "softplus": ("softplus 64x4096", {"X": ((64, 4096), f)}, ("X",), _softplus_ta, lambda X: F.softplus(X)),
    "mish": ("mish 64x4096", {"X": ((64, 4096), f)}, ("X",), _mish_ta, lambda X: F.mish(X)),
    "pixel_shuffle": (
        "pixel shuffle r2 (8,256,28,28)",
        {"X": ((8, 256, 28, 28), f)},
        ("X",),
        _pixel_shuffle_ta,
        lambda X: F.pixel_shuffle(X, 2),
    ),
    "linear3d_gelu": (
        "(8,128,512)@(512,2048)+b, gelu tanh",
        {"X": ((8, 128, 512), f), "W": ((512, 2048), f), "B": ((2048,), f)},
        ("X", "W", "B"),
        _linear3d_ta,
        _linear3d_pt,
    ),
    "gmaxpool": (
        "global max pool (16,256,14,14)",
        {"X": ((16, 256, 14, 14), f)},
        ("X",),
        _gmaxpool_ta,
        lambda X: X.amax((2, 3)),
    ),
    "convT4x4s2": (
        "convT 4x4 s2 p1 128->64 16->32",
        {"X": ((8, 128, 16, 16), f), "W": ((128, 64, 4, 4), f)},
        ("X", "W"),
        lambda X, W: topi.nn.conv2d_transpose(X, W, 2, 1),
        lambda X, W: F.conv_transpose2d(X, W, stride=2, padding=1),
    ),
    "smoothl1": (
        "smooth L1 loss 256x1024",
        {"A": ((256, 1024), f), "B": ((256, 1024), f)},
        ("A",),
        _smoothl1_ta,
        lambda A, B: F.smooth_l1_loss(A, B),
    ),
    "lse": (
        "logsumexp rows 512x4096",
        {"X": ((512, 4096), f)},
        ("X",),
        _lse_ta,
        lambda X: torch.logsumexp(X, 1),
    ),
    "bilinear_form": (
        "bilinear x1 W x2 64x128x128->32",
        {"A": ((64, 128), f), "W": ((32, 128, 128), f), "B": ((64, 128), f)},
        ("A", "W", "B"),
        _bilinear_form_ta,
        lambda A, W, B: F.bilinear(A, B, W),
    ),
    "masked_mean": (
        "masked mean over tokens (32,256,512)",
        {"X": ((32, 256, 512), f), "M": ((32, 256), mask)},
        ("X",),
        _masked_mean_ta,
        lambda X, M: (X * M[:, :, None]).sum(1) / M.sum(1)[:, None],
    ),
    "conv_nhwc": (
        "conv 3x3 p1 NHWC 64->64 28x28 (compute)",
        {"X": ((8, 28, 28, 64), f), "W": ((3, 3, 64, 64), f)},
        ("X", "W"),
        _conv_nhwc_ta,
        _conv_nhwc_pt,
    ),
    "dropout": (
        "dropout (given mask) 256x4096",
        {"X": ((256, 4096), f), "M": ((256, 4096), mask)},
        ("X",),
        _dropout_ta,
        lambda X, M: X * M * 1.25,
    ),
    "leaky": (
        "leaky relu 256x4096",
        {"X": ((256, 4096), f)},
        ("X",),
        _leaky_ta,
        lambda X: F.leaky_relu(X, 0.01),
    ),
    "hardswish": (
        "hardswish 256x4096",
        {"X": ((256, 4096), f)},
        ("X",),
        _hardswish_ta,
        lambda X: F.hardswish(X),
    ),
    "grouped_linear": (
        "grouped linear 8 x (256x256 @ 256x256)",
        {"X": ((8, 256, 256), f), "W": ((8, 256, 256), f)},
        ("X", "W"),
        _grouped_linear_ta,
        lambda X, W: torch.bmm(X, W),
    ),
    "cumsum": (
        "cumsum (where k<=j) 64x1024",
        {"X": ((64, 1024), f)},
        ("X",),
        _cumsum_ta,
        lambda X: torch.cumsum(X, 1),
    ),
    "cosine": (
        "row cosine similarity 4096x256",
        {"A": ((4096, 256), f), "B": ((4096, 256), f)},
        ("A", "B"),
        _cosine_ta,
        lambda A, B: (A * B).sum(1) / torch.sqrt((A * A).sum(1) * (B * B).sum(1) + 1e-8),
    ),
    "upsample_bilinear": (
        "upsample bilinear 2x (8,64,28,28)",
        {"X": ((8, 64, 28, 28), f)},
        ("X",),
        lambda X: topi.nn.upsampling(X, 2, method="bilinear"),
        lambda X: F.interpolate(X, scale_factor=2, mode="bilinear", align_corners=False),
    ),
}
# ---------------------------------------------------------------- more ordinary layers


def _conv1d_s2_ta(X, W):
    n, c, length = X.shape
    o, _, kw = W.shape
    lo = (length + 2 - kw) // 2 + 1
    rc, rk = ta.reduce_axis((0, c), "c"), ta.reduce_axis((0, kw), "k")
    return ta.compute(
        (n, o, lo),
        lambda b, oc, i: ta.sum(
            ta.if_then_else((2 * i + rk >= 1) & (2 * i + rk <= length), X[b, rc, 2 * i + rk - 1], 0.0)
            * W[oc, rc, rk],
            axis=[rc, rk],
        ),
        name="conv1d_s2",
    )


def _pw_nhwc_ta(X, W):
    c = ta.reduce_axis((0, X.shape[3]), "c")
    return ta.compute(
        X.shape[:3] + (W.shape[1],),
        lambda b, y, x, o: ta.sum(X[b, y, x, c] * W[c, o], axis=c),
        name="pw_nhwc",
    )


def _swiglu_ta(X, W1, W3, W2):
    g = topi.multiply(topi.nn.silu(topi.nn.dense(X, W1)), topi.nn.dense(X, W3))
    return topi.nn.dense(g, W2)


def _swiglu_pt(X, W1, W3, W2):
    return F.linear(F.silu(F.linear(X, W1)) * F.linear(X, W3), W2)


def _lstm_ta(X, Hh, Cc, Wx, Wh, b):
    g = topi.add(topi.add(topi.nn.dense(X, Wx), topi.nn.dense(Hh, Wh)), b)
    i, f_, gg, o = topi.split(g, 4, axis=1)
    c2 = topi.add(topi.multiply(topi.sigmoid(f_), Cc), topi.multiply(topi.sigmoid(i), topi.tanh(gg)))
    return topi.multiply(topi.sigmoid(o), topi.tanh(c2))


def _lstm_pt(X, Hh, Cc, Wx, Wh, b):
    i, f_, g, o = (X @ Wx.T + Hh @ Wh.T + b).chunk(4, 1)
    c2 = torch.sigmoid(f_) * Cc + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c2)


def _emb_sum_ta(E, ids):
    # the bag of each row summed: embedding lookup + sum over the tokens, as a user writes it
    t = ta.reduce_axis((0, ids.shape[1]), "t")
    return ta.compute(
        (ids.shape[0], E.shape[1]), lambda b, d: ta.sum(E[ids[b, t], d], axis=t), name="emb_sum"
    )


def _channel_nll_ta(X, L):
    # a segmentation loss: the class axis is 1 of NCHW, the labels one per pixel
    logp = topi.nn.log_softmax(X, axis=1)
    n, _, h, w = X.shape
    b, y, x = ta.reduce_axis((0, n), "b"), ta.reduce_axis((0, h), "y"), ta.reduce_axis((0, w), "x")
    return ta.compute((), lambda: ta.sum(-logp[b, L[b, y, x], y, x], axis=[b, y, x]) / float(n * h * w),
                      name="nll")


def _channel_layer_norm_ta(X, G, B):
    # ConvNeXt's LayerNorm2d: over the channels of NCHW, per pixel
    n, c, h, w = X.shape
    k = ta.reduce_axis((0, c), "k")
    mean = ta.compute((n, h, w), lambda b, y, x: ta.sum(X[b, k, y, x], axis=k) / float(c), name="mean")
    k2 = ta.reduce_axis((0, c), "k2")
    var = ta.compute((n, h, w), lambda b, y, x: ta.sum((X[b, k2, y, x] - mean[b, y, x]) ** 2, axis=k2)
                     / float(c), name="var")
    return ta.compute((n, c, h, w), lambda b, ch, y, x: (X[b, ch, y, x] - mean[b, y, x])
                      / ta.sqrt(var[b, y, x] + 1e-5) * G[ch] + B[ch], name="ln2d")


CASES.update({
    "dwconv3x3": (
        "depthwise conv 3x3 p1 (8,128,56,56)",
        {"X": ((8, 128, 56, 56), f), "W": ((128, 1, 3, 3), f)},
        ("X", "W"),
        lambda X, W: topi.nn.conv2d(X, W, 1, 1, groups=128),
        lambda X, W: F.conv2d(X, W, padding=1, groups=128),
    ),
    "groupconv": (
        "grouped conv 3x3 g32 128->128 28x28",
        {"X": ((8, 128, 28, 28), f), "W": ((128, 4, 3, 3), f)},
        ("X", "W"),
        lambda X, W: topi.nn.conv2d(X, W, 1, 1, groups=32),
        lambda X, W: F.conv2d(X, W, padding=1, groups=32),
    ),
    "dilconv": (
        "dilated conv 3x3 d2 p2 64->64 28x28",
        {"X": ((8, 64, 28, 28), f), "W": ((64, 64, 3, 3), f)},
        ("X", "W"),
        lambda X, W: topi.nn.conv2d(X, W, 1, 2, dilation=2),
        lambda X, W: F.conv2d(X, W, padding=2, dilation=2),
    ),
    "conv3x3s2": (
        "conv 3x3 s2 p1 64->128 56->28",
        {"X": ((8, 64, 56, 56), f), "W": ((128, 64, 3, 3), f)},
        ("X", "W"),
        lambda X, W: topi.nn.conv2d(X, W, 2, 1),
        lambda X, W: F.conv2d(X, W, stride=2, padding=1),
    ),
    "conv1d_s2": (
        "conv1d k3 s2 p1 128->256 L1024 (compute)",
        {"X": ((8, 128, 1024), f), "W": ((256, 128, 3), f)},
        ("X", "W"),
        _conv1d_s2_ta,
        lambda X, W: F.conv1d(X, W, stride=2, padding=1),
    ),
    "pw_nhwc": (
        "1x1 conv NHWC 256->128 28x28 (compute)",
        {"X": ((8, 28, 28, 256), f), "W": ((256, 128), f)},
        ("X", "W"),
        _pw_nhwc_ta,
        lambda X, W: X @ W,
    ),
    "rmsnorm": (
        "RMSNorm (16,128,1024)",
        {"X": ((16, 128, 1024), f), "G": ((1024,), pos)},
        ("X", "G"),
        lambda X, G: topi.nn.rms_norm(X, G, 1e-6),
        lambda X, G: F.rms_norm(X, (1024,), G, 1e-6),
    ),
    "groupnorm": (
        "GroupNorm 32g (8,256,28,28)",
        {"X": ((8, 256, 28, 28), f), "G": ((256,), pos), "B": ((256,), f)},
        ("X", "G", "B"),
        lambda X, G, B: topi.nn.group_norm(X, 32, G, B),
        lambda X, G, B: F.group_norm(X, 32, G, B),
    ),
    "instnorm": (
        "instance norm (8,64,56,56)",
        {"X": ((8, 64, 56, 56), f), "G": ((64,), pos), "B": ((64,), f)},
        ("X", "G", "B"),
        lambda X, G, B: topi.nn.instance_norm(X, G, B),
        lambda X, G, B: F.instance_norm(X, weight=G, bias=B),
    ),
    "swiglu": (
        "SiLU-gated MLP 256x512->1376->512",
        {"X": ((256, 512), f), "W1": ((1376, 512), f), "W3": ((1376, 512), f), "W2": ((512, 1376), f)},
        ("X", "W1", "W3", "W2"),
        _swiglu_ta,
        _swiglu_pt,
    ),
    "causal_attn": (
        "causal attention (16,256,64)",
        {"Q": ((16, 256, 64), f), "K": ((16, 256, 64), f), "V": ((16, 256, 64), f)},
        ("Q", "K", "V"),
        lambda Q, K, V: topi.nn.scaled_dot_product_attention(Q, K, V, causal=True),
        lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V, is_causal=True),
    ),
    "emb_sum": (
        "embedding 32000x256 + sum, 64x32 ids",
        {"E": ((32000, 256), f), "ids": ((64, 32), ("int", 32000))},
        ("E",),
        _emb_sum_ta,
        lambda E, ids: F.embedding_bag(ids.long(), E, mode="sum"),
    ),
    "ce_smooth": (
        "cross-entropy ls=0.1 512x1000",
        {"Z": ((512, 1000), f), "L": ((512,), ("int", 1000))},
        ("Z",),
        lambda Z, L: topi.nn.cross_entropy(Z, L, label_smoothing=0.1),
        lambda Z, L: F.cross_entropy(Z, L.long(), label_smoothing=0.1),
    ),
    "upsample_nearest": (
        "upsample nearest 2x (8,64,28,28)",
        {"X": ((8, 64, 28, 28), f)},
        ("X",),
        lambda X: topi.nn.upsampling(X, 2),
        lambda X: F.interpolate(X, scale_factor=2, mode="nearest"),
    ),
    "lstm": (
        "LSTM cell 64x512 (x 256)",
        {
            "X": ((64, 256), f),
            "Hh": ((64, 512), f),
            "Cc": ((64, 512), f),
            "Wx": ((2048, 256), f),
            "Wh": ((2048, 512), f),
            "b": ((2048,), f),
        },
        ("X", "Hh", "Cc", "Wx", "Wh", "b"),
        _lstm_ta,
        _lstm_pt,
    ),
})


# ---------------------------------------------------------------- what a user writes next


def _conv_bias_silu_ta(X, W, B):
    y = topi.nn.conv2d(X, W, 1, 1)
    return topi.nn.silu(ta.compute(y.shape, lambda n, c, i, j: y[n, c, i, j] + B[c], name="bias"))


def _rope_ta(X, C, S):
    # rotate-half rotary embedding (Llama): X * cos + rotate_half(X) * sin
    _, t, d = X.shape
    h = d // 2
    return ta.compute(
        X.shape,
        lambda b, i, j: X[b, i, j] * C[i, j]
        + ta.if_then_else(j < h, -X[b, i, j + h], X[b, i, j - h])
        * S[i, j],
        name="rope",
    )


def _rope_pt(X, C, S):
    h = X.shape[-1] // 2
    return X * C + torch.cat((-X[..., h:], X[..., :h]), -1) * S


def _causal_dwconv1d_ta(X, W):
    # depthwise causal conv over a sequence (left padding k-1), as in Mamba/Hyena blocks
    kw = W.shape[1]
    k = ta.reduce_axis((0, kw), "k")
    return ta.compute(
        X.shape,
        lambda b, c, t: ta.sum(
            ta.if_then_else(t + k >= kw - 1, X[b, c, t + k - (kw - 1)], 0.0) * W[c, k], axis=k
        ),
        name="causal_dwconv1d",
    )


def _causal_dwconv1d_pt(X, W):
    return F.conv1d(F.pad(X, (W.shape[1] - 1, 0)), W[:, None, :], groups=X.shape[1])


def _glu_ta(X):
    a, b = topi.split(X, 2, axis=1)
    return topi.multiply(a, topi.sigmoid(b))


def _gram_ta(Fm):
    k = ta.reduce_axis((0, Fm.shape[2]), "k")
    inv = 1.0 / Fm.shape[2]
    return ta.compute(
        (Fm.shape[0], Fm.shape[1], Fm.shape[1]),
        lambda b, i, j: ta.sum(Fm[b, i, k] * Fm[b, j, k], axis=k) * inv,
        name="gram",
    )


def _affine_res_relu_ta(X, R, G, B):
    return ta.compute(
        X.shape,
        lambda n, c, i, j: ta.maximum(X[n, c, i, j] * G[c] + B[c] + R[n, c, i, j], 0.0),
        name="affine_res_relu",
    )


CASES.update({
    "conv_bias_silu": (
        "conv 3x3 p1 64->64 28x28 + bias + SiLU",
        {"X": ((8, 64, 28, 28), f), "W": ((64, 64, 3, 3), f), "B": ((64,), f)},
        ("X", "W", "B"),
        _conv_bias_silu_ta,
        lambda X, W, B: F.silu(F.conv2d(X, W, B, padding=1)),
    ),
    "stem7x7s2": (
        "stem conv 7x7 s2 p3 3->64 112->56",
        {"X": ((8, 3, 112, 112), f), "W": ((64, 3, 7, 7), f)},
        ("X", "W"),
        lambda X, W: topi.nn.conv2d(X, W, 2, 3),
        lambda X, W: F.conv2d(X, W, stride=2, padding=3),
    ),
    "rope": (
        "rotary embedding (64,256,64)",
        {"X": ((64, 256, 64), f), "C": ((256, 64), f), "S": ((256, 64), f)},
        ("X",),
        _rope_ta,
        _rope_pt,
    ),
    "cross_attn": (
        "cross attention q128 kv384 (8,.,64)",
        {"Q": ((8, 128, 64), f), "K": ((8, 384, 64), f), "V": ((8, 384, 64), f)},
        ("Q", "K", "V"),
        lambda Q, K, V: topi.nn.scaled_dot_product_attention(Q, K, V),
        lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V),
    ),
    "causal_dwconv1d": (
        "causal depthwise conv1d k4 (8,256,1024)",
        {"X": ((8, 256, 1024), f), "W": ((256, 4), f)},
        ("X", "W"),
        _causal_dwconv1d_ta,
        _causal_dwconv1d_pt,
    ),
    "avgpool3s1": (
        "avg pool 3x3 s1 p1 excl. pad (8,64,56,56)",
        {"X": ((8, 64, 56, 56), f)},
        ("X",),
        lambda X: topi.nn.pool(X, 3, 1, 1, "avg", count_include_pad=False),
        lambda X: F.avg_pool2d(X, 3, 1, 1, count_include_pad=False),
    ),
    "glu": ("GLU over features 256x4096", {"X": ((256, 4096), f)}, ("X",), _glu_ta, lambda X: F.glu(X, 1)),
    "softmax_ch": (
        "softmax over channels (8,21,128,128)",
        {"X": ((8, 21, 128, 128), f)},
        ("X",),
        lambda X: topi.nn.softmax(X, axis=1),
        lambda X: F.softmax(X, 1),
    ),
    "logsoftmax_ch_nll": (
        "log-softmax over channels + NLL, labels (8,21,128,128)",
        {"X": ((8, 21, 128, 128), f), "L": ((8, 128, 128), ("int", 21))},
        ("X",),
        _channel_nll_ta,
        lambda X, L: F.nll_loss(F.log_softmax(X, 1), L.long()),
    ),
    "layernorm_ch": (
        "channels-first layer norm over C (8,96,56,56)",
        {"X": ((8, 96, 56, 56), f), "G": ((96,), pos), "B": ((96,), f)},
        ("X", "G", "B"),
        _channel_layer_norm_ta,
        lambda X, G, B: F.layer_norm(X.permute(0, 2, 3, 1), (96,), G, B).permute(0, 3, 1, 2),
    ),
    "gram": (
        "Gram matrix F F^T / K (8,256,1024)",
        {"Fm": ((8, 256, 1024), f)},
        ("Fm",),
        _gram_ta,
        lambda Fm: Fm @ Fm.transpose(1, 2) / Fm.shape[2],
    ),
    "affine_res_relu": (
        "x*g[c]+b[c]+residual, relu (8,128,28,28)",
        {"X": ((8, 128, 28, 28), f), "R": ((8, 128, 28, 28), f), "G": ((128,), pos), "B": ((128,), f)},
        ("X", "R", "G", "B"),
        _affine_res_relu_ta,
        lambda X, R, G, B: F.relu(X * G[:, None, None] + B[:, None, None] + R),
    ),
})


# storage-dtype cases: (name, half dtype, case key)
def _mse_ta(P, T):
    i, j = ta.reduce_axis((0, P.shape[0]), "i"), ta.reduce_axis((0, P.shape[1]), "j")
    size = float(P.shape[0] * P.shape[1])
    return ta.compute((), lambda: ta.sum((P[i, j] - T[i, j]) ** 2, axis=[i, j]) / size, name="mse")


def _gelu_tanh_ta(X):
    c = (2.0 / np.pi) ** 0.5
    return ta.compute(X.shape, lambda i, j: 0.5 * X[i, j]
                      * (1.0 + ta.tanh(c * (X[i, j] + 0.044715 * X[i, j] ** 3))), name="gelu_tanh")


def _channel_pool_ta(X):
    # CBAM's spatial attention input: the max and the mean over the channels, side by side
    n, c, h, w = X.shape
    k, k2 = ta.reduce_axis((0, c), "k"), ta.reduce_axis((0, c), "k2")
    mx = ta.compute((n, h, w), lambda b, y, x: ta.max(X[b, k, y, x], axis=k), name="cmax")
    mean = ta.compute((n, h, w), lambda b, y, x: ta.sum(X[b, k2, y, x], axis=k2) / float(c), name="cmean")
    return ta.compute((n, 2, h, w), lambda b, t, y, x: ta.if_then_else(t == 0, mx[b, y, x], mean[b, y, x]),
                      name="cpool")


def _kl_ta(P, Q):
    # KL(p || q) per row, summed: p log p - p log q (p, q positive)
    i, j = ta.reduce_axis((0, P.shape[0]), "i"), ta.reduce_axis((0, P.shape[1]), "j")
    return ta.compute((), lambda: ta.sum(P[i, j] * (ta.log(P[i, j]) - ta.log(Q[i, j])), axis=[i, j]),
                      name="kl")


def _channel_shuffle_ta(X):
    n, c, h, w = X.shape
    g = 4
    return ta.compute(X.shape, lambda b, ch, y, x: X[b, (ch % g) * (c // g) + ch // g, y, x] * 1.0,
                      name="shuffle")


def _reflect_pad_ta(X):
    n, c, h, w = X.shape

    def refl(i, size):
        return ta.if_then_else(i < 0, -i, ta.if_then_else(i >= size, 2 * size - 2 - i, i))
    return ta.compute((n, c, h + 2, w + 2), lambda b, ch, y, x: X[b, ch, refl(y - 1, h), refl(x - 1, w)],
                      name="reflect_pad")


CASES.update({
    "mse": ("MSE loss 256x4096", {"P": ((256, 4096), f), "T": ((256, 4096), f)}, ("P",), _mse_ta,
            lambda P, T: F.mse_loss(P, T)),
    "gelu_tanh": ("GELU tanh approximation with x ** 3, 256x4096", {"X": ((256, 4096), f)}, ("X",),
                  _gelu_tanh_ta, lambda X: F.gelu(X, approximate="tanh")),
    "channel_pool": ("channel max + mean (CBAM) (8,64,56,56)", {"X": ((8, 64, 56, 56), f)}, ("X",),
                     _channel_pool_ta,
                     lambda X: torch.cat([X.amax(1, keepdim=True), X.mean(1, keepdim=True)], 1)),
    "kl": ("KL divergence 512x1000", {"P": ((512, 1000), pos), "Q": ((512, 1000), pos)}, ("P", "Q"), _kl_ta,
           lambda P, Q: (P * (P.log() - Q.log())).sum()),
    "channel_shuffle": ("channel shuffle g4 (8,128,28,28)", {"X": ((8, 128, 28, 28), f)}, ("X",),
                        _channel_shuffle_ta,
                        lambda X: X.reshape(8, 4, 32, 28, 28).transpose(1, 2).reshape(8, 128, 28, 28)),
    "reflect_pad": ("reflection pad 1 (8,64,56,56)", {"X": ((8, 64, 56, 56), f)}, ("X",), _reflect_pad_ta,
                    lambda X: F.pad(X, (1, 1, 1, 1), mode="reflect")),
    "groupconv8": ("grouped conv 3x3 g16 (8 a group) 128->128 28x28", {"X": ((8, 128, 28, 28), f),
                   "W": ((128, 8, 3, 3), f)}, ("X", "W"), lambda X, W: topi.nn.conv2d(X, W, 1, 1, groups=16),
                   lambda X, W: F.conv2d(X, W, padding=1, groups=16)),
    "conv1x1s2": ("conv 1x1 s2 (downsample) 256->512 28->14", {"X": ((8, 256, 28, 28), f),
                  "W": ((512, 256, 1, 1), f)}, ("X", "W"), lambda X, W: topi.nn.conv2d(X, W, 2, 0),
                  lambda X, W: F.conv2d(X, W, stride=2)),
    "convT3x3s2": ("convT 3x3 s2 p1 op1 64->32 28->56", {"X": ((8, 64, 28, 28), f), "W": ((64, 32, 3, 3), f)},
                   ("X", "W"), lambda X, W: topi.nn.conv2d_transpose(X, W, 2, 1, output_padding=1),
                   lambda X, W: F.conv_transpose2d(X, W, stride=2, padding=1, output_padding=1)),
    "dwconv3x3s2": ("depthwise conv 3x3 s2 p1 (8,128,56,56)", {"X": ((8, 128, 56, 56), f),
                    "W": ((128, 1, 3, 3), f)}, ("X", "W"),
                    lambda X, W: topi.nn.conv2d(X, W, 2, 1, groups=128),
                    lambda X, W: F.conv2d(X, W, stride=2, padding=1, groups=128)),
})


HALF = {
    "bf16_dense": (
        "bfloat16 dense 256x1024x1024",
        "bfloat16",
        {"X": ((256, 1024), f), "W": ((1024, 1024), f)},
        ("X", "W"),
        lambda X, W: topi.nn.dense(X, W),
        lambda X, W: F.linear(X, W),
    ),
    "bf16_layernorm": (
        "bfloat16 layer norm (64,128,768)",
        "bfloat16",
        {"X": ((64, 128, 768), f), "G": ((768,), pos), "B": ((768,), f)},
        ("X", "G", "B"),
        lambda X, G, B: topi.nn.layer_norm(X, G, B),
        lambda X, G, B: F.layer_norm(X, (768,), G, B),
    ),
    "f16_gelu": (
        "float16 gelu 256x4096",
        "float16",
        {"X": ((256, 4096), f)},
        ("X",),
        lambda X: topi.nn.gelu(X),
        lambda X: F.gelu(X),
    ),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*")
    p.add_argument("--no-check", action="store_true", help="skip the float64 check")
    p.add_argument("--no-time", action="store_true", help="only the float64 check")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--target", default="llvm", help='e.g. "llvm -mcpu=haswell"')
    p.add_argument("--threads", type=int, default=1, help="threads of both systems' timed runs")
    p.add_argument("--peer-isa", choices=("match", "native"), default="match",
                   help="match: a --target narrower than the host holds PyTorch to its instruction "
                        "set (benchmarks/threads.py); native: PyTorch uses the whole host")
    a = p.parse_args()
    if a.peer_isa == "match":
        run_again_with_peer_cap(a.target, sys.argv)
    torch.set_num_threads(a.threads)
    names = a.names or list(CASES) + list(HALF)
    for n in names:
        rng = np.random.default_rng(0)
        try:
            if n in CASES:
                title, shapes, grads, ta_fn, pt_fn = CASES[n]
                if not a.no_check:
                    check64(title, shapes, grads, ta_fn, pt_fn, rng, a.target)
                if not a.no_time:
                    timed(title, shapes, grads, ta_fn, pt_fn, rng, a.reps, target=a.target, threads=a.threads)
            else:
                title, half, shapes, grads, ta_fn, pt_fn = HALF[n]
                if not a.no_check:
                    check64(title, shapes, grads, ta_fn, pt_fn, rng, a.target)
                if not a.no_time:
                    timed(
                        title, shapes, grads, ta_fn, pt_fn, rng, a.reps,
                        half=half, target=a.target, threads=a.threads,
                    )
        except Exception as e:  # a probe reports every failure and goes on
            print(f"{n:34s} ERROR {type(e).__name__}: {str(e)[:400]}", flush=True)


if __name__ == "__main__":
    main()
