"""``python -m benchmarks.sizes [--sizes 1,7,64,1000,4096] [--threads 1] [--rounds 15]``: a layer
written once with a symbolic batch ``n``, built once (a generic kernel, ``kernel.generic``), against
the static kernel built for each size.

Each round times one batch of calls of each kernel, interleaved; the table prints the median ratio
generic / static per layer and size (ratios only: the machine may be shared).  Timing lives here,
never in the tests.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

WIDTH = 256


def layers(ta) -> dict[str, Callable]:
    """Each layer as ``(outputs, inputs)`` over a batch of ``n`` rows of ``WIDTH`` features."""
    def softmax(n):
        X = ta.placeholder((n, WIDTH), name="X")
        return ta.topi.nn.softmax(X), [X]

    def layer_norm(n):
        X, G, B = (ta.placeholder(s, name=x) for s, x in (((n, WIDTH), "X"), ((WIDTH,), "G"), ((WIDTH,), "B")))
        return ta.topi.nn.layer_norm(X, G, B), [X, G, B]

    def dense(n):
        X, W, B = (ta.placeholder(s, name=x) for s, x in (((n, WIDTH), "X"), ((WIDTH, WIDTH), "W"),
                                                         ((WIDTH,), "B")))
        return ta.topi.nn.dense(X, W, B), [X, W, B]

    def softmax_grad(n):
        Y, (X,) = softmax(n)
        H = ta.placeholder(Y.shape, name="H")
        return ta.JacobianRecursive(ta.topi.sum(Y * H), [X], optimize=False), [X, H]

    return {"softmax": softmax, "layer_norm": layer_norm, "dense": dense, "softmax_grad": softmax_grad}


def _per_call(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def compare(generic: Callable[[], object], static: Callable[[], object], rounds: int) -> float:
    """The median over interleaved rounds of the generic call's time over the static one's."""
    once = _per_call(static, 3)
    calls = max(1, int(2e-3 / max(once, 1e-7)))
    ratios = []
    for _ in range(rounds):
        g, s = _per_call(generic, calls), _per_call(static, calls)
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
    rng = np.random.default_rng(0)
    chosen = layers(ta)
    names = args.layers.split(",") if args.layers else list(chosen)
    print(f"{'layer':<14}{'generic':>8}" + "".join(f"{'n=' + str(n):>10}" for n in sizes))
    for name in names:
        outputs, inputs = chosen[name](ta.size_var("n"))
        generic = ta.build(outputs, inputs, num_threads=args.threads)
        row = f"{name:<14}{str(generic.generic):>8}"
        for n in sizes:
            static_out, static_in = chosen[name](n)
            static = ta.build(static_out, static_in, num_threads=args.threads)
            arrays = [rng.standard_normal(tuple(t.shape)).astype("float32") for t in static_in]
            np.testing.assert_allclose(np.asarray(generic(*arrays)).ravel(), np.asarray(static(*arrays)).ravel(),
                                       rtol=1e-4, atol=1e-5)
            row += f"{compare(lambda: generic(*arrays), lambda: static(*arrays), args.rounds):>10.2f}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
