"""Random products, pools, norms, softmax and attention: python dev/sweep/layers.py SEED COUNT LOG"""

import random
import sys

import torch
from harness import configs, sweep

from tensorad import topi

F = torch.nn.functional
FORCE = False
WINO = False
ODD = [1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33, 47, 48, 49, 63, 64, 65, 127, 129]


def matmul_case(r):
    m, n, k = r.choice(ODD), r.choice(ODD), r.choice(ODD)
    kind = r.choice(["dense", "densebias", "matmul", "batched", "tanh"])
    if kind == "dense":
        return (
            f"dense {m}x{k} W{n}x{k}",
            [(m, k), (n, k)],
            lambda X, W: topi.nn.dense(X, W),
            lambda x, w: F.linear(x, w),
            None,
        )
    if kind == "densebias":
        return (f"dense+b {m}x{k} W{n}x{k}", [(m, k), (n, k), (n,)], topi.nn.dense, F.linear, None)
    if kind == "tanh":
        return (
            f"tanh(dense) {m}x{k} W{n}x{k}",
            [(m, k), (n, k)],
            lambda X, W: topi.tanh(topi.nn.dense(X, W)),
            lambda x, w: torch.tanh(F.linear(x, w)),
            None,
        )
    if kind == "matmul":
        return (f"matmul {m}x{k}@{k}x{n}", [(m, k), (k, n)], topi.matmul, torch.matmul, None)
    b = r.choice([1, 2, 3, 5])
    return (f"bmm {b}x{m}x{k}@{k}x{n}", [(b, m, k), (b, k, n)], topi.matmul, torch.matmul, None)


def pool_case(r):
    n, c = r.choice([1, 2, 3]), r.choice([1, 2, 3, 5, 8, 17])
    h, w = r.choice([1, 2, 3, 4, 5, 7, 9]), r.choice([1, 2, 3, 4, 5, 7, 9])
    k = (r.choice([1, 2, 3, 4, 5, 7]), r.choice([1, 2, 3, 4, 5, 7]))
    s = (r.choice([1, 2, 3]), r.choice([1, 2, 3]))
    p = (r.randrange(0, k[0] // 2 + 1), r.randrange(0, k[1] // 2 + 1))
    kind = r.choice(["max", "avg"])
    cip = r.choice([True, False])
    oh = (h + 2 * p[0] - k[0]) // s[0] + 1
    ow = (w + 2 * p[1] - k[1]) // s[1] + 1
    if oh < 1 or ow < 1:
        return None

    def tpool(x, k=k, s=s, p=p, kind=kind, cip=cip):
        if kind == "max":
            return F.max_pool2d(x, k, s, p)
        return F.avg_pool2d(x, k, s, p, count_include_pad=cip)

    return (
        f"pool {kind} x{(n, c, h, w)} k{k} s{s} p{p} cip{cip}",
        [(n, c, h, w)],
        lambda X, k=k, s=s, p=p, kind=kind, cip=cip: topi.nn.pool(
            X, k, s, (p[0], p[1], p[0], p[1]), kind, cip
        ),
        tpool,
        None,
    )


def norm_case(r):
    shape = tuple(r.choice([1, 1, 2, 3, 5, 7, 16, 17, 33]) for _ in range(r.choice([2, 3, 4])))
    kind = r.choice(["ln", "sm", "lsm", "rms", "bn", "gn", "in", "ce"])
    if kind == "ln":
        return (
            f"layer_norm {shape}",
            [shape, shape[-1:], shape[-1:]],
            lambda X, G, B: topi.nn.layer_norm(X, G, B),
            lambda x, g, b: F.layer_norm(x, x.shape[-1:], g, b),
            None,
        )
    if kind == "sm":
        ax = r.randrange(len(shape))
        return (
            f"softmax {shape} ax{ax}",
            [shape],
            lambda X, ax=ax: topi.nn.softmax(X, ax),
            lambda x, ax=ax: torch.softmax(x, ax),
            None,
        )
    if kind == "lsm":
        ax = r.randrange(len(shape))
        return (
            f"log_softmax {shape} ax{ax}",
            [shape],
            lambda X, ax=ax: topi.nn.log_softmax(X, ax),
            lambda x, ax=ax: F.log_softmax(x, ax),
            None,
        )
    if kind == "rms":
        return (
            f"rms_norm {shape}",
            [shape, shape[-1:]],
            lambda X, G: topi.nn.rms_norm(X, G, eps=1e-6),
            lambda x, g: F.rms_norm(x, x.shape[-1:], g, eps=1e-6),
            None,
        )
    if kind == "ce":
        n, c = shape[0], shape[-1]
        red = r.choice(["mean", "sum", "none"])
        return (
            f"cross_entropy {n}x{c} {red}",
            [(n, c)],
            lambda X, L, red=red: topi.nn.cross_entropy(X, L, red),
            lambda x, lab, red=red: F.cross_entropy(x, lab.long(), reduction=red),
            {1: ((n,), 0, c)},
        )
    if len(shape) < 3:
        shape = shape + (r.choice([1, 2, 3]),)
    c = shape[1]
    if kind == "bn":
        return (
            f"batch_norm {shape}",
            [shape, (c,), (c,)],
            lambda X, G, B: topi.nn.batch_norm(X, G, B),
            lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True),
            None,
        )
    if kind == "in":
        if all(s == 1 for s in shape[2:]):
            return None
        return (
            f"instance_norm {shape}",
            [shape, (c,), (c,)],
            lambda X, G, B: topi.nn.instance_norm(X, G, B),
            lambda x, g, b: F.instance_norm(x, weight=g, bias=b),
            None,
        )
    groups = r.choice([d for d in range(1, c + 1) if c % d == 0])
    return (
        f"group_norm {shape} g{groups}",
        [shape, (c,), (c,)],
        lambda X, G, B, groups=groups: topi.nn.group_norm(X, groups, G, B),
        lambda x, g, b, groups=groups: F.group_norm(x, groups, g, b),
        None,
    )


def attn_case(r):
    b = tuple(r.choice([1, 2, 3]) for _ in range(r.choice([1, 2])))
    lq = r.choice([1, 2, 3, 5, 8, 17])
    causal = r.random() < 0.5
    s = lq if causal and r.random() < 0.6 else r.choice([1, 2, 3, 5, 8, 17])
    if causal and s < lq:
        s = lq
    dd, dv = r.choice([1, 2, 3, 8, 16, 17]), r.choice([1, 2, 3, 8, 16, 17])
    return (
        f"attention b{b} L{lq} S{s} D{dd} Dv{dv} causal{causal}",
        [b + (lq, dd), b + (s, dd), b + (s, dv)],
        lambda Q, K, V, causal=causal: topi.nn.scaled_dot_product_attention(Q, K, V, causal),
        lambda q, k, v, causal=causal, lq=lq, s=s: F.scaled_dot_product_attention(
            q, k, v, attn_mask=torch.ones(lq, s, dtype=torch.bool).tril() if causal else None
        ),
        None,
    )



KINDS = {"matmul": matmul_case, "pool": pool_case, "norm": norm_case, "attn": attn_case}

if __name__ == "__main__":
    seed, count, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    kinds = sys.argv[4].split(",") if len(sys.argv) > 4 else list(KINDS)
    r = random.Random(seed)
    FORCE = "force" in sys.argv[5:]
    WINO = "wino" in sys.argv[5:]
    done = 0
    while done < count:
        c = KINDS[r.choice(kinds)](r)
        if c is None:
            continue
        done += 1
        sweep([c], configs(r, FORCE, WINO), log)
