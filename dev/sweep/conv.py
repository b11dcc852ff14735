"""Random convolution shapes: python dev/sweep/conv.py SEED COUNT LOG"""

import random
import sys

import torch
from harness import configs, sweep

from tensorad import topi

F = torch.nn.functional
FORCE = False
WINO = False

CH = [1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 48, 49, 63, 65, 130]
IMG = [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 14, 15, 16, 17, 23]


def conv_case(r):
    n = r.choice([1, 1, 2, 3, 5])
    g = r.choice([1, 1, 1, 2, 3, "dw"])
    c = r.choice(CH)
    o = r.choice(CH)
    if g == "dw":
        g, o = c, c * r.choice([1, 1, 2])
    elif c % g or o % g:
        g = 1
    kh = 3 if WINO else r.choice([1, 1, 2, 3, 3, 3, 5, 7])
    kw = kh if WINO or r.random() < 0.8 else r.choice([1, 2, 3, 5])
    s = r.choice([1, 1, 1, 2, 2, 3])
    s = (s, s) if r.random() < 0.85 else (s, r.choice([1, 2, 3]))
    p = r.choice([0, 0, 1, 1, 2])
    p = (p, p) if r.random() < 0.85 else (p, r.choice([0, 1, 2]))
    d = r.choice([1, 1, 1, 1, 2, 3])
    d = (d, d)
    h = r.choice(IMG)
    w = h if r.random() < 0.7 else r.choice(IMG)
    # output size must be >= 1
    oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    if oh < 1 or ow < 1:
        return None
    if n * o * oh * ow * (c // g) * kh * kw > 3e6:
        return None
    name = f"conv x{(n, c, h, w)} w{(o, c // g, kh, kw)} s{s} p{p} d{d} g{g}"
    return (
        name,
        [(n, c, h, w), (o, c // g, kh, kw)],
        lambda X, W, s=s, p=p, d=d, g=g: topi.nn.conv2d(X, W, s, p, d, groups=g),
        lambda x, ww, s=s, p=p, d=d, g=g: F.conv2d(x, ww, stride=s, padding=p, dilation=d, groups=g),
        None,
    )


def convt_case(r):
    n = r.choice([1, 2, 3])
    c = r.choice(CH[:18])
    o = r.choice(CH[:18])
    k = 3 if WINO else r.choice([1, 2, 3, 4, 5])
    s = r.choice([1, 2, 3])
    p = r.choice([0, 1, 2])
    d = r.choice([1, 1, 2])
    op = r.choice(range(max(s, d)))
    h = r.choice(IMG[:12])
    w = r.choice(IMG[:12])
    oh = (h - 1) * s - 2 * p + d * (k - 1) + op + 1
    ow = (w - 1) * s - 2 * p + d * (k - 1) + op + 1
    if oh < 1 or ow < 1 or p >= d * (k - 1) + 1:
        return None
    name = f"convT x{(n, c, h, w)} o{o} k{k} s{s} p{p} op{op} d{d}"
    return (
        name,
        [(n, c, h, w), (c, o, k, k)],
        lambda X, W, s=s, p=p, op=op, d=d: topi.nn.conv2d_transpose(X, W, s, p, op, d),
        lambda x, ww, s=s, p=p, op=op, d=d: F.conv_transpose2d(
            x, ww, stride=s, padding=p, output_padding=op, dilation=d
        ),
        None,
    )



if __name__ == "__main__":
    seed, count, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    kind = sys.argv[4] if len(sys.argv) > 4 else "conv"
    r = random.Random(seed)
    FORCE = "force" in sys.argv[5:]
    WINO = "wino" in sys.argv[5:]
    done = 0
    while done < count:
        c = (conv_case if kind == "conv" else convt_case)(r)
        if c is None:
            continue
        done += 1
        sweep([c], configs(r, FORCE, WINO), log)
