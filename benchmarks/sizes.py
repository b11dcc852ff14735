"""``python -m benchmarks.sizes [--sizes 1,7,64,1000,4096] [--threads 1] [--rounds 15] [--layers a,b]
[--target SPEC]``: each layer of the ``layers`` suite (``workloads.LAYERS``, its full per-row shapes), a
softmax and the ``models`` suite's Transformer block, written once with a symbolic batch ``n`` (attention
and the Transformer block with a symbolic sequence length ``L`` too, at its workload's length), forward
and backward (the optimized gradient of ``sum(Y * H)`` with respect to the workload's inputs), built
once (a generic kernel where ``kernel.generic``; over ``n`` at the length where only ``n``'s rows are
independent), against the static kernel built for each size.

Each round times one batch of calls of each kernel, interleaved; the table prints the median ratio
generic / static per layer, pass and size (ratios only: the machine may be shared), ``-`` where the
inputs would pass 64 MB, ``per size`` where the program compiles once per size (``kernel.why``); a
layer whose operators need a static batch says why.  With
one thread the clock is the calling thread's CPU time, which other processes do not inflate.  Timing
lives here, never in the tests.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from .sys_tensorad import topi_forward
from .workloads import BY_NAME, LAYERS, Workload, make_inputs

SOFTMAX = Workload("softmax", "softmax", "softmax over 256 features (grad X)", {"X": (1024, 256)},
                   {"X": (4, 8)}, ("X",), (0.0, 0.0), suite="layers")
MAX_BYTES = 64 << 20


def _per_call(fn: Callable[[], object], calls: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(calls):
        fn()
    return (clock() - start) / calls


def compare(generic: Callable[[], object], static: Callable[[], object], rounds: int,
            clock: Callable[[], float] = time.perf_counter) -> float:
    """The median over interleaved rounds of the generic call's time over the static one's, the two taking
    turns to run first in a round (no order favoured)."""
    once = _per_call(static, 3, clock)
    calls = max(1, int(2e-3 / max(once, 1e-7)))
    ratios = []
    for k in range(rounds):
        first, second = (generic, static) if k % 2 else (static, generic)
        a, b = _per_call(first, calls, clock), _per_call(second, calls, clock)
        ratios.append(b / a if k % 2 == 0 else a / b)
    return statistics.median(ratios)


def programs(ta, w: Workload, n, length=None, tiny: bool = False) -> list[tuple[list, list]]:
    """The forward and backward ``(outputs, inputs)`` of ``w`` (at its ``tiny`` shapes if asked) over a
    batch of ``n`` (an int or a size variable): inputs whose leading extent is the first input's take
    ``n`` rows, and, where ``length`` is given, attention's inputs ``length`` tokens (their second axis);
    integer inputs (token ids, labels) are ``int32``."""
    shapes = w.input_shapes(tiny)
    batch = next(iter(shapes.values()))[0]
    p = {}
    for k, s in shapes.items():
        shape = [n, *s[1:]] if s[0] == batch else list(s)
        if length is not None and s[0] == batch:
            shape[1] = length
        p[k] = ta.placeholder(tuple(shape), "int32" if k in w.params.get("ints", {}) else "float32", name=k)
    inputs = list(p.values())
    Y = topi_forward(w.kind, p, w.params)
    H = ta.placeholder(Y.shape, name="H")
    grads = ta.JacobianRecursive(ta.topi.sum(Y * H), [p[g] for g in w.grads])
    return [([Y], inputs), (grads, [*inputs, H])]


def _over_rows(kernel, length, value: int):
    """``kernel``, or, where its rows are independent along ``n`` only, its generic kernel over ``n`` at
    the sequence length ``value``."""
    if kernel.generic or length is None or not kernel.why.startswith("rows are independent along n"):
        return kernel
    return kernel.at(**{length.name: value})


def inputs_at(w: Workload, static_inputs: list, tiny: bool = False) -> list[np.ndarray]:
    """The workload's inputs (at its ``tiny`` shapes if asked) of ``static_inputs``' shapes (rows
    repeated past its batch, tokens past its length), and a head."""
    given = make_inputs(w, tiny)
    out = []
    for t in static_inputs:
        a = given.get(t.name)
        if a is None:  # the head
            a = np.random.default_rng(1).uniform(-1, 1, size=tuple(t.shape)).astype(np.float32)
        elif a.shape != tuple(t.shape):
            a = np.ascontiguousarray(np.resize(a, tuple(t.shape)))
        out.append(a)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,7,64,1000,4096")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--layers", default="")
    parser.add_argument("--target", default="llvm", help="an LLVM target spec (default the host)")
    args = parser.parse_args(argv)
    import tensorad as ta
    from tensorad.ir.expr import SizeDecisionError

    sizes = [int(s) for s in args.sizes.split(",")]
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    build = partial(ta.build, num_threads=args.threads, target=args.target)
    suite = [SOFTMAX, *LAYERS, BY_NAME["transformer_block"]]
    chosen = [w for w in suite if not args.layers or w.name in args.layers.split(",")]
    print(f"{'layer':<18}{'pass':<10}" + "".join(f"{'n=' + str(n):>10}" for n in sizes), flush=True)
    for w in chosen:
        length = ta.size_var("L") if w.kind in ("attention", "transformer") else None
        tokens = w.input_shapes()[next(iter(w.input_shapes()))][1]  # (attention's length: its workload's)
        try:
            symbolic = programs(ta, w, ta.size_var("n"), length)
        except (SizeDecisionError, TypeError) as e:  # (an operator that needs a static batch)
            print(f"{w.name:<18}{'':<10}   ({e})", flush=True)
            continue
        for (outputs, inputs), label in zip(symbolic, ("forward", "backward")):
            generic = _over_rows(build(outputs, inputs), length, tokens)
            row = f"{w.name:<18}{label:<10}"
            for n in sizes:
                static_out, static_in = programs(ta, w, n, tokens if length is not None else None)[
                    label == "backward"]
                arrays = inputs_at(w, static_in)
                if not generic.generic or sum(a.nbytes for a in arrays) > MAX_BYTES:
                    row += f"{'per size' if not generic.generic else '-':>10}"
                    continue
                static = build(static_out, static_in)
                for got, want in zip(*(ta.symbolic.listed(k(*arrays)) for k in (generic, static))):
                    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
                ratio = compare(partial(generic, *arrays), partial(static, *arrays), args.rounds, clock)
                row += f"{ratio:>10.2f}"
            print(row + ("" if generic.generic else f"   ({generic.why})"), flush=True)


if __name__ == "__main__":
    main()
