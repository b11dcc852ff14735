"""``python -m benchmarks.sizes [--sizes 1,7,64,1000,4096] [--threads 1] [--rounds 15] [--layers a,b]
[--target SPEC] [--max-mb 512]``: each layer of the ``layers`` suite (``workloads.LAYERS``, its full
per-row shapes), a softmax and the ``models`` suite's Transformer block, written once with a symbolic
batch ``n`` (attention and the Transformer block with a symbolic sequence length ``L`` too, at its
workload's length), forward and backward (the optimized gradient of ``sum(Y * H)`` with respect to the
workload's inputs), built once (a generic kernel where ``kernel.generic``; over ``n`` at the length
where only ``n``'s rows are independent), against the static kernel built for each size; and the
generic kernels' results at each size against PyTorch float64 (row ``vs torch``: the largest error
relative to each output's largest magnitude, or ``WRONG`` past ``benchmarks.check.RTOL``); a pass whose
generic and static kernels disagree is ``WRONG`` in its cell (untimed), stderr naming the layer and size.

Each round times a batch of calls of each kernel (at least two, and as many as take the static kernel
:data:`FLOOR_S` of CPU time), interleaved, after an untimed call of each; both kernels read the same
input arrays and write their results with ``out=`` into one set of preallocated outputs, reused every
call (a new output each call would time its pages' faults).  The table prints the median ratio
generic / static per layer, pass and size (ratios only: the machine may be shared), ``per size`` where
the program compiles once per size (``kernel.why``); a layer whose operators need a static batch says
why.  Where a layer's forward tensors at a size would hold more than ``--max-mb`` (its inputs, its
intermediates and its outputs), the largest extent that only its batch's inputs have (an image's
height or width, attention's tokens or head width, the Transformer's length) is halved until they fit,
for that size's generic and static kernels alike (a row of its own, which names the shapes).  With
one thread the clock is the calling thread's CPU time, which other processes do not inflate.  Timing
lives here, never in the tests.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import numpy as np

from . import check
from .sys_tensorad import topi_forward
from .workloads import BY_NAME, LAYERS, Workload, make_inputs

SOFTMAX = Workload("softmax", "softmax", "softmax over 256 features (grad X)", {"X": (1024, 256)},
                   {"X": (4, 8)}, ("X",), (0.0, 0.0), suite="layers")
MAX_MB = 512


# the least CPU time one kernel's turn in a round takes (calls are repeated up to it), and the least count of
# calls in a turn (the first call of a turn follows the other kernel's, whose data the caches then hold)
FLOOR_S = 0.05
LEAST_CALLS = 2


def _per_call(fn: Callable[[], object], calls: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(calls):
        fn()
    return (clock() - start) / calls


def compare(generic: Callable[[], object], static: Callable[[], object], rounds: int,
            clock: Callable[[], float] = time.perf_counter, floor_s: float = FLOOR_S) -> float:
    """The median over interleaved rounds of the generic call's time over the static one's.  Each is called
    once untimed first; in each round each kernel runs the same count of calls (at least
    :data:`LEAST_CALLS`, and as many as take the static kernel ``floor_s``), the two taking turns to run
    first (no order favoured)."""
    generic(), static()
    once = _per_call(static, 1, clock)
    calls = max(LEAST_CALLS, math.ceil(floor_s / max(once, 1e-7)))
    ratios = []
    for k in range(rounds):
        first, second = (generic, static) if k % 2 else (static, generic)
        a, b = _per_call(first, calls, clock), _per_call(second, calls, clock)
        ratios.append(b / a if k % 2 == 0 else a / b)
    return statistics.median(ratios)


def into(kernel, arrays: list[np.ndarray], outs: list[np.ndarray]) -> Callable[[], object]:
    """A call of ``kernel`` on ``arrays`` that writes its results into the preallocated ``outs`` (the
    same arrays each call, so that a call times the kernel's code, not the pages of new outputs)."""
    return partial(kernel, *arrays, out=outs[0] if len(outs) == 1 else tuple(outs))


def programs(ta, w: Workload, n, length=None, tiny: bool = False,
             forward_only: bool = False) -> list[tuple[list, list]]:
    """The forward and backward ``(outputs, inputs)`` of ``w`` (at its ``tiny`` shapes if asked) over a
    batch of ``n`` (an int or a size variable): inputs whose leading extent is the first input's take
    ``n`` rows, and, where ``length`` is given, attention's inputs ``length`` tokens (their second axis);
    integer inputs (token ids, labels) are ``int32``; the forward only if asked."""
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
    if forward_only:
        return [([Y], inputs)]
    H = ta.placeholder(Y.shape, name="H")
    grads = ta.JacobianRecursive(ta.topi.sum(Y * H), [p[g] for g in w.grads])
    return [([Y], inputs), (grads, [*inputs, H])]


def held_bytes(ta, w: Workload, n: int) -> int:
    """The bytes of the forward program's tensors (inputs, intermediates, outputs) of ``w`` at ``n`` rows."""
    from tensorad.ir.rewrite import tensor_graph

    (outputs, inputs), = programs(ta, w, n, forward_only=True)
    return sum(int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize for t in tensor_graph(outputs + inputs))


def scaled(ta, w: Workload, n: int, cap: int) -> Workload:
    """``w``, or, where its forward tensors at ``n`` rows hold more than ``cap`` bytes, ``w`` with the largest
    extent that only the inputs led by its batch have (an image's height, attention's tokens) halved
    until they hold at most ``cap`` (or no such extent is above 1)."""
    while held_bytes(ta, w, n) > cap:
        shapes = w.input_shapes()
        batch = next(iter(shapes.values()))[0]
        led = [k for k, s in shapes.items() if s[0] == batch]
        others = {e for k, s in shapes.items() if k not in led for e in s}
        own = max((e for k in led for e in shapes[k][1:] if e not in others and e > 1), default=None)
        if own is None:
            break
        half = {k: (s[0], *[e // 2 if e == own else e for e in s[1:]]) if k in led else s
                for k, s in shapes.items()}
        w = replace(w, shapes=half)
    return w


def over_rows(kernel, length, value: int):
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
            a = head_of(tuple(t.shape))
        elif a.shape != tuple(t.shape):
            a = np.ascontiguousarray(np.resize(a, tuple(t.shape)))
        out.append(a)
    return out


def head_of(shape: tuple[int, ...]) -> np.ndarray:
    """The head of the backward (``sum(Y * H)``'s ``H``) of a forward of ``shape``."""
    return np.random.default_rng(1).uniform(-1, 1, size=shape).astype(np.float32)


def against_pytorch(w: Workload, kernel, backward: bool, n: int, tiny: bool = False) -> dict:
    """``benchmarks.check.compare``'s verdict on ``kernel``, of :func:`programs`' forward or ``backward``
    over a batch (at its ``tiny`` shapes if asked), at ``n`` rows (the workload's rows repeated) against
    PyTorch float64: its forward, or its autograd's gradients of the same head."""
    from tensorad.symbolic import listed

    from . import sys_torch

    given = make_inputs(w, tiny)
    batch = next(iter(given.values())).shape[0]
    arrays = {k: np.ascontiguousarray(np.resize(a, (n, *a.shape[1:]))) if a.shape[0] == batch else a
              for k, a in given.items()}
    y, head, grads = sys_torch.autograd_reference(w, arrays, head_of)
    ins = list(arrays.values())
    got = listed(kernel(*ins, head) if backward else kernel(*ins))
    return check.compare(got, list(grads.values()) if backward else [y])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,7,64,1000,4096")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--layers", default="")
    parser.add_argument("--target", default="llvm", help="an LLVM target spec (default the host)")
    parser.add_argument("--max-mb", type=int, default=MAX_MB, help="the most MB a layer's forward tensors "
                        "hold at a size before its other extents are halved")
    args = parser.parse_args(argv)
    import tensorad as ta

    sizes = [int(s) for s in args.sizes.split(",")]
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    build = partial(ta.build, num_threads=args.threads, target=args.target)
    suite = [SOFTMAX, *LAYERS, BY_NAME["transformer_block"]]
    chosen = [w for w in suite if not args.layers or w.name in args.layers.split(",")]
    print(f"{'layer':<18}{'pass':<10}" + "".join(f"{'n=' + str(n):>10}" for n in sizes), flush=True)
    for full in chosen:
        groups: dict[str, tuple[Workload, list[int]]] = {}  # (the sizes each scaling of the layer runs)
        for n in sizes:
            w = scaled(ta, full, n, args.max_mb << 20)
            groups.setdefault(w.describe(), (w, []))[1].append(n)
        for w, at in groups.values():
            _layer_rows(ta, w, full, sizes, at, build, args.rounds, clock)


def _layer_rows(ta, w: Workload, full: Workload, sizes: list[int], at: list[int], build, rounds: int,
                clock) -> None:
    """The forward and backward rows of layer ``w`` (``full`` scaled) at the sizes ``at`` of ``sizes``."""
    from tensorad.ir.expr import SizeDecisionError

    length = ta.size_var("L") if w.kind in ("attention", "transformer") else None
    tokens = w.input_shapes()[next(iter(w.input_shapes()))][1]  # (attention's length: its workload's)
    led = [f"{k}{tuple(s[1:])}".replace(" ", "") for k, s in w.input_shapes().items()
           if s != full.input_shapes()[k]]
    note = "" if w is full else f"   (per row: {' '.join(led)})"
    try:
        symbolic = programs(ta, w, ta.size_var("n"), length)
    except (SizeDecisionError, TypeError) as e:  # (an operator that needs a static batch)
        print(f"{w.name:<18}{'':<10}   ({e})", flush=True)
        return
    generics = [over_rows(build(outputs, inputs), length, tokens) for outputs, inputs in symbolic]
    rows = {label: f"{w.name:<18}{label:<10}" for label in ("forward", "backward", "vs torch")}
    for n in sizes:
        if n not in at or not all(k.generic for k in generics):
            for label in rows:
                rows[label] += f"{'per size' if not all(k.generic for k in generics) else '':>10}"
            continue
        verdicts = [against_pytorch(w, k, backward, n) for backward, k in enumerate(generics)]
        worst = max(v["max_rel_err"] if v["ok"] else np.inf for v in verdicts)
        rows["vs torch"] += f"{worst:>10.1e}" if worst < np.inf else f"{'WRONG':>10}"
        for generic, label, pair in zip(generics, ("forward", "backward"),
                                        programs(ta, w, n, tokens if length is not None else None)):
            arrays = inputs_at(w, pair[1])
            static = build(*pair)
            verdict = check.compare(*(ta.symbolic.listed(k(*arrays)) for k in (generic, static)))
            if not verdict["ok"]:  # (a wrong kernel is not timed: its cell says so, and stderr which)
                print(f"{w.name} {label} at n={n}: generic against static: {verdict['detail']}",
                      file=sys.stderr)
                rows[label] += f"{'WRONG':>10}"
                continue
            outs = [np.empty_like(r) for r in ta.symbolic.listed(static(*arrays))]  # (one set, both sides')
            ratio = compare(into(generic, arrays, outs), into(static, arrays, outs), rounds, clock)
            rows[label] += f"{ratio:>10.2f}"
    why = "; ".join(k.why for k in generics if not k.generic)
    for row in rows.values():
        print(row + (f"   ({why})" if why else "") + note, flush=True)


if __name__ == "__main__":
    main()
