"""Programs over two size variables (a batch b and a length L), one build, many sizes, against PyTorch
float64: python dev/sweep/sizes2.py LOG"""

import sys
import traceback

import numpy as np
import torch
from harness import relerr, tol

import tensorad as ta
from tensorad import topi

F = torch.nn.functional
SIZES = [(1, 1), (1, 2), (2, 1), (2, 3), (3, 7), (1, 17), (5, 16), (65, 2), (7, 33), (2, 64), (1, 65)]


def attn(Q, K, V):
    return topi.nn.scaled_dot_product_attention(Q, K, V, True)


def block(X, G, B, W):
    h = topi.nn.layer_norm(X, G, B)
    return topi.nn.gelu(topi.matmul(h, W))


def mean_loss(X, W):
    return topi.mean(topi.nn.softmax(topi.matmul(X, W)))


CASES = [
    (
        "causal attention",
        lambda b, L: [(b, L, 8), (b, L, 8), (b, L, 4)],
        attn,
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    ),
    (
        "ln gelu matmul",
        lambda b, L: [(b, L, 6), (6,), (6,), (6, 5)],
        block,
        lambda x, g, bb, w: F.gelu(F.layer_norm(x, (6,), g, bb) @ w),
    ),
    (
        "softmax mean",
        lambda b, L: [(b, L, 7), (7, 3)],
        mean_loss,
        lambda x, w: torch.softmax(x @ w, -1).mean(),
    ),
]


def run(name, shapes, ta_fn, torch_fn, dtype, threads, log):
    b, L = ta.size_var("b"), ta.size_var("L")
    phs = [ta.placeholder(s, dtype, f"in{k}") for k, s in enumerate(shapes(b, L))]
    y = ta_fn(*phs)
    H = ta.placeholder(y.shape, dtype, "H")
    grads = ta.gradient(y, phs, H)
    k = ta.build([y, *grads], phs + [H], num_threads=threads)
    bad = []
    for bb, ll in SIZES:
        rng = np.random.default_rng(bb * 100 + ll)
        npdt = np.float32 if dtype == "float32" else np.float64
        vals = [rng.uniform(-1, 1, s).astype(npdt) for s in shapes(bb, ll)]
        ts = [torch.tensor(v.astype(np.float64), requires_grad=True) for v in vals]
        ref = torch_fn(*ts)
        h = rng.uniform(-1, 1, tuple(ref.shape)).astype(npdt)
        try:
            got = k(*vals, h)
            refs = torch.autograd.grad(ref, ts, torch.tensor(h.astype(np.float64)))
            errs = [relerr(got[0], ref.detach().numpy())] + [
                relerr(g, r.numpy()) for g, r in zip(got[1:], refs)
            ]
            if max(errs) > tol(dtype):
                bad.append(((bb, ll), [f"{e:.2g}" for e in errs]))
        except Exception as ex:  # noqa: BLE001
            traceback.print_exc()
            bad.append(((bb, ll), f"{type(ex).__name__}: {str(ex)[:200]}"))
    line = f"{'FAIL' if bad else 'ok'} {name} {dtype} t{threads} generic={k.generic} {bad}"
    print(line, flush=True)
    with open(log, "a") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    for case in CASES:
        for dtype, threads in [("float32", 1), ("float64", 2)]:
            try:
                run(*case, dtype, threads, sys.argv[1])
            except Exception as ex:  # noqa: BLE001
                traceback.print_exc()
                with open(sys.argv[1], "a") as f:
                    f.write(f"ERROR {case[0]} {dtype} {type(ex).__name__}: {str(ex)[:300]}\n")
