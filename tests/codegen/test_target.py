"""The target description (codegen/target.py) and what reads it: parsing, the register tile,
per-target builds and caches, AVX-512 code compiled on any machine, the default thread count."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from tensorad.codegen.gemm.contraction import register_tile
from tensorad.codegen.target import DEFAULT_CACHES, default_num_threads, host_target, parse_target

import tensorad as ta

AVX2 = "llvm -mcpu=haswell"
AVX512 = "llvm -mcpu=skylake-avx512"


@pytest.mark.parametrize("spec, bits, regs, fma", [
    (AVX2, 256, 16, True),
    (AVX512, 512, 32, True),
    (AVX512 + " -mattr=-avx512f", 256, 16, True),
    ("llvm -mcpu=x86-64", 128, 16, False),
    ("llvm  -mcpu=haswell  -mattr=-fma", 256, 16, False),
])
def test_named_targets_are_probed_from_llvm(spec, bits, regs, fma):
    t = parse_target(spec)
    assert (t.vector_bits, t.vector_registers, t.fma) == (bits, regs, fma)
    assert t.lanes("float32") == bits // 32 and t.lanes("float64") == bits // 64
    assert parse_target(spec) is t  # made once per process


def test_host_target_is_the_default():
    h = host_target()
    assert parse_target("llvm") is h and parse_target(None) is h and h.is_host
    assert h.runs_here(h)
    assert h.vector_bits in (128, 256, 512) and h.l1d > 0 and h.l2 > 0


@pytest.mark.parametrize("spec", ["llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512", "llvm -mattr=-avx512f"])
def test_code_that_runs_here_is_blocked_for_this_machines_caches(spec):
    # an AVX2 target on an AVX-512 host, or a named CPU on another vendor's host, runs with the
    # host's caches; a CPU whose code cannot run here gets typical sizes.  The caches key the
    # kernel caches: the blocking depends on them
    host, t = host_target(), parse_target(spec)
    want = (host.l1d, host.l2, host.l3) if t.runs_here(host) else DEFAULT_CACHES
    assert (t.l1d, t.l2, t.l3) == want
    assert (t.line, t.page) == ((host.line, host.page) if t.runs_here(host) else (64, 4096))
    assert dataclasses.replace(t, l2=t.l2 // 2).key != t.key


@pytest.mark.parametrize("spec, words", [
    ("cuda", "unsupported target 'cuda'"),
    ("llvm -mcpu=notacpu", "'notacpu' is not a recognized processor"),
    ("llvm -mattr=+notafeature", "'+notafeature' is not a recognized feature"),
    ("llvm -mattr=avx2", "must be +name or -name"),
    ("llvm -mcpu", "needs a value"),
    ("llvm -keys=cpu", "unknown option '-keys'"),
    ("llvm -mcpu=haswell -mcpu=znver3", "-mcpu is given twice"),
    ("", "unsupported target ''"),
])
def test_bad_target_strings_are_clear_errors(spec, words):
    with pytest.raises(ValueError, match=words.replace("+", r"\+")):
        parse_target(spec)
    X = ta.placeholder((4,), name="X")
    Y = ta.compute((4,), lambda i: X[i] + 1.0, name="Y")
    with pytest.raises(ValueError, match=words.replace("+", r"\+")):
        ta.build([Y], [X], target=spec)


@pytest.mark.parametrize("spec", [AVX2, AVX512, "llvm -mcpu=x86-64", "llvm", "llvm -mcpu=sandybridge"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_register_tile_fits_the_registers(spec, dtype):
    # accumulators, B's vectors, A's broadcast and, without FMA, the product before its add
    t = parse_target(spec)
    mr, nr = register_tile(t, dtype)
    nv = nr // t.lanes(dtype)
    assert nr % t.lanes(dtype) == 0 and mr * nv + nv + 1 + (not t.fma) <= t.vector_registers


def test_tiles_follow_the_target():
    assert register_tile(parse_target(AVX2), "float32") == (4, 24)
    assert register_tile(parse_target(AVX512), "float32") == (8, 48)
    assert register_tile(parse_target(AVX2 + " -mattr=-fma"), "float32") == (6, 16)
    A = ta.placeholder((200, 300), name="A")
    B = ta.placeholder((300, 240), name="B")  # whole panels of 24 and 48: the default tile
    k = ta.reduce_axis((0, 300), "k")
    C = ta.compute((200, 240), lambda i, j: ta.sum(A[i, k] * B[k, j], axis=k), name="C")
    assert "packed 4x24 vector micro-kernel" in str(ta.lower([C], [A, B], target=AVX2))
    assert "packed 8x48 vector micro-kernel" in str(ta.lower([C], [A, B], target=AVX512))
    with pytest.raises(ValueError, match="NR must be a multiple of 8"):
        ta.lower([C], [A, B], target=AVX2, tile=(4, 12, 64, 64))


def _products():
    A = ta.placeholder((70, 90), name="A")
    B = ta.placeholder((90, 130), name="B")
    k = ta.reduce_axis((0, 90), "k")
    C = ta.compute((70, 130), lambda i, j: ta.sum(A[i, k] * B[k, j], axis=k), name="C")
    E = ta.compute((70, 130), lambda i, j: ta.exp(C[i, j] * 0.1), name="E")
    return [E], [A, B]


def test_two_targets_in_one_process_have_their_own_code():
    outs, ins = _products()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((70, 90), np.float32), rng.standard_normal((90, 130), np.float32)
    want = np.exp((a.astype(np.float64) @ b) * 0.1)
    kernels = {}
    for spec in (AVX2, "llvm -mcpu=x86-64", "llvm"):
        kern = ta.build(outs, ins, target=spec, microkernel=True)
        kernels[spec] = kern
        if parse_target(spec).runs_here(host_target()):
            np.testing.assert_allclose(kern(a, b), want, rtol=2e-5)
    assert kernels[AVX2].compiled is not kernels["llvm -mcpu=x86-64"].compiled
    assert "ymm" in kernels[AVX2].asm and "ymm" not in kernels["llvm -mcpu=x86-64"].asm


def test_avx512_code_compiles_anywhere_and_runs_only_where_it_can():
    X = ta.placeholder((1000,), name="X")
    Y = ta.compute((1000,), lambda i: ta.exp(X[i]), name="Y")
    kern = ta.build([Y], [X], target=AVX512)
    assert "zmm" in kern.asm
    outs, ins = _products()  # the matrix-product library is compiled for the target too
    product = ta.build(outs, ins, target=AVX512, microkernel=True)
    assert "8x48" in str(product.lowered)
    x = np.linspace(-5, 5, 1000, dtype=np.float32)
    if parse_target(AVX512).runs_here(host_target()):
        np.testing.assert_allclose(kern(x), np.exp(x), rtol=1e-6)
    else:
        with pytest.raises(RuntimeError, match="cannot run on this CPU"):
            kern(x)
        with pytest.raises(RuntimeError, match="cannot run on this CPU"):
            product(np.zeros((70, 90), np.float32), np.zeros((90, 130), np.float32))


def test_default_threads_follow_omp_num_threads_then_the_affinity(monkeypatch):
    X = ta.placeholder((8,), name="X")
    Y = ta.compute((8,), lambda i: X[i] * 2.0, name="Y")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert default_num_threads() == 3
    assert ta.build([Y], [X]).num_threads in (1, 3)  # (1 only without a parallel runtime)
    monkeypatch.setenv("OMP_NUM_THREADS", "5,2")  # nested levels: the first counts
    assert default_num_threads() == 5
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert default_num_threads() == len(os.sched_getaffinity(0))
    assert ta.build([Y], [X], num_threads=2).num_threads in (1, 2)


def _wide_target():
    """AVX-512's shape (16 floats per vector, 32 registers) with AVX2 instructions: LLVM splits
    each 512-bit vector in two, so the code runs on any AVX2 machine and exercises the tiles
    and packers an AVX-512 CPU gets (8 x 48 float32, 8 x 24 float64)."""
    return dataclasses.replace(parse_target(AVX2), spec="llvm (AVX-512 shape on AVX2)", vector_bits=512,
                               vector_registers=32)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_avx512_shaped_tiles_compute_the_right_products(dtype):
    if not parse_target(AVX2).runs_here(host_target()):
        pytest.skip("needs an AVX2 machine")
    wide = _wide_target()
    rng = np.random.default_rng(3)
    A = ta.placeholder((37, 53), dtype, "A")
    B = ta.placeholder((53, 95), dtype, "B")  # (95 columns: the widest tile is the cheapest)
    W = ta.placeholder((95, 53), dtype, "W")
    k = ta.reduce_axis((0, 53), "k")
    C = ta.compute((37, 95), lambda i, j: ta.sum(A[i, k] * B[k, j], axis=k), name="C")  # copy packing
    D = ta.compute((37, 95), lambda i, j: ta.sum(A[i, k] * W[j, k], axis=k), name="D")  # transposes
    X = ta.placeholder((2, 3, 9, 9), dtype, "X")
    F = ta.placeholder((20, 3, 3, 3), dtype, "F")
    Y = ta.topi.nn.conv2d(X, F, 1, 1)  # padded windows
    a, b, w = (rng.standard_normal(s).astype(dtype) for s in ((37, 53), (53, 95), (95, 53)))
    x, f = rng.standard_normal((2, 3, 9, 9)).astype(dtype), rng.standard_normal((20, 3, 3, 3)).astype(dtype)
    tol = 1e-4 if dtype == "float32" else 1e-12
    for outs, ins, feed in (([C, D], [A, B, W], (a, b, w)), ([Y], [X, F], (x, f))):
        kern = ta.build(outs, ins, target=wide, microkernel=True, parallel_min_work=0)
        mr, nr = register_tile(wide, dtype)
        assert f"packed {mr}x{nr}" in str(kern.lowered) and nr == 3 * wide.lanes(dtype)
        kern._refuse = None  # (it runs: LLVM legalized the wide vectors for AVX2)
        want = ta.evaluate(outs, dict(zip(ins, (v.astype(np.float64) for v in feed))))
        for threads in (1, 2):
            kern.num_threads = threads
            got = kern(*feed)
            for g, wv in zip(got if isinstance(got, tuple) else (got,), want):
                np.testing.assert_allclose(g, wv, rtol=tol, atol=tol)


@pytest.mark.parametrize("cpu", ["emeraldrapids", "skylake-avx512"])
def test_strided_reads_are_loads_and_shuffles_not_gathers(cpu):
    """A max pool's stride-2 reads: LLVM's AVX-512 cost model takes gathers, which ran 4.3x
    slower (Emerald Rapids, forward of max pool 3x3/2 over 8x64x56x56); x86 targets prefer no
    gathers or scatters unless the spec asks (``-mattr=-prefer-no-gather``)."""
    X = ta.placeholder((2, 4, 56, 56), "float32", "X")
    Y = ta.topi.nn.pool(X, [3, 3], [2, 2], [1, 1, 1, 1], "max")
    asm = ta.build([Y], [X], target=f"llvm -mcpu={cpu}", num_threads=1).asm
    assert "gather" not in asm and "zmm" in asm
    asked = ta.build([Y], [X], target=f"llvm -mcpu={cpu} -mattr=-prefer-no-gather", num_threads=1).asm
    assert "vgatherdps" in asked  # the spec's own choice is kept


def test_gather_preference_is_a_feature_of_x86_targets_only_where_not_named():
    assert parse_target(AVX2).features.endswith("+prefer-no-gather,+prefer-no-scatter")
    t = parse_target("llvm -mattr=-prefer-no-gather")
    assert "-prefer-no-gather" in t.features and "+prefer-no-gather" not in t.features
    assert "+prefer-no-scatter" in t.features and t.key != host_target().key
