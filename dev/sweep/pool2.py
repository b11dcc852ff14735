"""Pools with asymmetric padding ([top, left, bottom, right]) at small images against PyTorch float64 (the
padding written with F.pad): python dev/sweep/pool2.py SEED COUNT LOG"""

import random
import sys

import torch
from harness import sweep

from tensorad import topi

F = torch.nn.functional


def case(r):
    n, c = r.choice([1, 2]), r.choice([1, 3, 8, 17])
    h, w = r.choice([1, 2, 3, 4, 5, 7, 9, 16]), r.choice([1, 2, 3, 4, 5, 7, 9, 16])
    kh, kw = r.choice([1, 2, 3, 5, 8]), r.choice([1, 2, 3, 5, 8])
    sh, sw = r.choice([1, 2, 3, 4]), r.choice([1, 2, 3, 4])
    pads = (r.randrange(kh), r.randrange(kw), r.randrange(kh), r.randrange(kw))
    kind, cip = r.choice(["max", "avg"]), r.choice([True, False])
    top, left, bottom, right = pads
    if (h + top + bottom - kh) < 0 or (w + left + right - kw) < 0:
        return None

    def tpool(x, kind=kind, cip=cip):
        pad = (left, right, top, bottom)
        if kind == "max":
            return F.max_pool2d(F.pad(x, pad, value=-float("inf")), (kh, kw), (sh, sw))
        total = F.avg_pool2d(F.pad(x, pad), (kh, kw), (sh, sw)) * (kh * kw)
        if cip:
            return total / (kh * kw)
        ones = F.pad(torch.ones_like(x), pad)
        return total / (F.avg_pool2d(ones, (kh, kw), (sh, sw)) * (kh * kw))

    return (
        f"pool {kind} x{(n, c, h, w)} k{(kh, kw)} s{(sh, sw)} p{pads} cip{cip}",
        [(n, c, h, w)],
        lambda X, kind=kind, cip=cip: topi.nn.pool(X, (kh, kw), (sh, sw), pads, kind, cip),
        tpool,
        None,
    )


if __name__ == "__main__":
    seed, count, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    r = random.Random(seed)
    done = 0
    while done < count:
        c = case(r)
        if c is None:
            continue
        done += 1
        sweep(
            [c],
            [
                dict(
                    dtype=r.choice(["float32", "float64"]),
                    threads=r.choice([1, 2]),
                    target=r.choice(["llvm", "llvm -mcpu=haswell"]),
                    seed=r.randrange(1000),
                )
            ],
            log,
        )
