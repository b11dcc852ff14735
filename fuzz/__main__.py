"""``python -m fuzz [--n N] [--start S | --seeds A,B] [--workers W] [--timeout T]
[--wall-timeout W] [--checks C] [--rotate] [--shrink K] [--out DIR] [--layers] [--forms20] [--forms21]
[--forms22] [--forms27] [--target T]``."""

from __future__ import annotations

import argparse
import sys
import time

from .checks import EVERY
from .layers import generate_layer
from .runner import fuzz


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__)
    ap.add_argument("--n", type=int, default=10000, help="number of programs")
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--seeds", default="", help="comma-separated seeds to run (instead of --start/--n)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0, help="CPU seconds per program")
    ap.add_argument("--wall-timeout", type=float, default=None,
                    help="wall-clock seconds per program (default: 4x --timeout)")
    ap.add_argument("--checks", default=",".join(EVERY), help=f"comma-separated subset of {','.join(EVERY)}")
    ap.add_argument("--rotate", action="store_true", help="one check per program, rotating over seeds")
    ap.add_argument("--shrink", type=int, default=40, help="shrinking trials per failure (0: none)")
    ap.add_argument("--out", default="fuzz-failures", help="folder for reproducer scripts")
    ap.add_argument("--layers", action="store_true",
                    help="ordinary layers at moderate shapes, checked against PyTorch (fuzz/layers.py)")
    ap.add_argument("--forms20", action="store_true",
                    help="the generator without the streams forms21 and later (older seeds' programs)")
    ap.add_argument("--forms21", action="store_true",
                    help="the generator without the streams forms22 and later (older seeds' programs)")
    ap.add_argument("--forms22", action="store_true",
                    help="the generator without the streams forms27 and later (older seeds' programs)")
    ap.add_argument("--forms27", action="store_true",
                    help="the generator without the stream forms49 (older seeds' programs)")
    ap.add_argument("--target", default=None,
                    help='every program built for this target ("llvm -mcpu=haswell": AVX2 on any x86 host)')
    args = ap.parse_args(argv)
    checks = tuple(c for c in args.checks.split(",") if c)
    unknown = set(checks) - set(EVERY)
    if unknown:
        ap.error(f"unknown checks {sorted(unknown)}")
    last = [time.monotonic()]
    seen: list = []

    def progress(rep):
        for f in rep.failures[len(seen):]:
            print(f"  FAIL seed {f.seed} {f.check} [{f.status}]: {f.message[:200]}",
                  file=sys.stderr, flush=True)
        seen[:] = rep.failures
        if time.monotonic() - last[0] > 30:
            last[0] = time.monotonic()
            print(f"  {rep.programs} programs, {len(rep.failures)} failures", file=sys.stderr, flush=True)

    seeds = [int(x) for x in args.seeds.split(",") if x] or range(args.start, args.start + args.n)
    rep = fuzz(seeds, workers=args.workers, timeout=args.timeout, wall_timeout=args.wall_timeout,
               checks=(lambda s: (checks[s % len(checks)],)) if args.rotate else checks,
               shrink=args.shrink, out_dir=args.out, progress=progress,
               generator=generate_layer if args.layers else None, forms21=not args.forms20,
               forms22=not (args.forms20 or args.forms21),
               forms27=not (args.forms20 or args.forms21 or args.forms22),
               forms49=not (args.forms20 or args.forms21 or args.forms22 or args.forms27), target=args.target)
    print(rep.summary())
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
