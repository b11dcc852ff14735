"""``ta.build`` of an argmax over ``r0 in [1, 10), r1 in [0, 4)`` reading
``X[r0 % 4]`` (output shape (3,)) did not return: LLVM fully unrolled the two reduction loops
into a chain of 36 selects (2**36 operand paths) inside the output loop, and the loop
vectorizer's VPlan walked every path (see ``codegen/llvm/unrolled_chains.py``).  The builds run in a child
process with a time limit, so that a regression fails instead of hanging the suite."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tensorad.codegen.llvm.unrolled_chains import PATH_LIMIT, chain_paths, path_matrix

import tensorad as ta

_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorad as ta

    def fcombine(x, y):
        keep = x[1] >= y[1]
        return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])

    def fidentity(t0, t1):
        return ta.const(-1, t0), ta.const(-3.0e38, t1)

    argmax = ta.comm_reducer(fcombine, fidentity, name="argmax")
    X = ta.placeholder((4,), name="X")
    U = ta.placeholder((4,), name="U")
    x = np.array([0.5, 2.0, -1.0, 2.0], "float32")
    u = np.array([1.0, 2.0, 3.0, 4.0], "float32")
    report = []
    for outer, opt in ((3, 2), (3, 3), (8, 3)):
        r0 = ta.reduce_axis((1, 10), name="r0")
        r1 = ta.reduce_axis((0, 4), name="r1")
        I, V = ta.compute((outer,), lambda i: argmax((r0, X[r0 % 4]), axis=[r0, r1]), name="am")
        J = ta.jvp(V, [X], [U])
        for outs, ins, args in (([I, V], [X], [x]), ([J], [X, U], [x, u])):
            got = ta.build(outs, ins, opt_level=opt, cache=False)(*args)
            got = got if isinstance(got, tuple) else (got,)
            want = ta.evaluate(outs, dict(zip(ins, args)))
            report.append(all(np.array_equal(a, b) for a, b in zip(got, want)))
    print(json.dumps(report))
""")


def test_argmax_chain_builds_and_is_right():
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [True] * 6


def test_path_count_of_argmax_combiner():
    """argmax reads the running value twice per update (condition and choice): 2**n paths."""
    def fcombine(x, y):
        keep = x[1] >= y[1]
        return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])

    red = ta.comm_reducer(fcombine, lambda a, b: (ta.const(-1, a), ta.const(0.0, b)))
    comb = red.instantiate(("int32", "float32"))
    m = path_matrix(comb.result, comb.lhs)
    assert m == [[1, 1], [0, 2]]
    assert chain_paths(m, 4) == 16
    assert chain_paths(m, 36) > PATH_LIMIT
    assert chain_paths([[1]], 10_000) == 1  # a sum's chain is a line


class _Counted(int):
    """An int that counts the multiplications it takes part in."""

    calls = 0

    def __mul__(self, other):
        _Counted.calls += 1
        return int(self) * other


def _brute_paths(m, steps):
    rows = [1] * len(m)
    for _ in range(steps):
        rows = [sum(m[i][j] * rows[j] for j in range(len(m))) for i in range(len(m))]
    return max(rows)


def test_path_count_work_does_not_grow_with_the_steps():
    # compile time: a sum (or any chain whose counts stay bounded) unrolled over a 10^5-step
    # window iterated the matrix product 10^5 times per loop (0.6 s CPU of an attention build)
    for m, steps in (([[1]], 100_000), ([[0, 1], [1, 0]], 100_001), ([[1, 0], [1, 0]], 100_000)):
        cm = [[_Counted(x) for x in row] for row in m]
        _Counted.calls = 0
        got = chain_paths(cm, steps)
        assert _Counted.calls <= 20 * len(m) ** 2, (m, _Counted.calls)
        assert got == _brute_paths(m, steps)
    # exact against brute force where the counts cycle, grow or pass the limit
    for m in ([[0, 1], [1, 0]], [[0, 2], [1, 0]], [[1, 1], [0, 1]], [[1, 1], [0, 2]], [[0, 0], [1, 0]],
              [[0, 1, 0], [0, 0, 1], [1, 0, 0]]):
        for steps in range(0, 15):
            want = _brute_paths(m, steps)
            got = chain_paths(m, steps, limit=64)
            assert got == want or (want > 64 and got > 64), (m, steps, got, want)
