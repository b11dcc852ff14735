"""Parallel loops deal their trips dynamically: each thread takes the next chunk from a
counter shared by the team (an ``atomicrmw add``) until none is left, and a matrix product's
driver takes chunks of its blocks likewise -- so a thread that starts late or runs slow is not waited
for.  Each element is still computed by one iteration, so the results are bitwise those of one
thread, at any thread count and trip count.  Oracles: NumPy formulas."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from tensorad.codegen.gemm import library as gemmlib
from tensorad.codegen.target import host_target

import tensorad as ta

THREADS = (1, 2, 3, 5)


def _row_norms(rows: int, cols: int):
    X = ta.placeholder((rows, cols), name="X")
    j = ta.reduce_axis((0, cols), name="j")
    Y = ta.compute((rows,), lambda i: ta.sum(X[i, j] * X[i, j], axis=j), name="Y")
    return X, Y


def _batched_product(batches: int, m: int, n: int, k: int):
    A = ta.placeholder((batches, m, k), name="A")
    B = ta.placeholder((k, n), name="B")
    r = ta.reduce_axis((0, k), name="r")
    C = ta.compute((batches, m, n), lambda b, i, j: ta.sum(A[b, i, r] * B[r, j], axis=r), name="C")
    return A, B, C


@pytest.mark.parametrize("rows", [2, 7, 1001])
def test_loop_chunks_cover_every_trip_at_any_thread_count(rows, rng):
    X, Y = _row_norms(rows, 33)
    x = rng.uniform(-1, 1, (rows, 33)).astype(np.float32)
    kern = ta.build([Y], [X], parallel_min_work=0)
    assert "parallel for" in str(kern.lowered)
    got = {}
    for t in THREADS:
        kern.num_threads = t
        got[t] = kern(x)
    np.testing.assert_allclose(got[1], (x.astype(np.float64) ** 2).sum(1), rtol=1e-5)
    for t in THREADS[1:]:
        np.testing.assert_array_equal(got[t], got[1])


def test_product_blocks_are_shared_at_any_thread_count(rng):
    # 7 batch points (an odd number of blocks of the tile grid), odd rows, columns and reduction
    A, B, C = _batched_product(7, 13, 45, 37)
    a = rng.standard_normal((7, 13, 37)).astype(np.float32)
    b = rng.standard_normal((37, 45)).astype(np.float32)
    kern = ta.build([C], [A, B], parallel_min_work=0, microkernel=True)
    assert "_driver" in kern.llvm_ir_unoptimized
    got = {}
    for t in THREADS:
        kern.num_threads = t
        got[t] = kern(a, b)
    np.testing.assert_allclose(got[1], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    for t in THREADS[1:]:
        np.testing.assert_array_equal(got[t], got[1])


def test_parallel_loops_take_their_chunks_from_a_shared_counter():
    X, Y = _row_norms(1001, 33)
    kern = ta.build([Y], [X], parallel_min_work=0, num_threads=2)
    text = kern.llvm_ir_unoptimized
    omp = [line for line in text.splitlines() if line.startswith("define") and "_omp" in line]
    assert len(omp) == 1
    assert text.count("atomicrmw add") == 1
    assert "omp_get_thread_num" not in text  # no static share by thread number


def test_the_product_driver_takes_its_blocks_from_the_shared_counter():
    target = host_target()
    core = gemmlib.piece_ir("float32", 4, 2 * target.lanes("float32"), "core", target)
    assert core.count("atomicrmw add") == 2  # the first chunk, and each next one


def test_libgomp_runtime_shares_loops_and_products(torch_libgomp):
    script = (
        torch_libgomp
        + "import numpy as np, tensorad as ta\n"
        "from tensorad.codegen.runtime.threads import parallel_runtime\n"
        "assert 'libgomp' in parallel_runtime()\n"
        "A = ta.placeholder((5, 11, 19), name='A'); B = ta.placeholder((19, 29), name='B')\n"
        "r = ta.reduce_axis((0, 19), name='r')\n"
        "C = ta.compute((5, 11, 29), lambda b, i, j: ta.sum(A[b, i, r] * B[r, j], axis=r), name='C')\n"
        "D = ta.compute((5, 11, 29), lambda b, i, j: C[b, i, j] * 2.0, name='D')\n"
        "rng = np.random.default_rng(3)\n"
        "a = rng.standard_normal((5, 11, 19)).astype('float32')\n"
        "b = rng.standard_normal((19, 29)).astype('float32')\n"
        "k = ta.build([C, D], [A, B], parallel_min_work=0, microkernel=True, num_threads=3)\n"
        "c, d = k(a, b)\n"
        "np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)\n"
        "np.testing.assert_array_equal(d, c * 2)\n"
        "print('gomp ok')\n")
    env = dict(os.environ, TENSORAD_PARALLEL_RUNTIME="gomp")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "gomp ok" in out.stdout


def test_scatter_columns_shared_at_any_thread_count(rng):
    # a gather's gradient: each thread scans every row and adds into its own chunk of columns
    # (one chunk per thread: the scan is not repeated per chunk); the adds keep the row order
    E = ta.placeholder((30, 203), name="E")
    Ix = ta.placeholder((97,), "int32", name="I")
    Y = ta.compute((97, 203), lambda i, j: E[Ix[i], j], name="Y")
    H = ta.placeholder((97, 203), name="H")
    (dE,) = ta.JacobianRecursive(Y, [E], H)
    kern = ta.build([dE], [Ix, H], parallel_min_work=0)
    assert "shared among threads" in str(kern.lowered)
    idx = rng.integers(0, 30, 97).astype(np.int32)
    h = rng.standard_normal((97, 203)).astype(np.float32)
    want = np.zeros((30, 203), np.float32)
    np.add.at(want, idx, h)
    for t in THREADS:
        kern.num_threads = t
        np.testing.assert_array_equal(kern(idx, h), want)
