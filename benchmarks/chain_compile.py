"""``python -m benchmarks.chain_compile [--n 1000,10000] [--opt-level L]``: how long a long
elementwise chain and its gradient take to prepare, per stage ("a 10,000-op chain and
its gradient build in seconds").

The chain alternates ``tanh(P) * 0.9`` and ``sigmoid(P) + P / 2`` over 16 float64 elements:
every step is expensive and read twice by the gradient, so each is materialized and the
gradient has about one loop nest per step.  Stages, in CPU seconds of this process (the
machine may be shared; the load is printed beside them): ``define``, ``differentiate``
(``ta.gradient`` with the optimizer), ``lower`` and ``build`` (lowering again, LLVM and the
JIT, with the disk cache off) of the forward and of the gradient.  Timing lives here, never in
the tests.
"""

from __future__ import annotations

import argparse
import json
import os

from .machine import load_snapshot


def chain(ta, n: int):
    X = ta.placeholder((16,), "float64", name="X")
    Y = X
    for k in range(n):
        if k % 2:
            Y = (lambda P: ta.compute((16,), lambda i: ta.tanh(P[i]) * 0.9, name=f"t{k}"))(Y)
        else:
            Y = (lambda P: ta.compute((16,), lambda i: ta.sigmoid(P[i]) + P[i] * 0.5, name=f"s{k}"))(Y)
    return X, ta.compute((), lambda: Y[0] + Y[9], name="L")


def stages(n: int, opts: dict) -> dict:
    os.environ["TENSORAD_NO_DISK_CACHE"] = "1"
    import tensorad as ta

    t: dict = {}

    from tensorad.codegen.jit.isolate import cpu_seconds  # (LLVM's children included)

    def timed(name, fn):
        c0 = cpu_seconds()
        out = fn()
        t[name] = round(cpu_seconds() - c0, 3)
        return out

    X, L = timed("define", lambda: chain(ta, n))
    (g,) = timed("differentiate", lambda: ta.gradient(L, [X]))
    low = timed("lower_fwd", lambda: ta.lower([L], [X], **opts))
    timed("build_fwd", lambda: ta.build([L], [X], **opts))
    lowg = timed("lower_bwd", lambda: ta.lower([g], [X], **opts))
    timed("build_bwd", lambda: ta.build([g], [X], **opts))
    t["nests_fwd"], t["nests_bwd"] = low.text.count("# nest"), lowg.text.count("# nest")
    return t


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.chain_compile", description=__doc__)
    ap.add_argument("--n", default="1000", help="comma-separated chain lengths")
    ap.add_argument("--opt-level", type=int, default=None)
    args = ap.parse_args(argv)
    opts = {} if args.opt_level is None else {"opt_level": args.opt_level}
    for n in (int(x) for x in args.n.split(",")):
        before = load_snapshot()
        t = stages(n, opts)
        print(json.dumps({"n": n, "options": opts, "cpu_seconds": t, "load_before": before["loadavg"],
                          "load_after": load_snapshot()["loadavg"]}), flush=True)


if __name__ == "__main__":
    main()
