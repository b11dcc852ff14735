"""Issue 8, D5: ``ta.build`` of an argmax over ``r0 in [1, 10), r1 in [0, 4)`` reading
``X[r0 % 4]`` (output shape (3,)) did not return: LLVM fully unrolled the two reduction loops
into a chain of 36 selects (2**36 operand paths) inside the output loop, and the loop
vectorizer's VPlan walked every path (see ``codegen/chains.py``).  The builds run in a child
process with a time limit, so that a regression fails instead of hanging the suite."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tensorad.codegen.chains import PATH_LIMIT, chain_paths, path_matrix

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
