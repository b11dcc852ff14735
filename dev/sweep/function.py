"""ta.function (forward keeping residuals, backward reading them) under each policy, and ta.jvp, on the
random cases of conv.py and layers.py: python dev/sweep/function.py SEED COUNT LOG"""

import random
import sys
import time
import traceback

import conv
import layers
import numpy as np
import torch
from harness import relerr, tol

import tensorad as ta


def check(case, dtype, policy, threads, target, seed, jvp):
    name, shapes, ta_fn, torch_fn, ints = case
    rng = np.random.default_rng(seed)
    npdt = np.float32 if dtype == "float32" else np.float64
    args = [rng.uniform(-1, 1, s).astype(npdt) for s in shapes]
    for pos in sorted(ints or {}):
        shape, lo, hi = ints[pos]
        args.insert(pos, rng.integers(lo, hi, size=shape).astype(np.int32))
    phs = [
        ta.placeholder(a.shape, "int32" if a.dtype == np.int32 else dtype, f"in{k}")
        for k, a in enumerate(args)
    ]
    y = ta_fn(*phs)
    f = ta.function(y, phs, policy=policy, num_threads=threads, target=target)
    got, res = f.forward(*args)
    ts = [
        torch.tensor(a.astype(np.float64) if a.dtype != np.int32 else a, requires_grad=a.dtype != np.int32)
        for a in args
    ]
    ref = torch_fn(*ts)
    errs = []
    e = relerr(got, ref.detach().numpy())
    if e > tol(dtype):
        errs.append(f"forward {e:.3g}")
    head = rng.uniform(-1, 1, got.shape).astype(npdt)
    grads = f.backward(res, head)
    grads = grads if isinstance(grads, tuple) else (grads,)
    refs = torch.autograd.grad(
        ref, [t for t in ts if t.requires_grad], torch.tensor(head.astype(np.float64)), allow_unused=True
    )
    for j, (g, r) in enumerate(zip(grads, refs)):
        r = np.zeros(g.shape) if r is None else r.numpy()
        e = relerr(g, r)
        if e > tol(dtype):
            errs.append(f"grad{j} {e:.3g}")
    # a second backward from the same residuals gives the same gradients
    again = f.backward(res, head)
    again = again if isinstance(again, tuple) else (again,)
    if not all(np.array_equal(a, b) for a, b in zip(grads, again)):
        errs.append("second backward differs")
    if jvp:
        fphs = [p for p in phs if p.dtype != "int32"]
        tangents = [ta.placeholder(p.shape, dtype, p.name + ".t") for p in fphs]
        tv = [rng.uniform(-1, 1, p.shape).astype(npdt) for p in fphs]
        k = ta.build([ta.jvp(y, fphs, tangents)], phs + tangents, num_threads=threads, target=target)
        got_t = k(*args, *tv)
        fl = [t for t in ts if t.requires_grad]

        def fn(*xs):
            it = iter(xs)
            return torch_fn(*[next(it) if t.requires_grad else t for t in ts])

        _, ref_t = torch.func.jvp(
            fn, tuple(t.detach() for t in fl), tuple(torch.tensor(v.astype(np.float64)) for v in tv)
        )
        e = relerr(got_t, ref_t.numpy())
        if e > tol(dtype):
            errs.append(f"jvp {e:.3g}")
    return errs


if __name__ == "__main__":
    seed, count, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    r = random.Random(seed)
    gens = [
        conv.conv_case,
        conv.convt_case,
        layers.matmul_case,
        layers.pool_case,
        layers.norm_case,
        layers.attn_case,
    ]
    done = 0
    while done < count:
        case = r.choice(gens)(r)
        if case is None:
            continue
        done += 1
        cfg = dict(
            dtype=r.choice(["float32", "float64"]),
            policy=r.choice(["default", "save_all", "recompute_all"]),
            threads=r.choice([1, 2]),
            target=r.choice(["llvm", "llvm -mcpu=haswell"]),
            seed=r.randrange(1000),
            jvp=r.random() < 0.3,
        )
        t0 = time.time()
        try:
            errs = check(case, **cfg)
            st = "FAIL" if errs else "ok"
        except Exception as ex:  # noqa: BLE001
            st, errs = "ERROR", [f"{type(ex).__name__}: {str(ex)[:300]}"]
            traceback.print_exc()
        line = f"{st} {case[0]} {cfg} {'; '.join(errs)} [{time.time() - t0:.1f}s]"
        print(line, flush=True)
        with open(log, "a") as fh:
            fh.write(line + "\n")
