"""A kernel's compiled code lives as long as something refers to it (codegen/jit/engine.py's
``link_object``, codegen/runtime/compiled_cache.py).

Each kernel's object code is linked into an LLVM engine of its own, owned by its ``Compiled``;
the process's cache holds the kernels alive weakly and a few recent ones strongly.  So a
process that builds, calls and drops kernels without end keeps flat memory and memory
mappings (code kept mapped would cost two mappings and about 23 KiB a kernel, and the
system's limit on mappings would stop ``build`` after some 30,000).  Each cycle builds a
different program (a constant changes), so no cache can hide a leak.

What compiling leaves in native memory is counted too, exactly, by malloc's own statistics:
a distinct program compiled in this process keeps nothing in LLVM (each module has an LLVM
context of its own), and an AST isl builds under an operations budget keeps no isl context.
What remains per program is islpy's: its wrappers leak a few bytes for each object an isl
function consumes and each string isl prints (about 2 KiB a lowering of these programs).
"""

from __future__ import annotations

import ctypes
import gc
import os
import pickle
import sys

import islpy as isl
import numpy as np
import pytest
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.llvm.emit import ModuleEmitter
from tensorad.codegen.loops import isl_ast
from tensorad.codegen.runtime import compiled_cache
from tensorad.codegen.runtime.compiled_cache import RECENT, CompiledCache

import tensorad as ta

BUILD = sys.modules["tensorad.codegen.build"]  # (``tensorad.codegen.build`` is the function)

needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/maps"),
                                reason="reads /proc/self/statm and /proc/self/maps (Linux)")

SOAK_CYCLES = 250
# bytes a cycle may add: lowering keeps about 2 KiB, inside islpy (its wrappers leak 8 bytes, a
# 32-byte block, for each object an isl function consumes, and every string isl prints), code none;
# the growth is linear in the cycles (2.1-2.2 KiB each over 200 to 1000 of them), so 250 cycles
# tell a kernel's code kept (about 23 KiB and two mappings each) as surely as more would
RSS_PER_CYCLE = 6 * 1024
MAPS_GROWTH = 64  # mappings the whole soak may add (the allocator's arenas; code adds none)


def live_kernels() -> int:
    """The number of kernels' code linked by ``link_object`` and not freed yet."""
    return len(jit.state().linked)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo2():
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


needs_malloc_stats = pytest.mark.skipif(_mallinfo2() is None, reason="reads glibc's mallinfo2 (glibc 2.33+)")


def _heap() -> int:
    """Bytes malloc has handed out and not had back, in every arena: native memory, exact to
    the block, where RSS hides growth in the holes a warm-up left and the pages it rounds to."""
    info = _mallinfo2()()
    return info.uordblks + info.hblkhd


def _maps() -> int:
    with open("/proc/self/maps", "rb") as f:
        return sum(1 for _ in f)


def _program(X, n: int):
    """A distinct program for each ``n``: ``X * (1 + n/1024) + 1``."""
    return ta.compute((16,), lambda i: X[i] * (1 + n / 1024) + 1, name="Y")


def _build(X, n: int) -> ta.Kernel:
    return ta.build([_program(X, n)], [X], cache=False, opt_level=0)


def _expect(x: np.ndarray, n: int) -> np.ndarray:
    return x * np.float32(1 + n / 1024) + np.float32(1)


@pytest.mark.slow
@needs_proc
def test_build_call_drop_keeps_memory_and_mappings_flat():
    X = ta.placeholder((16,), "float32", "X")
    x = np.arange(16, dtype=np.float32)

    def cycle(n: int) -> None:
        kernel = _build(X, n)
        np.testing.assert_allclose(kernel(x), _expect(x, n), rtol=1e-6)
        del kernel

    for n in range(-1, -2 * RECENT - 40, -1):  # (the cache's recent entries, the allocator's pools)
        cycle(n)
    gc.collect()
    rss, maps = _rss(), _maps()
    for n in range(SOAK_CYCLES):
        cycle(n)
        if n % 125 == 124:
            gc.collect()
    gc.collect()
    grew_rss, grew_maps = _rss() - rss, _maps() - maps
    assert grew_maps < MAPS_GROWTH, f"{grew_maps} mappings more after {SOAK_CYCLES} kernels built and dropped"
    assert grew_rss < RSS_PER_CYCLE * SOAK_CYCLES, (
        f"RSS grew {grew_rss / 1024:.0f} KiB over {SOAK_CYCLES} kernels built and dropped "
        f"({grew_rss / SOAK_CYCLES:.0f} bytes each)")
    assert live_kernels() <= RECENT + 8  # (the cache's recent entries, kernels of other tests)


def _module_text(n: int) -> str:
    """The LLVM IR of a distinct program for each ``n``: its own length and two constants."""
    X = ta.placeholder((n + 1,), "float32", "X")
    Y = ta.compute((n + 1,), lambda i: X[i] * (1 + n / 1024) + (3 - n / 512), name="Y")
    return str(ModuleEmitter(ta.lower([Y], [X]).program, "p", use_gomp=False).emit())


@needs_malloc_stats
def test_distinct_programs_compiled_in_process_keep_native_memory_flat():
    """Code compiled in this process (``opt_level=0``, the library's pieces, ``asm`` and
    ``llvm_ir`` on demand) leaves no LLVM state behind.  LLVM uniques every constant, type and
    metadata node in the context a module is parsed into, and frees them only with the context:
    parsed into LLVM's global context, which lives as long as the process, every distinct
    program compiled kept its constants and types there (about 0.8 KiB each for these), however
    long ago its module and code were freed.  Each module is parsed into a context of its own."""
    texts = [_module_text(n) for n in range(400)]  # (made before: lowering's islpy blocks stay out)
    for text in texts[:100]:  # (the target machine's, the allocator's and LLVM's own one-time state)
        jit.compile_object(text, 0)
    gc.collect()
    heap = _heap()
    for text in texts[100:]:
        jit.compile_object(text, 0)
    gc.collect()
    grew = _heap() - heap
    assert grew < 300 * 256, f"malloc's heap grew {grew / 300:.0f} bytes a program compiled"


@needs_malloc_stats
def test_asts_built_under_an_operations_budget_keep_no_isl_context_each():
    """isl's AST builder runs under an operations budget in an isl context that is not the
    shared one (a stop must not reach other threads' isl calls there).  islpy frees a context
    only when its count of users falls to zero, and every isl function that consumes an object
    raises that count for good, so a context made for one AST was never freed: about 8 KiB per
    AST built of a domain with divisions, for the life of the process.  Each thread has one
    such context, reused."""
    maps = [isl.UnionMap(f"{{ S0[i, j] -> [i, floor(j / 2), j] : 0 <= i < {n + 2} and 0 <= j < 13 "
                         "and (i + j) mod 3 = 0 }") for n in range(350)]
    for umap in maps[:50]:
        isl_ast._ast(umap, isl_ast.AST_OPERATIONS)
    gc.collect()
    heap = _heap()
    for umap in maps[50:]:
        assert isl_ast._ast(umap, isl_ast.AST_OPERATIONS) is not None
    gc.collect()
    grew = _heap() - heap
    assert grew < 300 * 1024, f"malloc's heap grew {grew / 300:.0f} bytes an AST built under a budget"


@needs_proc
def test_kernels_optimized_at_o1_keep_memory_flat():
    """``opt_level=1`` optimizes in a child process as the higher levels do: llvmlite's optimizer
    keeps tens of KiB of every module it optimizes, which an in-process ``-O1`` added to the
    process for each kernel built."""
    X = ta.placeholder((16,), "float32", "X")
    x = np.arange(16, dtype=np.float32)

    def cycle(n: int) -> None:
        kernel = ta.build([_program(X, n)], [X], cache=False, opt_level=1)
        np.testing.assert_allclose(kernel(x), _expect(x, n), rtol=1e-6)

    for n in range(-1, -2 * RECENT - 20, -1):
        cycle(n)
    gc.collect()
    rss = _rss()
    for n in range(150):
        cycle(n)
    gc.collect()
    grew = _rss() - rss
    assert grew < 150 * 10 * 1024, f"RSS grew {grew / 150 / 1024:.1f} KiB a kernel at opt_level=1"


@pytest.mark.slow
@needs_proc
def test_a_bounded_set_of_live_kernels_stays_bounded_and_keeps_working():
    """A long run that keeps the last ``alive`` kernels: their code stays, the rest goes."""
    X = ta.placeholder((16,), "float32", "X")
    x = np.arange(16, dtype=np.float32)
    alive, cycles = 40, 200  # (128 kernels dropped after the first 72: 256 mappings, were they kept)
    kept: list[tuple[int, ta.Kernel] | None] = [None] * alive
    for n in range(alive + RECENT):
        kept[n % alive] = (n, _build(X, 10_000 + n))
    gc.collect()
    maps, live = _maps(), live_kernels()
    for n in range(alive + RECENT, cycles):
        kept[n % alive] = (n, _build(X, 10_000 + n))
        if n % 100 == 99:
            gc.collect()
    gc.collect()
    assert live_kernels() <= live + 4
    assert _maps() - maps < MAPS_GROWTH
    for entry in kept:  # every survivor runs its own code after hundreds of others were freed
        n, kernel = entry
        np.testing.assert_allclose(kernel(x), _expect(x, 10_000 + n), rtol=1e-6)


def test_kernels_of_one_program_share_code_that_leaves_with_the_last(monkeypatch):
    monkeypatch.setattr(compiled_cache, "COMPILED", CompiledCache(recent=0))  # (only live kernels hold code)
    X = ta.placeholder((16,), "float32", "X")
    x = np.ones(16, np.float32)
    gc.collect()
    first, second = _build(X, 20_001), _build(X, 20_001)
    assert first.compiled is second.compiled
    live = live_kernels()
    del first
    gc.collect()
    assert live_kernels() == live and len(compiled_cache.COMPILED) == 1
    np.testing.assert_allclose(second(x), _expect(x, 20_001), rtol=1e-6)
    del second
    gc.collect()
    assert live_kernels() == live - 1 and len(compiled_cache.COMPILED) == 0
    np.testing.assert_allclose(_build(X, 20_001)(x), _expect(x, 20_001), rtol=1e-6)  # linked anew


def test_a_live_kernel_pickles_after_its_cache_entry_and_other_kernels_are_gone(monkeypatch):
    monkeypatch.setattr(compiled_cache, "COMPILED", CompiledCache(recent=2))
    X = ta.placeholder((16,), "float32", "X")
    x = np.arange(16, dtype=np.float32)
    kernel = _build(X, 30_000)
    for n in range(30_001, 30_020):  # (evicts nothing alive: the kernel holds its code)
        _build(X, n)(x)
    gc.collect()
    compiled_cache.COMPILED.clear()  # (the unpickled copy cannot find it: it links the object code again)
    copy = pickle.loads(pickle.dumps(kernel))
    assert copy.compiled is not kernel.compiled
    del kernel
    gc.collect()
    np.testing.assert_allclose(copy(x), _expect(x, 30_000), rtol=1e-6)


def test_library_code_stays_for_kernels_built_later():
    """The matrix-product library's pieces are linked once for the process: a product kernel
    dropped and another built after it still call them (from an engine of their own)."""
    A = ta.placeholder((24, 32), "float32", "A")
    B = ta.placeholder((32, 40), "float32", "B")
    k = ta.reduce_axis((0, 32), "k")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((24, 32), np.float32), rng.standard_normal((32, 40), np.float32)

    def product(scale: float):
        return ta.compute((24, 40), lambda i, j: ta.sum(A[i, k] * B[k, j], axis=k) * scale, name="C")

    for scale in (1.0, 2.0, 3.0):
        kernel = ta.build([product(scale)], [A, B], cache=False, microkernel=True)
        assert kernel.compiled.library  # (it calls the library's pieces)
        np.testing.assert_allclose(kernel(a, b), (a @ b) * scale, rtol=1e-4, atol=1e-4)
        del kernel
        gc.collect()


class _Entry:  # (a stand-in for Compiled: anything weakly referable)
    pass


def test_the_cache_holds_live_entries_weakly_and_a_few_recent_strongly():
    cache = CompiledCache(recent=2)
    live = _Entry()
    cache.put("live", live)
    for key in ("a", "b", "c"):
        cache.put(key, _Entry())
    gc.collect()
    assert "live" in cache and cache.get("live") is live  # (a kernel holds it)
    assert "a" not in cache and "b" not in cache  # (neither held nor among the 2 recent: gone)
    assert cache.get("c") is not None
    assert len(cache) == 2  # "live" (now the most recent) and "c"
    del live
    cache.put("d", _Entry())
    cache.put("e", _Entry())
    gc.collect()
    assert "live" not in cache and len(cache) == 2
    with pytest.raises(ValueError, match="recent"):
        CompiledCache(recent=-1)
