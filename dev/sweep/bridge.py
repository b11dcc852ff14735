"""@ta.torch.op over changing batch sizes (a family traced over a size variable), forward and backward
against PyTorch: python dev/sweep/bridge.py LOG"""

import sys
import traceback

import torch
from harness import relerr

import tensorad as ta
from tensorad import topi

F = torch.nn.functional
COUNTS = [1, 2, 7, 63, 64, 65, 255, 256, 257, 300, 3, 64, 1]


@ta.torch.op
def conv_block(X, W, B):
    return topi.nn.relu(topi.add(topi.nn.conv2d(X, W, 1, 1), topi.reshape(B, (1, B.shape[0], 1, 1))))


@ta.torch.op
def mlp(X, W1, W2):
    return topi.nn.dense(topi.nn.gelu(topi.nn.dense(X, W1)), W2)


@ta.torch.op
def ln_softmax(X, G, B):
    return topi.nn.softmax(topi.nn.layer_norm(X, G, B))


@ta.torch.op(num_threads=2)
def pool_bn(X, G, B):
    return topi.nn.pool(topi.nn.batch_norm(X, G, B), 2, 2, 0, "max")


@ta.torch.op
def ce_loss(X, W, L):
    return topi.nn.cross_entropy(topi.nn.dense(X, W), L, "mean")


CASES = [
    (
        "conv_block",
        conv_block,
        lambda x, w, b: F.relu(F.conv2d(x, w, b, padding=1)),
        lambda n: [(n, 3, 5, 5), (4, 3, 3, 3), (4,)],
        None,
    ),
    (
        "mlp",
        mlp,
        lambda x, w1, w2: F.linear(F.gelu(F.linear(x, w1)), w2),
        lambda n: [(n, 7), (9, 7), (3, 9)],
        None,
    ),
    (
        "ln_softmax",
        ln_softmax,
        lambda x, g, b: torch.softmax(F.layer_norm(x, (6,), g, b), -1),
        lambda n: [(n, 6), (6,), (6,)],
        None,
    ),
    (
        "pool_bn",
        pool_bn,
        lambda x, g, b: F.max_pool2d(F.batch_norm(x, None, None, g, b, training=True), 2, 2),
        lambda n: [(n, 2, 4, 4), (2,), (2,)],
        None,
    ),
    (
        "ce_loss",
        ce_loss,
        lambda x, w, lab: F.cross_entropy(F.linear(x, w), lab.long()),
        lambda n: [(n, 5), (4, 5)],
        4,
    ),
]


def run(name, op, ref_fn, shapes, labels, dtype, log):
    bad = []
    for n in COUNTS:
        if name == "pool_bn" and n == 1:
            continue  # (batch norm over one value per channel: PyTorch refuses)
        g = torch.Generator().manual_seed(n)
        xs = [torch.rand(s, generator=g, dtype=dtype) * 2 - 1 for s in shapes(n)]
        args = [x.clone().requires_grad_(True) for x in xs]
        refs = [x.double().requires_grad_(True) for x in xs]
        extra, rextra = [], []
        if labels:
            lab = torch.randint(0, labels, (n,), generator=g, dtype=torch.int32)
            extra, rextra = [lab], [lab]
        try:
            y = op(*args, *extra)
            r = ref_fn(*refs, *rextra)
            h = torch.rand(r.shape, generator=g, dtype=dtype)
            y.backward(h)
            r.backward(h.double())
            errs = [relerr(y.detach().numpy(), r.detach().numpy())]
            errs += [relerr(a.grad.numpy(), b.grad.numpy()) for a, b in zip(args, refs)]
            tl = 2e-4 if dtype == torch.float32 else 1e-9
            if max(errs) > tl:
                bad.append((n, [f"{e:.2g}" for e in errs]))
        except Exception as ex:  # noqa: BLE001
            traceback.print_exc()
            bad.append((n, f"{type(ex).__name__}: {str(ex)[:200]}"))
    line = f"{'FAIL' if bad else 'ok'} {name} {dtype} {bad}"
    print(line, flush=True)
    with open(log, "a") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    for dtype in (torch.float32, torch.float64):
        for case in CASES:
            run(*case, dtype, sys.argv[1])
