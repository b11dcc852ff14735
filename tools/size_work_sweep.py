"""The fuzzer's programs with one extent made a size variable ``n`` (the ``sizes`` check's), lowered
over ``n`` and bound at a few sizes against the program written at each size: one JSON line per seed
with its class, ``equal`` (the same work at every size), ``gap`` (work over ``n`` minus the static
program's, per size), ``refused`` (the symbolic program is not accepted: why), ``size-decision`` (its
gradient or lowering asks a decision made only at static sizes), ``no-extent``, ``error`` or
``timeout``.  Gradients are the reverse ones of a head, built for ``-mcpu=haswell``.

``PYTHONPATH=. python tools/size_work_sweep.py START END [--sizes 0,3,35] [--timeout S]``: seeds
``START..END-1``, at sizes ``e + k`` for the program's extent ``e``; each seed runs in a child process.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import traceback

TARGET = "llvm -mcpu=haswell"


def classify(seed: int, offsets: list[int]) -> dict:
    import tensorad as ta
    from fuzz.checks import Invalid, load
    from fuzz.program import generate
    from fuzz.runner import job_for
    from tensorad.ir.expr import SizeDecisionError

    prog = generate(seed)
    job = job_for(prog, seed, checks=("sizes",))
    if "sized" not in job:
        return {"seed": seed, "class": "no-extent"}
    e = job["sized"]["at"] - 3
    try:
        sym = load(job["sized"]["symbolic"])
    except Invalid as ex:
        return {"seed": seed, "class": "refused", "why": str(ex)[:300]}
    options = {k: v for k, v in job["options"].items() if k not in ("tune", "target")}

    def program(ns: dict) -> tuple[list, list]:
        outs, ins = [ns["OUT"]], list(ns["INPUTS"])
        if job["safe"] and ns["OUT"].dtype in ta.FLOAT_DTYPES:
            ins.append(head := ta.placeholder(ns["OUT"].shape, ns["OUT"].dtype, name="head"))
            floats = [p for p in ns["INPUTS"] if p.dtype in ta.FLOAT_DTYPES]
            outs += ta.JacobianRecursive(ns["OUT"], floats, head)
        return outs, ins

    gaps = {}
    try:
        outs, ins = program(sym)
        for n in (e + k for k in offsets):
            over_n = ta.lower(outs, ins, sizes={"n": n}, target=TARGET, **options).work
            static = ta.lower(*program(load(prog.render(size=(e, n)))), target=TARGET, **options).work
            if over_n != static:
                gaps[n] = over_n - static
    except SizeDecisionError as ex:
        return {"seed": seed, "class": "size-decision", "why": str(ex)[:300]}
    return {"seed": seed, "class": "gap" if gaps else "equal", "gaps": gaps}


def _child(seed: int, offsets: list[int], queue: mp.Queue) -> None:  # pragma: no cover - child
    try:
        queue.put(classify(seed, offsets))
    except Exception as ex:  # a crash of tensorad: reported, the sweep goes on
        queue.put({"seed": seed, "class": "error", "why": f"{type(ex).__name__}: {ex}"[:300],
                   "trace": traceback.format_exc()[-1500:]})


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("start", type=int)
    parser.add_argument("end", type=int)
    parser.add_argument("--sizes", default="0,3,35", help="offsets k of the sizes e + k")
    parser.add_argument("--timeout", type=float, default=300.0, help="wall seconds per seed")
    args = parser.parse_args(argv)
    offsets = [int(k) for k in args.sizes.split(",")]
    ctx = mp.get_context("fork")
    for seed in range(args.start, args.end):
        queue = ctx.Queue()
        child = ctx.Process(target=_child, args=(seed, offsets, queue))
        began = time.time()
        child.start()
        child.join(args.timeout)
        if child.is_alive():
            child.kill()
            child.join()
            found = {"seed": seed, "class": "timeout"}
        else:
            died = {"seed": seed, "class": "error", "rc": child.exitcode}
            found = queue.get() if not queue.empty() else died
        found["seconds"] = round(time.time() - began, 1)
        print(json.dumps(found), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    main(sys.argv[1:])
