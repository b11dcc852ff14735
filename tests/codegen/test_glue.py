"""The glue of a kernel (``P_main``, each parallel nest's ``P_omp``) is compiled ``optnone``.

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
from tensorad.codegen.llvm.emit import GLUE_OPT_LIMIT

import tensorad as ta

GLUE = re.compile(r"_(main|omp\d+|glue\d+)\"\(")


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
    glue = {name for name in defs if re.fullmatch(r"main|omp\d+", name)}
    assert "main" in glue and any(n.startswith("omp") for n in glue), defs
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
    assert defs["main"] is False
    x = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    want = np.concatenate([[-np.inf], np.maximum.accumulate(x)[:-1]])
    np.testing.assert_array_equal(kern(x), want.astype(np.float32))


def test_the_glue_of_a_program_with_many_buffers_is_compiled_unoptimized():
    # P_main of a long program load thousands of pointers and call hundreds of nests:
    # LLVM took superlinear time on them (2.5 + 1.3 of 5.5 CPU-s for a 1,000-step chain)
    X = ta.placeholder((8,), "float32", name="X")
    steps = [X]
    for k in range(GLUE_OPT_LIMIT + 8):
        steps.append((lambda P: ta.compute((8,), lambda i: P[i] * 0.5 + 1.0, name=f"s{k}"))(steps[-1]))
    Y = steps[-1]
    kern = ta.build([Y], [X], num_threads=1, materialize=steps[1:-1], fuse=False)
    defs = _definitions(kern)
    glue = [n for n in defs if GLUE.search(f'_{n}"(')]
    assert "main" in glue and all(defs[n] for n in glue), defs
    assert not any(off for n, off in defs.items() if n.startswith("nest"))
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    np.testing.assert_allclose(kern(x), ta.evaluate(Y, {X: x.astype(np.float64)}), rtol=1e-5)


# ---- repeated glue: one loop over a table of pointer positions (codegen/llvm/glue_table.py) ----------

NEST_CALL = re.compile(r'call void @"k[0-9a-f]+_nest\d+"\(')


def _chain_kernel(steps_of, n: int, size: int = 8):
    """A program of ``n`` materialized, unfused steps ``steps_of(k, P)`` from ``X``."""
    X = ta.placeholder((size,), "float32", name="X")
    steps = [X]
    for k in range(n):
        steps.append(steps_of(k, steps[-1]))
    kern = ta.build([steps[-1]], [X], num_threads=1, materialize=steps[1:-1], fuse=False, cache=False)
    return kern, np.linspace(-2, 2, size, dtype=np.float32)


def test_repeated_segments_of_a_long_program_are_one_loop_over_a_table():
    n = GLUE_OPT_LIMIT + 36
    kern, x = _chain_kernel(lambda k, P: ta.compute((8,), lambda i: P[i] * 0.5 + 1.0, name=f"s{k}"), n)
    ir = kern.llvm_ir_unoptimized
    assert len(NEST_CALL.findall(ir)) <= 3, len(NEST_CALL.findall(ir))  # (was one per step: 100)
    assert re.search(r'define [^@]*@"k[0-9a-f]+_run\d+"\(', ir)
    want = x.astype(np.float64)
    for _ in range(n):
        want = want * 0.5 + 1.0
    np.testing.assert_allclose(kern(x), want, rtol=1e-6)


def test_alternating_segments_repeat_as_a_pair():
    n = GLUE_OPT_LIMIT + 36

    def step(k, P):
        if k % 2:
            return ta.compute((8,), lambda i: P[i] * 0.5 + 1.0, name=f"a{k}")
        return ta.compute((8,), lambda i: ta.tanh(P[i]) * 2.0, name=f"b{k}")
    kern, x = _chain_kernel(step, n)
    assert len(NEST_CALL.findall(kern.llvm_ir_unoptimized)) <= 6
    want = x.astype(np.float64)
    for k in range(n):
        want = want * 0.5 + 1.0 if k % 2 else np.tanh(want) * 2.0
    np.testing.assert_allclose(kern(x), want, rtol=1e-5)


def test_steps_differing_in_a_constant_never_share_a_loop():
    n = GLUE_OPT_LIMIT + 8
    kern, x = _chain_kernel(lambda k, P: ta.compute((8,), lambda i: P[i] * 0.5 + (1.0 + k / 1024),
                                                      name=f"s{k}"), n)
    assert len(NEST_CALL.findall(kern.llvm_ir_unoptimized)) == n  # (a function and a call per step)
    want = x.astype(np.float64)
    for k in range(n):
        want = want * 0.5 + (1.0 + k / 1024)
    np.testing.assert_allclose(kern(x), want, rtol=1e-6)


def test_a_repeated_unit_of_three_steps_is_one_loop():
    n = GLUE_OPT_LIMIT + 8
    kern, x = _chain_kernel(lambda k, P: ta.compute((8,), lambda i: P[i] * 0.5 + float(k % 3),
                                                      name=f"s{k}"), n)
    assert len(NEST_CALL.findall(kern.llvm_ir_unoptimized)) <= 6
    want = x.astype(np.float64)
    for k in range(n):
        want = want * 0.5 + float(k % 3)
    np.testing.assert_allclose(kern(x), want, rtol=1e-6)


def test_a_segment_signature_spells_every_fill_operand():
    from tensorad.codegen.llvm.glue_table import fill_signature, runs, segments
    from tensorad.codegen.program import Buffer, Fill, Nest

    from tensorad.ir.expr import const

    def fill(shape=(8,), dtype="float32", value=0.0):
        t = ta.placeholder(shape, dtype, name="t")
        return Fill(Buffer("t", shape, dtype, "temp", t), const(value, dtype))
    base = fill_signature(fill())
    assert fill_signature(fill()) == base  # (another buffer, same code)
    for other in (fill(shape=(9,)), fill(shape=(2, 4)), fill(dtype="float64"),
                  fill(dtype="int32", value=0), fill(value=-0.0), fill(value=1.0)):
        assert fill_signature(other) != base
    nest = Nest("n", (), ())
    assert segments([fill(), fill(), nest, fill(), nest, fill()]) == [(0, 3), (3, 5), (5, 6)]
    a, b, c = ("a",), ("b",), ("c",)
    assert runs([a] * 5) == [(0, 5, 1)]
    assert runs([a] * 3) == []
    assert runs([c, a, b, a, b, a, b, a, b, a, c]) == [(1, 9, 2)]
    assert runs([a, a, None, a, a, a, a]) == [(3, 7, 1)]
