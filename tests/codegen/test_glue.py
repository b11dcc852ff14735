"""The glue of a kernel (``P_main``, ``P_call``, each parallel nest's ``P_omp``) is compiled ``optnone``.

Glue loads pointers and calls the nests, once per call or per chunk of a parallel loop; LLVM's
optimizer and code generator spent 15-25% of a layer module's LLVM time on it (``python -m
benchmarks.compile_time``).  LLVM optimizes the nests and the parallel fills -- exactly as
before: their machine code is the same -- and a ``P_main`` that fills a buffer with a non-zero
value in a loop, unless the program is large (past ``GLUE_OPT_LIMIT`` pointers or steps).
Counted in the module's definitions, never timed; results against NumPy.
"""

from __future__ import annotations

import re

import numpy as np
from tensorad.codegen.llvm_emit import GLUE_OPT_LIMIT

import tensorad as ta

GLUE = re.compile(r"_(main|call|omp\d+|glue\d+)\"\(")


def _definitions(kern) -> dict[str, bool]:
    """Each function the module defines (``main``, ``nest3``...) -> whether it is ``optnone``."""
    out = {}
    for line in kern.llvm_ir_unoptimized.splitlines():
        m = re.match(r'define [^@]*@"k[0-9a-f]+_(\w+)"\(', line)
        if m:
            out[m.group(1)] = "optnone" in line
    return out


def test_llvm_optimizes_the_nests_and_not_the_glue():
    X = ta.placeholder((64, 96), "float32", name="X")
    W = ta.placeholder((96, 80), "float32", name="W")
    k = ta.reduce_axis((0, 96), "k")
    Y = ta.compute((64, 80), lambda i, j: ta.sum(X[i, k] * W[k, j], axis=k), name="Y")
    Z = ta.compute((64, 80), lambda i, j: ta.tanh(Y[i, j]) + ta.exp(-Y[i, j]), name="Z")
    S = ta.topi.sum(Z * Z)
    grads = ta.gradient(S, [X, W])
    kern = ta.build(list(grads), [X, W], num_threads=2, parallel_min_work=0, cache=False)
    defs = _definitions(kern)
    glue = {name for name in defs if re.fullmatch(r"main|call|omp\d+", name)}
    assert {"main", "call"} <= glue and any(n.startswith("omp") for n in glue), defs
    assert all(defs[n] for n in glue)  # no IR passes, the fast code generator
    optimized = {n for n, off in defs.items() if not off}
    assert optimized and all(re.fullmatch(r"(nest|fill)\d+(_\w+)?", n) for n in optimized), optimized
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 96)).astype(np.float32) * 0.1
    w = rng.standard_normal((96, 80)).astype(np.float32) * 0.1
    y = x.astype(np.float64) @ w
    dz = 2 * (np.tanh(y) + np.exp(-y))
    dy = dz * (1 - np.tanh(y) ** 2 - np.exp(-y))
    dx, dw = kern(x, w)
    np.testing.assert_allclose(dx, dy @ w.T, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(dw, x.T.astype(np.float64) @ dy, rtol=2e-4, atol=2e-4)


def test_a_main_that_fills_in_a_loop_stays_optimized():
    # a running max whose first row is empty: its buffer is filled with -inf by P_main
    X = ta.placeholder((64,), "float32", name="X")
    k = ta.reduce_axis((0, 64), "k")
    Y = ta.compute((64,), lambda i: ta.max(X[k], axis=k, where=k < i), name="Y")
    assert "fill -inf" in str(ta.lower([Y], [X], num_threads=1))
    kern = ta.build([Y], [X], num_threads=1, cache=False)
    defs = _definitions(kern)
    assert defs["main"] is False and defs["call"] is True
    x = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    want = np.concatenate([[-np.inf], np.maximum.accumulate(x)[:-1]])
    np.testing.assert_array_equal(kern(x), want.astype(np.float32))


def test_the_glue_of_a_program_with_many_buffers_is_compiled_unoptimized():
    # P_main and P_call of a long program load thousands of pointers and call hundreds of nests:
    # LLVM took superlinear time on them (2.5 + 1.3 of 5.5 CPU-s for a 1,000-step chain)
    X = ta.placeholder((8,), "float32", name="X")
    steps = [X]
    for k in range(GLUE_OPT_LIMIT + 8):
        steps.append((lambda P: ta.compute((8,), lambda i: P[i] * 0.5 + 1.0, name=f"s{k}"))(steps[-1]))
    Y = steps[-1]
    kern = ta.build([Y], [X], num_threads=1, materialize=steps[1:-1], fuse=False)
    defs = _definitions(kern)
    glue = [n for n in defs if GLUE.search(f'_{n}"(')]
    assert {"main", "call"} <= set(glue) and all(defs[n] for n in glue), defs
    assert not any(off for n, off in defs.items() if n.startswith("nest"))
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    np.testing.assert_allclose(kern(x), ta.evaluate(Y, {X: x.astype(np.float64)}), rtol=1e-5)
