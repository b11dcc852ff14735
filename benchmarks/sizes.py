"""``python -m benchmarks.sizes [--sizes 1,7,64,1000,4096] [--threads 1] [--rounds 15]``: a layer
written once with a symbolic batch ``n``, built once (a generic kernel, ``kernel.generic``), against
the static kernel built for each size.

Each round times one batch of calls of each kernel, interleaved; the table prints the median ratio
generic / static per layer and size (ratios only: the machine may be shared).  With one thread the
clock is the calling thread's CPU time, which other processes on the machine do not inflate.  Timing lives here,
never in the tests.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np

WIDTH = 256


def layers(ta) -> dict[str, Callable]:
    """Each layer as ``(outputs, inputs)`` over a batch of ``n`` rows of ``WIDTH`` features; ``*_grad``:
    the raw gradient of ``sum(Y * H)`` with respect to the batch."""
    def softmax(n):
        X = ta.placeholder((n, WIDTH), name="X")
        return ta.topi.nn.softmax(X), [X]

    def layer_norm(n):
        X = ta.placeholder((n, WIDTH), name="X")
        G, B = ta.placeholder((WIDTH,), name="G"), ta.placeholder((WIDTH,), name="B")
        return ta.topi.nn.layer_norm(X, G, B), [X, G, B]

    def dense(n):
        X = ta.placeholder((n, WIDTH), name="X")
        W, B = ta.placeholder((WIDTH, WIDTH), name="W"), ta.placeholder((WIDTH,), name="B")
        return ta.topi.nn.dense(X, W, B), [X, W, B]

    def gradient(layer):
        def of(n):
            Y, inputs = layer(n)
            H = ta.placeholder(Y.shape, name="H")
            return ta.JacobianRecursive(ta.topi.sum(Y * H), inputs[:1], optimize=False), [*inputs, H]
        return of

    return {"softmax": softmax, "layer_norm": layer_norm, "dense": dense, "softmax_grad": gradient(softmax),
            "layer_norm_grad": gradient(layer_norm), "dense_grad": gradient(dense)}


def _per_call(fn: Callable[[], object], calls: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(calls):
        fn()
    return (clock() - start) / calls


def compare(generic: Callable[[], object], static: Callable[[], object], rounds: int,
            clock: Callable[[], float] = time.perf_counter) -> float:
    """The median over interleaved rounds of the generic call's time over the static one's."""
    once = _per_call(static, 3, clock)
    calls = max(1, int(2e-3 / max(once, 1e-7)))
    ratios = []
    for _ in range(rounds):
        g, s = _per_call(generic, calls, clock), _per_call(static, calls, clock)
        ratios.append(g / s)
    return statistics.median(ratios)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,7,64,1000,4096")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--layers", default="")
    args = parser.parse_args(argv)
    import tensorad as ta

    sizes = [int(s) for s in args.sizes.split(",")]
    # one thread runs each call on this one: its CPU time, blind to other processes on a shared machine
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    rng = np.random.default_rng(0)
    chosen = layers(ta)
    names = args.layers.split(",") if args.layers else list(chosen)
    print(f"{'layer':<16}{'generic':>8}" + "".join(f"{'n=' + str(n):>10}" for n in sizes))
    for name in names:
        outputs, inputs = chosen[name](ta.size_var("n"))
        generic = ta.build(outputs, inputs, num_threads=args.threads)
        row = f"{name:<16}{str(generic.generic):>8}"
        for n in sizes:
            static_out, static_in = chosen[name](n)
            static = ta.build(static_out, static_in, num_threads=args.threads)
            arrays = [rng.standard_normal(tuple(t.shape)).astype("float32") for t in static_in]
            got, want = (np.asarray(k(*arrays)).ravel() for k in (generic, static))
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
            row += f"{compare(partial(generic, *arrays), partial(static, *arrays), args.rounds, clock):>10.2f}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
