"""Layers over a symbolic batch, one build, every count: python dev/sweep/batch.py LOG [NAME ...]"""

import sys
import time
import traceback

import numpy as np
import torch
from harness import canary_ok, guarded, relerr, tol

import tensorad as ta
from tensorad import topi

F = torch.nn.functional
COUNTS = [1, 2, 7, 63, 64, 65, 255, 256, 257, 300]


def cases():
    """(name, per-row shapes of the batched inputs, fixed shapes, ta_fn(n, *phs), torch_fn, ints)"""
    return [
        (
            "dense_tanh",
            [(33,)],
            [(17, 33), (17,)],
            lambda X, W, B: topi.tanh(topi.nn.dense(X, W, B)),
            lambda x, w, b: torch.tanh(F.linear(x, w, b)),
            None,
        ),
        (
            "dense_mean_loss",
            [(9,)],
            [(5, 9)],
            lambda X, W: topi.mean(topi.multiply(topi.nn.dense(X, W), topi.nn.dense(X, W))),
            lambda x, w: (F.linear(x, w) ** 2).mean(),
            None,
        ),
        (
            "conv_relu",
            [(3, 7, 7)],
            [(5, 3, 3, 3)],
            lambda X, W: topi.nn.relu(topi.nn.conv2d(X, W, 1, 1)),
            lambda x, w: F.relu(F.conv2d(x, w, padding=1)),
            None,
        ),
        (
            "conv_s2",
            [(4, 9, 9)],
            [(6, 4, 3, 3)],
            lambda X, W: topi.nn.conv2d(X, W, 2, 1),
            lambda x, w: F.conv2d(x, w, stride=2, padding=1),
            None,
        ),
        (
            "dwconv",
            [(8, 6, 6)],
            [(8, 1, 3, 3)],
            lambda X, W: topi.nn.conv2d(X, W, 1, 1, groups=8),
            lambda x, w: F.conv2d(x, w, padding=1, groups=8),
            None,
        ),
        (
            "layer_norm",
            [(17,)],
            [(17,), (17,)],
            lambda X, G, B: topi.nn.layer_norm(X, G, B),
            lambda x, g, b: F.layer_norm(x, (17,), g, b),
            None,
        ),
        ("softmax", [(5, 13)], [], lambda X: topi.nn.softmax(X), lambda x: torch.softmax(x, -1), None),
        (
            "batch_norm",
            [(3, 4, 4)],
            [(3,), (3,)],
            lambda X, G, B: topi.nn.batch_norm(X, G, B),
            lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True),
            None,
        ),
        (
            "attention_causal",
            [(3, 5, 8), (3, 5, 8), (3, 5, 4)],
            [],
            lambda Q, K, V: topi.nn.scaled_dot_product_attention(Q, K, V, True),
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            None,
        ),
        (
            "max_pool",
            [(2, 7, 7)],
            [],
            lambda X: topi.nn.pool(X, 3, 2, 1, "max"),
            lambda x: F.max_pool2d(x, 3, 2, 1),
            None,
        ),
        (
            "cross_entropy",
            [(11,)],
            [],
            lambda X, L: topi.nn.cross_entropy(X, L, "mean"),
            lambda x, lab: F.cross_entropy(x, lab.long()),
            (1, (), 0, 11),
        ),
        (
            "sum_rows_dense",
            [(7,)],
            [(3, 7)],
            lambda X, W: topi.sum(topi.nn.dense(X, W), 0),
            lambda x, w: F.linear(x, w).sum(0),
            None,
        ),
    ]


def rnn3(X0, X1, X2, W, U):
    h = None
    for x in (X0, X1, X2):
        z = topi.nn.dense(x, W)
        h = topi.tanh(z if h is None else topi.add(z, topi.nn.dense(h, U)))
    return h


def cases2():
    """Programs that read one weight in several products (tied, shared sides, unrolled steps)."""
    return [
        (
            "tied_square",
            [(6,)],
            [(6, 6)],
            lambda X, W: topi.nn.dense(topi.tanh(topi.nn.dense(X, W)), W),
            lambda x, w: F.linear(torch.tanh(F.linear(x, w)), w),
            None,
        ),
        (
            "two_products_one_side",
            [(7,)],
            [(5, 7), (5, 7)],
            lambda X, W, V: topi.multiply(topi.nn.dense(X, W), topi.nn.dense(X, V)),
            lambda x, w, v: F.linear(x, w) * F.linear(x, v),
            None,
        ),
        (
            "rnn3",
            [(4,), (4,), (4,)],
            [(6, 4), (6, 6)],
            rnn3,
            lambda a, b, c, w, u: torch.tanh(
                F.linear(c, w)
                + F.linear(torch.tanh(F.linear(b, w) + F.linear(torch.tanh(F.linear(a, w)), u)), u)
            ),
            None,
        ),
        (
            "same_dense_twice_sum",
            [(9,)],
            [(5, 9)],
            lambda X, W: topi.sum(topi.add(topi.nn.dense(X, W), topi.tanh(topi.nn.dense(X, W)))),
            lambda x, w: (F.linear(x, w) + torch.tanh(F.linear(x, w))).sum(),
            None,
        ),
        (
            "mean_of_squares_twice",
            [(3, 5)],
            [(4, 5)],
            lambda X, W: topi.mean(
                topi.multiply(topi.matmul(X, topi.transpose(W)), topi.matmul(X, topi.transpose(W)))
            ),
            lambda x, w: ((x @ w.T) * (x @ w.T)).mean(),
            None,
        ),
    ]


def run(case, dtype, threads, target, counts, log, multiple_of=None):
    name, rows, fixed, ta_fn, torch_fn, ints = case
    n = ta.size_var("n")
    phs = [ta.placeholder((n,) + s, dtype, f"r{k}") for k, s in enumerate(rows)]
    fph = [ta.placeholder(s, dtype, f"f{k}") for k, s in enumerate(fixed)]
    allp = phs + fph
    if ints is not None:
        pos, shape, lo, hi = ints
        ip = ta.placeholder((n,) + shape, "int32", "lab")
        allp.insert(pos, ip)
    fl = [p for p in allp if p.dtype != "int32"]
    y = ta_fn(*allp)
    H = ta.placeholder(y.shape, dtype, "H")
    grads = ta.gradient(y, fl, H)
    t0 = time.time()
    k = ta.build([y, *grads], allp + [H], target=target, num_threads=threads)
    bt = time.time() - t0
    npdt = np.float32 if dtype == "float32" else np.float64
    out = []
    for c in counts:
        rng = np.random.default_rng(c)
        vals, bufs = [], []
        for p in allp:
            shape = tuple(
                c if (isinstance(s, ta.Expr) if hasattr(ta, "Expr") else not isinstance(s, int)) else s
                for s in p.shape
            )
            if p.dtype == "int32":
                b, v = guarded(
                    shape, np.int32, 7, values=rng.integers(ints[2], ints[3], shape).astype(np.int32)
                )
            else:
                b, v = guarded(shape, npdt, 7.25, values=rng.uniform(-1, 1, shape).astype(npdt))
            vals.append(v)
            bufs.append(b)
        ts = [
            torch.tensor(
                v.astype(np.float64) if v.dtype != np.int32 else v, requires_grad=v.dtype != np.int32
            )
            for v in vals
        ]
        ref = torch_fn(*ts)
        hshape = tuple(ref.shape)
        hb, hv = guarded(hshape, npdt, 7.25, values=rng.uniform(-1, 1, hshape).astype(npdt))
        oshapes = [hshape] + [tuple(v.shape) for v in vals if v.dtype != np.int32]
        ob = [guarded(s, npdt, np.nan) for s in oshapes]
        errs = []
        try:
            k(*vals, hv, out=tuple(v for _, v in ob))
        except Exception as ex:  # noqa: BLE001
            errs.append(f"{type(ex).__name__}: {str(ex)[:200]}")
        else:
            if not all(canary_ok(b, 7 if b.dtype == np.int32 else 7.25) for b in bufs + [hb]):
                errs.append("input canary")
            if not all(canary_ok(b, np.nan) for b, _ in ob):
                errs.append("output canary")
            e = relerr(ob[0][1], ref.detach().numpy())
            if e > tol(dtype):
                errs.append(f"forward {e:.3g}")
            refs = torch.autograd.grad(
                ref, [t for t in ts if t.requires_grad], torch.tensor(hv.astype(np.float64))
            )
            for j, ((_, g), r) in enumerate(zip(ob[1:], refs)):
                e = relerr(g, r.numpy())
                if e > tol(dtype):
                    errs.append(f"grad{j} {e:.3g}")
        out.append((c, errs))
    bad = [(c, e) for c, e in out if e]
    line = (
        f"{'FAIL' if bad else 'ok'} {name} {dtype} t{threads} {target} generic={getattr(k, 'generic', '?')}"
        f" build {bt:.1f}s {bad}"
    )
    print(line, flush=True)
    with open(log, "a") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    log = sys.argv[1]
    names = sys.argv[2:]
    for case in cases() + cases2():
        if names and case[0] not in names:
            continue
        for dtype, threads, target in [
            ("float32", 1, "llvm"),
            ("float32", 2, "llvm -mcpu=haswell"),
            ("float64", 2, "llvm"),
        ]:
            try:
                run(case, dtype, threads, target, COUNTS, log)
            except Exception as ex:  # noqa: BLE001
                traceback.print_exc()
                with open(log, "a") as f:
                    f.write(
                        f"ERROR {case[0]} {dtype} t{threads} {target} {type(ex).__name__}: {str(ex)[:300]}\n"
                    )
