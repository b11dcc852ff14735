"""Audit probe: every ``ta.topi`` layer at odd shapes against PyTorch float64 autograd.

For each case a layer is written as a user would (placeholders, ``ta.topi``), built as a
``ta.function`` in float64, and compared with the same layer in PyTorch: the forward, the
backward for a random head (every float input), and the forward-mode ``ta.jvp`` against
``torch.func.jvp``.  Oracles are PyTorch's, never tensorad's.  Usage::

    python tools/audit_probe.py [--jvp | --half float16|bfloat16] [SUBSTRING ...]

prints one line per case (``ok`` or what differed) and a count.  Not a test: the suite's
regression tests hold what this found (docs/audit.md).
"""

from __future__ import annotations

import argparse
import sys
import traceback

import numpy as np
import torch

import tensorad as ta
from tensorad import topi

F = torch.nn.functional
RTOL, ATOL = 1e-9, 1e-10


def _case(name, shapes, ta_fn, torch_fn, ints=None):
    """``shapes``: one shape per float input; ``ints``: ``{position: (shape, low, high)}``
    for integer inputs (inserted at ``position``, not differentiated)."""
    return name, shapes, ta_fn, torch_fn, ints or {}


def cases():
    """The probe's cases: (name, float shapes, tensorad layer, torch layer, int inputs)."""
    out = []
    for (n, c, h, w), (f, kh, kw), s, p, d, g in [
        ((1, 3, 7, 7), (6, 3, 3), 2, 1, 1, 3),
        ((2, 1, 13, 5), (3, 2, 3), (3, 1), (1, 0), (2, 1), 1),
        ((1, 4, 3, 3), (4, 1, 1), 1, 0, 1, 4),
        ((3, 2, 7, 13), (4, 3, 3), 1, 2, 3, 2),
        ((1, 1, 1, 1), (1, 1, 1), 1, 0, 1, 1),
        ((2, 3, 5, 5), (3, 5, 5), 2, 2, 1, 1),
    ]:
        out.append(
            _case(
                f"conv2d x{(n, c, h, w)} k{(f, kh, kw)} s{s} p{p} d{d} g{g}",
                [(n, c, h, w), (f, c // g, kh, kw)],
                lambda X, W, s=s, p=p, d=d, g=g: topi.nn.conv2d(X, W, s, p, d, groups=g),
                lambda x, ww, s=s, p=p, d=d, g=g: F.conv2d(x, ww, stride=s, padding=p, dilation=d, groups=g),
            )
        )
    for (n, c, h, w), (o, kh, kw), s, p, op, d in [
        ((1, 3, 3, 3), (2, 3, 3), 2, 1, 1, 1),
        ((2, 2, 5, 1), (3, 2, 1), (2, 1), (0, 0), (1, 0), (2, 1)),
        ((1, 1, 7, 7), (1, 3, 3), 3, 1, 2, 1),
    ]:
        out.append(
            _case(
                f"conv2d_transpose x{(n, c, h, w)} o{o} k{kh}x{kw} s{s} p{p} op{op} d{d}",
                [(n, c, h, w), (c, o, kh, kw)],
                lambda X, W, s=s, p=p, op=op, d=d: topi.nn.conv2d_transpose(X, W, s, p, op, d),
                lambda x, ww, s=s, p=p, op=op, d=d: F.conv_transpose2d(
                    x, ww, stride=s, padding=p, output_padding=op, dilation=d
                ),
            )
        )
    for shape, k, s, p, kind, cip in [
        ((1, 2, 7, 7), 3, 2, 1, "max", True),
        ((2, 1, 13, 3), (3, 2), (2, 1), (1, 0), "avg", True),
        ((1, 3, 7, 7), 3, 2, 1, "avg", False),
        ((1, 1, 1, 1), 1, 1, 0, "max", True),
        ((1, 1, 5, 5), 2, 3, 0, "max", True),
    ]:
        pp = (p, p) if isinstance(p, int) else p

        def tpool(x, k=k, s=s, pp=pp, kind=kind, cip=cip):
            if kind == "max":
                return F.max_pool2d(x, k, s, pp)
            return F.avg_pool2d(x, k, s, pp, count_include_pad=cip)

        out.append(
            _case(
                f"pool {kind} x{shape} k{k} s{s} p{p} cip{cip}",
                [shape],
                lambda X, k=k, s=s, p=p, kind=kind, cip=cip: topi.nn.pool(X, k, s, p, kind, cip),
                tpool,
            )
        )
    for shape in [(1, 1), (3, 7), (2, 3, 13)]:
        out += [
            _case(f"softmax {shape}", [shape], lambda X: topi.nn.softmax(X), lambda x: torch.softmax(x, -1)),
            _case(
                f"softmax axis0 {shape}",
                [shape],
                lambda X: topi.nn.softmax(X, 0),
                lambda x: torch.softmax(x, 0),
            ),
            _case(
                f"log_softmax {shape}",
                [shape],
                lambda X: topi.nn.log_softmax(X),
                lambda x: F.log_softmax(x, -1),
            ),
            _case(f"gelu {shape}", [shape], lambda X: topi.nn.gelu(X), F.gelu),
            _case(
                f"gelu tanh {shape}",
                [shape],
                lambda X: topi.nn.gelu(X, "tanh"),
                lambda x: F.gelu(x, approximate="tanh"),
            ),
            _case(f"silu {shape}", [shape], topi.nn.silu, F.silu),
            _case(f"relu {shape}", [shape], topi.nn.relu, F.relu),
            _case(
                f"layer_norm {shape}",
                [shape, shape[-1:], shape[-1:]],
                lambda X, G, B: topi.nn.layer_norm(X, G, B),
                lambda x, g, b: F.layer_norm(x, x.shape[-1:], g, b),
            ),
            _case(
                f"rms_norm {shape}",
                [shape, shape[-1:]],
                lambda X, G: topi.nn.rms_norm(X, G, eps=1e-6),
                lambda x, g: F.rms_norm(x, x.shape[-1:], g, eps=1e-6),
            ),
            _case(
                f"sum/max/min/prod {shape}",
                [shape],
                lambda X: topi.add(topi.add(topi.sum(X, -1), topi.sum(topi.max(X, -1))), topi.prod(X, -1)),
                lambda x: x.sum(-1) + x.max(-1).values.sum() + x.prod(-1),
            ),
            _case(
                f"mean/var {shape}",
                [shape],
                lambda X, shape=shape: topi.add(
                    topi.mean(X, -1), topi.var(X, -1, ddof=1 if shape[-1] > 1 else 0)
                ),
                lambda x, shape=shape: x.mean(-1) + x.var(-1, correction=1 if shape[-1] > 1 else 0),
            ),
        ]
    for shape, groups in [((2, 6, 3, 1), 3), ((1, 3, 7), 1), ((3, 4, 1, 5), 2)]:
        c = shape[1]
        out.append(
            _case(
                f"group_norm {shape} g{groups}",
                [shape, (c,), (c,)],
                lambda X, G, B, groups=groups: topi.nn.group_norm(X, groups, G, B),
                lambda x, g, b, groups=groups: F.group_norm(x, groups, g, b),
            )
        )
        out.append(
            _case(
                f"batch_norm {shape}",
                [shape, (c,), (c,)],
                lambda X, G, B: topi.nn.batch_norm(X, G, B),
                lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True),
            )
        )
        if len(shape) > 2 and np.prod(shape[2:]) > 1:
            out.append(
                _case(
                    f"instance_norm {shape}",
                    [shape, (c,), (c,)],
                    lambda X, G, B: topi.nn.instance_norm(X, G, B),
                    lambda x, g, b: F.instance_norm(x, weight=g, bias=b),
                )
            )
    for shape, sf, method, ac in [
        ((1, 2, 3, 3), 2, "nearest", False),
        ((1, 1, 3, 5), (3, 2), "bilinear", False),
        ((2, 1, 1, 7), 2, "bilinear", True),
        ((1, 1, 4, 1), (1, 3), "bilinear", False),
    ]:

        def tup(x, sf=sf, method=method, ac=ac):
            kw = {} if method == "nearest" else {"align_corners": ac}
            return F.interpolate(x, scale_factor=sf, mode=method, **kw)

        out.append(
            _case(
                f"upsampling {shape} {sf} {method} ac{ac}",
                [shape],
                lambda X, sf=sf, method=method, ac=ac: topi.nn.upsampling(X, sf, method, ac),
                tup,
            )
        )
    for b, lq, s, dd, dv, causal in [
        ((1,), 1, 1, 1, 1, False),
        ((2,), 3, 7, 5, 2, True),
        ((1, 2), 7, 3, 4, 3, True),
        ((2,), 5, 5, 3, 3, True),
    ]:
        out.append(
            _case(
                f"attention b{b} L{lq} S{s} D{dd} Dv{dv} causal{causal}",
                [b + (lq, dd), b + (s, dd), b + (s, dv)],
                lambda Q, K, V, causal=causal: topi.nn.scaled_dot_product_attention(Q, K, V, causal),
                lambda q, k, v, causal=causal, lq=lq, s=s: F.scaled_dot_product_attention(
                    q, k, v, attn_mask=torch.ones(lq, s, dtype=torch.bool).tril() if causal else None
                ),
            )
        )
    for n, c, red, ls in [(1, 1, "mean", 0.0), (3, 7, "sum", 0.0), (5, 3, "none", 0.1), (4, 13, "mean", 0.2)]:
        out.append(
            _case(
                f"cross_entropy {n}x{c} {red} ls{ls}",
                [(n, c)],
                lambda X, L, red=red, ls=ls: topi.nn.cross_entropy(X, L, red, label_smoothing=ls),
                lambda x, lab, red=red, ls=ls: F.cross_entropy(
                    x, lab.long(), reduction=red, label_smoothing=ls
                ),
                ints={1: ((n,), 0, c)},
            )
        )
    out.append(
        _case(
            "cross_entropy ignore_index",
            [(5, 4)],
            lambda X, L: topi.nn.cross_entropy(X, L, "mean", ignore_index=2),
            lambda x, lab: F.cross_entropy(x, lab.long(), ignore_index=2),
            ints={1: ((5,), 0, 4)},
        )
    )
    out.append(
        _case(
            "nll_loss",
            [(5, 4)],
            lambda X, L: topi.nn.nll_loss(X, L, "sum"),
            lambda x, lab: F.nll_loss(x, lab.long(), reduction="sum"),
            ints={1: ((5,), 0, 4)},
        )
    )
    for v, dim, idx in [(7, 3, (5,)), (1, 1, (3, 2)), (13, 2, (2, 3))]:
        out.append(
            _case(
                f"embedding {v}x{dim} idx{idx}",
                [(v, dim)],
                lambda W, Ix: topi.embedding(W, Ix),
                lambda ww, i: F.embedding(i.long(), ww),
                ints={1: (idx, 0, v)},
            )
        )
    for mode in ("sum", "mean"):
        out.append(
            _case(
                f"embedding_bag {mode}",
                [(7, 3)],
                lambda W, Ix, mode=mode: topi.embedding_bag(W, Ix, mode),
                lambda ww, i, mode=mode: F.embedding_bag(i.long(), ww, mode=mode),
                ints={1: ((4, 3), 0, 7)},
            )
        )
    out.append(
        _case(
            "take flat",
            [(3, 5)],
            lambda X, Ix: topi.take(X, Ix),
            lambda x, i: x.flatten()[i.long()],
            ints={1: ((7,), 0, 15)},
        )
    )
    out.append(
        _case(
            "index_select axis1",
            [(3, 5)],
            lambda X, Ix: topi.index_select(X, Ix, 1),
            lambda x, i: x.index_select(1, i.long()),
            ints={1: ((6,), 0, 5)},
        )
    )
    for a, b in [
        ((1, 1), (1, 1)),
        ((3, 7), (7, 13)),
        ((2, 1, 3, 5), (4, 5, 2)),
        ((7,), (7, 3)),
        ((3, 4), (4,)),
    ]:
        out.append(_case(f"matmul {a}@{b}", [a, b], topi.matmul, torch.matmul))
    out.append(_case("dense bias", [(3, 7), (5, 7), (5,)], topi.nn.dense, F.linear))
    out.append(
        _case(
            "broadcast ops",
            [(3, 1, 5), (7, 1), (5,)],
            lambda A, B, C: topi.divide(topi.subtract(topi.multiply(A, B), C), topi.add(topi.exp(C), 1.0)),
            lambda a, b, c: (a * b - c) / (c.exp() + 1),
        )
    )
    out.append(
        _case(
            "power/max/min",
            [(3, 5), (3, 5)],
            lambda A, B: topi.add(topi.power(topi.abs(A), B), topi.maximum(A, topi.minimum(B, 0.2))),
            lambda a, b: a.abs() ** b + torch.maximum(a, torch.clamp(b, max=0.2)),
        )
    )
    out.append(
        _case(
            "math chain",
            [(4, 3)],
            lambda A: topi.add(
                topi.add(topi.sqrt(topi.add(topi.abs(A), 0.5)), topi.log(topi.add(topi.abs(A), 1.0))),
                topi.add(topi.tanh(A), topi.add(topi.sigmoid(A), topi.add(topi.erf(A), topi.sin(A)))),
            ),
            lambda a: (
                (a.abs() + 0.5).sqrt() + (a.abs() + 1).log() + a.tanh() + a.sigmoid() + torch.erf(a) + a.sin()
            ),
        )
    )
    out.append(
        _case(
            "transforms",
            [(2, 3, 4), (2, 3, 1)],
            lambda A, B: topi.reshape(topi.transpose(topi.concatenate([A, B], 2), (2, 0, 1)), (5, 6)),
            lambda a, b: torch.cat([a, b], 2).permute(2, 0, 1).reshape(5, 6),
        )
    )
    out.append(
        _case(
            "split/squeeze/expand",
            [(6, 1, 3)],
            lambda A: topi.multiply(topi.expand_dims(topi.squeeze(topi.split(A, [2, 5], 0)[1], 1), 0), 2.0),
            lambda a: (a[2:5].squeeze(1) * 2).unsqueeze(0),
        )
    )
    out.append(
        _case(
            "pad",
            [(2, 3)],
            lambda A: topi.nn.pad(A, (1, 0), (2, 3), 0.5),
            lambda a: F.pad(a, (0, 3, 1, 2), value=0.5),
        )
    )
    out.append(_case("flatten", [(2, 3, 1, 2)], topi.nn.flatten, lambda a: a.flatten(1)))
    return out


def _arrays(shapes, ints, rng):
    floats = [rng.uniform(-1, 1, s) for s in shapes]
    args = list(floats)
    for pos in sorted(ints):
        shape, lo, hi = ints[pos]
        args.insert(pos, rng.integers(lo, hi, size=shape).astype(np.int32))
    return args


def run_case(case, jvp: bool, rng) -> str:
    name, shapes, ta_fn, torch_fn, ints = case
    args = _arrays(shapes, ints, rng)
    phs = [
        ta.placeholder(a.shape, "int32" if a.dtype == np.int32 else "float64", f"in{k}")
        for k, a in enumerate(args)
    ]
    y = ta_fn(*phs)
    f = ta.function(y, phs)
    ts = [torch.tensor(a, requires_grad=a.dtype != np.int32) for a in args]
    ref = torch_fn(*ts)
    got, res = f.forward(*args)
    errs = []
    want = ref.detach().numpy()
    if got.shape != want.shape:
        errs.append(f"forward shape {got.shape}, torch {want.shape}")
    elif not np.allclose(got, want, RTOL, ATOL):
        errs.append(f"forward {np.max(np.abs(got - want))}")
    head = rng.uniform(-1, 1, got.shape)
    grads = f.backward(res, head)
    floats = [t for t in ts if t.requires_grad]
    refs = torch.autograd.grad(ref, floats, torch.tensor(head), allow_unused=True)
    for k, (g, r) in enumerate(zip(grads, refs)):
        r = np.zeros(g.shape) if r is None else r.numpy()
        if not np.allclose(g, r, RTOL, ATOL):
            errs.append(f"grad {k} {np.max(np.abs(g - r))}")
    if jvp:
        fphs = [p for p in phs if p.dtype == "float64"]
        tangents = [ta.placeholder(p.shape, "float64", p.name + ".t") for p in fphs]
        tv = [rng.uniform(-1, 1, p.shape) for p in fphs]
        k = ta.build([ta.jvp(y, fphs, tangents)], phs + tangents)
        got_t = k(*args, *tv)

        def fn(*fl):
            it = iter(fl)
            return torch_fn(*[next(it) if t.requires_grad else t for t in ts])

        primals, dirs = tuple(t.detach() for t in floats), tuple(torch.tensor(v) for v in tv)
        try:
            _, ref_t = torch.func.jvp(fn, primals, dirs)
        except NotImplementedError:  # no forward AD in torch: float64 central differences
            h = 1e-6
            ref_t = (
                fn(*[p + h * d for p, d in zip(primals, dirs)])
                - fn(*[p - h * d for p, d in zip(primals, dirs)])
            ).detach() / (2 * h)
        if not np.allclose(got_t, ref_t.numpy(), RTOL, ATOL):
            errs.append(f"jvp {np.max(np.abs(got_t - ref_t.numpy()))}")
    return "ok" if not errs else "; ".join(errs)


def run_half(case, dtype: str, rng) -> str:
    """The layer on ``dtype`` storage against PyTorch in float32 on the same rounded inputs:
    the forward to a few units of the storage type's rounding, relative to the output's scale;
    the gradient of ``sum(Y * head)`` more loosely (intermediates are stored rounded)."""
    name, shapes, ta_fn, torch_fn, ints = case
    tdt = getattr(torch, dtype)
    args = _arrays(shapes, ints, rng)
    args = [a if a.dtype == np.int32 else torch.tensor(a).to(tdt) for a in args]
    phs = [
        ta.placeholder(tuple(a.shape), "int32" if isinstance(a, np.ndarray) else dtype, f"in{k}")
        for k, a in enumerate(args)
    ]
    f = ta.torch.function(ta_fn(*phs), phs)
    ts = [torch.tensor(a) if isinstance(a, np.ndarray) else a.detach().requires_grad_(True) for a in args]
    got = f(*ts)
    wide = [t if not t.is_floating_point() else t.detach().float().requires_grad_(True) for t in ts]
    ref = torch_fn(*wide)
    tol = (8e-3 if dtype == "float16" else 6e-2) * max(1.0, ref.abs().max().item())
    errs = []
    if got.shape != ref.shape or (got.float() - ref).abs().max().item() > tol:
        errs.append(
            f"forward {(got.float() - ref).abs().max().item() if got.shape == ref.shape else got.shape}"
        )
    head = torch.tensor(rng.uniform(-1, 1, tuple(ref.shape)), dtype=torch.float32)
    floats = [(t, w) for t, w in zip(ts, wide) if t.is_floating_point()]
    mine = torch.autograd.grad(got, [t for t, _ in floats], head.to(tdt), allow_unused=True)
    theirs = torch.autograd.grad(ref, [w for _, w in floats], head, allow_unused=True)
    for k, (g, r) in enumerate(zip(mine, theirs)):
        r = torch.zeros_like(floats[k][1]) if r is None else r
        gtol = 4 * (8e-3 if dtype == "float16" else 6e-2) * max(1.0, r.abs().max().item())
        if g is None or g.dtype != tdt or (g.float() - r).abs().max().item() > gtol:
            errs.append(f"grad {k} {None if g is None else (g.dtype, (g.float() - r).abs().max().item())}")
    return "ok" if not errs else "; ".join(errs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jvp", action="store_true", help="also forward mode against torch.func.jvp")
    p.add_argument(
        "--half",
        choices=("float16", "bfloat16"),
        help="the layers on half storage, through ta.torch.function, against float32 PyTorch",
    )
    p.add_argument("names", nargs="*")
    a = p.parse_args(argv)
    rng = np.random.default_rng(0)
    passed = failed = 0
    for case in cases():
        if a.names and not any(s in case[0] for s in a.names):
            continue
        try:
            verdict = run_half(case, a.half, rng) if a.half else run_case(case, a.jvp, rng)
        except Exception as e:  # noqa: BLE001 -- a probe reports every failure and goes on
            verdict = f"EXC {type(e).__name__}: {str(e)[:300]}"
            if "-v" in sys.argv:
                traceback.print_exc()
        passed += verdict == "ok"
        failed += verdict != "ok"
        print(f"{case[0]}: {verdict}", flush=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
