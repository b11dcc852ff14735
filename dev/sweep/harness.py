"""Sweep harness: a layer built forward+backward in one kernel, inputs and outputs inside
canary-guarded buffers, compared with PyTorch float64."""

from __future__ import annotations

import os
import sys
import time
import traceback

import numpy as np
import torch

import tensorad as ta

CANARY = 64  # elements of guard on each side


def guarded(shape, dtype, fill, rng=None, values=None):
    """A C-contiguous array of ``shape`` inside a buffer whose margins hold ``fill``."""
    n = int(np.prod(shape, dtype=np.int64))
    buf = np.full(n + 2 * CANARY, fill, dtype=dtype)
    view = buf[CANARY : CANARY + n].reshape(shape)
    if values is not None:
        view[...] = values
    return buf, view


def canary_ok(buf, fill):
    a, b = buf[:CANARY], buf[-CANARY:]
    if np.isnan(fill):
        return bool(np.isnan(a).all() and np.isnan(b).all())
    return bool((a == fill).all() and (b == fill).all())


def tol(dtype):
    return 2e-4 if dtype == "float32" else 1e-9


def relerr(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return float("inf")
    if got.size == 0:
        return 0.0
    if not np.isfinite(got).all() and np.isfinite(want).all():
        return float("inf")
    scale = max(float(np.max(np.abs(want))), 1e-6)
    return float(np.max(np.abs(got - want))) / scale


def run_case(
    name,
    shapes,
    ta_fn,
    torch_fn,
    ints=None,
    dtype="float32",
    threads=1,
    target="llvm",
    seed=0,
    grad=True,
    fill_out=np.nan,
    build_opts=None,
):
    """Returns (status, detail)."""
    ints = ints or {}
    rng = np.random.default_rng(seed)
    floats = [rng.uniform(-1, 1, s) for s in shapes]
    args = list(floats)
    for pos in sorted(ints):
        shape, lo, hi = ints[pos]
        args.insert(pos, rng.integers(lo, hi, size=shape).astype(np.int32))
    phs = [
        ta.placeholder(a.shape, "int32" if a.dtype == np.int32 else dtype, f"in{k}")
        for k, a in enumerate(args)
    ]
    fphs = [p for p in phs if p.dtype != "int32"]
    y = ta_fn(*phs)
    outs = [y]
    ins = list(phs)
    if grad:
        H = ta.placeholder(y.shape, dtype, "H")
        outs += list(ta.gradient(y, fphs, H))
        ins.append(H)
    k = ta.build(outs, ins, target=target, num_threads=threads, **(build_opts or {}))
    npdt = np.float32 if dtype == "float32" else np.float64
    # inputs in guarded buffers (values rounded to dtype), canary 7.25
    bufs, views = [], []
    for a in args:
        if a.dtype == np.int32:
            b, v = guarded(a.shape, np.int32, 7, values=a)
        else:
            b, v = guarded(a.shape, npdt, 7.25, values=a.astype(npdt))
        bufs.append(b)
        views.append(v)
    head = rng.uniform(-1, 1, y.shape).astype(npdt) if grad else None
    if grad:
        hb, hv = guarded(head.shape, npdt, 7.25, values=head)
        bufs.append(hb)
        views.append(hv)
    obufs, oviews = [], []
    for t in outs:
        b, v = guarded(tuple(int(s) for s in t.shape), npdt, fill_out)
        obufs.append(b)
        oviews.append(v)
    k(*views, out=tuple(oviews))
    errs = []
    for b, a in zip(bufs, views):
        fill = 7 if a.dtype == np.int32 else 7.25
        if not canary_ok(b, fill):
            errs.append("input canary")
    for b in obufs:
        if not canary_ok(b, fill_out):
            errs.append("output canary")
    # inputs unchanged
    for a, v in zip(args, views):
        if not np.array_equal(a.astype(v.dtype), v):
            errs.append("input modified")
    # reference in float64 on the rounded values
    ts = [
        torch.tensor(v.astype(np.float64) if v.dtype != np.int32 else v, requires_grad=v.dtype != np.int32)
        for v in views[: len(args)]
    ]
    ref = torch_fn(*ts)
    # PyTorch at the case's dtype: its error against float64 measures the problem's conditioning
    ts_same = [torch.tensor(v, requires_grad=v.dtype != np.int32) for v in views[: len(args)]]
    same = torch_fn(*ts_same)
    allow = max(tol(dtype), 10 * relerr(same.detach().numpy(), ref.detach().numpy()))
    e = relerr(oviews[0], ref.detach().numpy())
    if e > allow:
        errs.append(f"forward {e:.3g} (torch {allow / 10:.3g})")
    if grad:
        floats_t = [t for t in ts if t.requires_grad]
        refs = torch.autograd.grad(ref, floats_t, torch.tensor(head.astype(np.float64)), allow_unused=True)
        sames = torch.autograd.grad(
            same, [t for t in ts_same if t.requires_grad], torch.tensor(head), allow_unused=True
        )
        for j, (g, r, q) in enumerate(zip(oviews[1:], refs, sames)):
            r = np.zeros(g.shape) if r is None else r.numpy()
            q = np.zeros(g.shape) if q is None else q.numpy()
            allow = max(tol(dtype), 10 * relerr(q, r))
            e = relerr(g, r)
            if e > allow:
                errs.append(f"grad{j} {e:.3g} (torch {allow / 10:.3g})")
    return ("ok", "") if not errs else ("FAIL", "; ".join(errs))


def sweep(cases, configs, log):
    """cases: (name, shapes, ta_fn, torch_fn, ints); configs: dicts of run_case options."""
    n = bad = 0
    with open(log, "a") as f:
        for case in cases:
            for cfg in configs:
                n += 1
                t0 = time.time()
                try:
                    st, det = run_case(*case, **cfg)
                except Exception as ex:  # noqa: BLE001
                    st, det = "ERROR", f"{type(ex).__name__}: {str(ex)[:300]}"
                    if os.environ.get("SWEEP_TB"):
                        traceback.print_exc()
                if st != "ok":
                    bad += 1
                line = f"{st} {case[0]} {cfg} {det} [{time.time() - t0:.1f}s]"
                print(line, flush=True)
                f.write(line + "\n")
                f.flush()
    print(f"{n} cases, {bad} bad", file=sys.stderr)
    return n, bad


def configs(r, force=False, wino=False):
    """One random build configuration: dtype, threads, target, seed and (forced) options."""
    opts = {}
    if force:
        if r.random() < 0.5:
            opts["microkernel"] = True
        if r.random() < 0.3:
            mr = r.choice([1, 2, 3, 4, 5, 6, 8])
            opts["tile"] = (
                mr,
                r.choice([None, 16, 32, 48]),
                r.choice([None, 1, 3, 17, 64]),
                r.choice([None, mr, 5 * mr]),
            )
        if r.random() < 0.5:
            opts["parallel_min_work"] = 0
        if wino and r.random() < 0.7:
            opts["winograd"] = r.choice([2, 4])
    return [
        dict(
            dtype=r.choice(["float32", "float32", "float64"]),
            threads=r.choice([1, 2]),
            target=r.choice(["llvm", "llvm", "llvm -mcpu=haswell"]),
            seed=r.randrange(1000),
            build_opts=opts,
        )
    ]
