"""The LLVM pipeline of a kernel module: ``-O3``, but ``-O2`` for a matrix product's nest (its
driver and packing).  A module compiled at ``-O2`` unless a nest matched a rule runs the next
kind of nest 2x slower; a bisection of the passes (``tools/opt_compare.py``) finds two things of
``-O3`` that kernels need, its full-unroll threshold (a max pool's window and tie loops) and
non-trivial loop unswitching (a global max pool's backward, bilinear upsampling's gradient), and
with both ``-O2`` compiles as slowly.  The object code that runs is compared with ``-O3``'s and
``-O2``'s, never timed; the oracles are NumPy formulas written here."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.jit import module_split as modsplit
from tensorad.codegen.jit import object_check as objcheck
from tensorad.codegen.llvm import emit
from tensorad.codegen.runtime import compiled_cache
from tensorad.codegen.runtime.compiled_cache import CompiledCache

import tensorad as ta
from tensorad import topi


def _lines(ir: str) -> int:
    return sum(1 for line in ir.split("\n") if line.startswith("  ") and not line.startswith("  ;"))


def _row_select():
    """A 28-trip row loop that -O3's threshold unrolls and -O2's does not (a relu's gradient
    summing two neighbours of its head: a stencil, which stays unrollable -- a pointwise row is
    one vector loop kept from the unroller at any level, codegen/llvm/masked_tails.py)."""
    C = ta.placeholder((64, 28), "float32", name="C")
    H = ta.placeholder((64, 29), "float32", name="H")
    Y = ta.compute((64, 29), lambda i, j: ta.if_then_else(
        j < 28, ta.select(C[i, j] <= 0.0, 0.0, H[i, j] + H[i, j + 1]), 0.0), name="Y")
    k = ta.build([Y], [C, H], num_threads=1, target="llvm -mcpu=haswell")
    rng = np.random.default_rng(0)
    c, h = rng.standard_normal((64, 28), dtype=np.float32), rng.standard_normal((64, 29), dtype=np.float32)
    want = np.zeros((64, 29), np.float32)
    want[:, :28] = np.where(c <= 0, 0, h[:, :28] + h[:, 1:])
    np.testing.assert_array_equal(k(c, h), want)
    return k


def _max_pool_backward():
    """A max pool's backward reading its saved winners (``ta.function``): the scatter of each
    window's head and, for tied windows, a 9-trip loop over the window -- a module that a
    rule for nests would compile at ``-O2``, where it runs 2x slower than at ``-O3``."""
    X = ta.placeholder((2, 4, 16, 16), "float32", name="X")
    f = ta.function(topi.nn.pool(X, (3, 3), (2, 2), (1, 1), "max"), [X], num_threads=1)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 16, 16), dtype=np.float32)
    h = rng.standard_normal((2, 4, 8, 8), dtype=np.float32)
    y, res = f.forward(x)
    (dx,) = f.backward(res, h)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    windows = np.stack([padded[:, :, dy:dy + 15:2, dx_:dx_ + 15:2] for dy in range(3) for dx_ in range(3)])
    np.testing.assert_array_equal(y, windows.max(axis=0))
    want = np.zeros_like(padded)
    first = windows.argmax(axis=0)  # (no ties in normal data: the one winner)
    for t in range(9):
        dy, dx_ = divmod(t, 3)
        want[:, :, dy:dy + 15:2, dx_:dx_ + 15:2] += np.where(first == t, h, 0)
    np.testing.assert_allclose(dx, want[:, :, 1:-1, 1:-1], rtol=1e-6, atol=1e-6)
    return f.backward_kernel


def _global_max_backward():
    """A global max pool's backward reading its saved winners: -O3's unswitching of its loops
    made it 1.5-1.9x faster than -O2 with -O3's threshold."""
    X = ta.placeholder((4, 8, 6, 6), "float32", name="X")
    f = ta.function(topi.max(X, axis=(2, 3)), [X], num_threads=1)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 8, 6, 6), dtype=np.float32)
    h = rng.standard_normal((4, 8), dtype=np.float32)
    y, res = f.forward(x)
    (dx,) = f.backward(res, h)
    np.testing.assert_array_equal(y, x.max(axis=(2, 3)))
    flat = x.reshape(4, 8, 36)
    want = np.zeros_like(flat)
    np.put_along_axis(want, flat.argmax(axis=2)[..., None], h[..., None], axis=2)
    np.testing.assert_array_equal(dx, want.reshape(x.shape))
    return f.backward_kernel


@pytest.mark.parametrize("make", [_row_select, _max_pool_backward, _global_max_backward],
                         ids=["row_select", "max_pool_backward", "global_max_backward"])
def test_kernels_run_O3_code(make):
    """The object code a kernel runs is -O3's, where -O2's differs: no nest is sent to a
    pipeline that drops what -O3 gives it."""
    c = make().compiled
    text = c.llvm_ir_unoptimized
    assert _lines(jit.optimized_ir(text, 2, c.target)) != _lines(jit.optimized_ir(text, 3, c.target))
    parts, units = modsplit.split(text, 3)
    assert modsplit.unbundle(c.obj) == [jit.compile_object(t, 3, c.target) for t, _ in parts + units]
    assert modsplit.unbundle(c.obj) != [jit.compile_object(t, 2, c.target) for t, _ in parts + units]



def _dense_relu_gradient(monkeypatch) -> tuple:
    """A dense relu layer's gradient built in parts of one line or more, and its tensors."""
    monkeypatch.setattr(modsplit, "MIN_PART_LINES", 1)
    monkeypatch.setattr(compiled_cache, "COMPILED", CompiledCache())
    X = ta.placeholder((32, 48), "float32", name="X")
    W = ta.placeholder((48, 40), "float32", name="W")
    H = ta.placeholder((32, 40), "float32", name="H")
    grads = list(ta.JacobianRecursive(topi.nn.relu(topi.matmul(X, W)), [X, W], H))
    return ta.build(grads, [X, W, H], num_threads=1, cache=False, microkernel=True), (X, W, H)


def test_a_matrix_products_nest_runs_O2_code_and_the_kernel_computes_right(monkeypatch):
    """A matrix product's nest -- its driver and the packing of its sides, the arithmetic being the
    library's micro-kernel -- is compiled at -O2 in a part of its own, the rest of the module at
    -O3; the kernel (a dense relu layer's weight gradient, whose packing computes the masked head)
    gives NumPy's result."""
    k, (X, W, H) = _dense_relu_gradient(monkeypatch)
    c = k.compiled
    parts, units = modsplit.split(c.llvm_ir_unoptimized, c.opt_level)
    assert sorted({level for _, level in parts + units}) == [2, 3]
    assert modsplit.unbundle(c.obj) == [jit.compile_object(t, level, c.target) for t, level in parts + units]
    rng = np.random.default_rng(2)
    x, w, h = (rng.standard_normal(t.shape).astype(np.float32) for t in (X, W, H))
    masked = np.where(x.astype(np.float64) @ w > 0, h, 0)
    dx, dw = k(x, w, h)
    np.testing.assert_allclose(dx, masked @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, x.T @ masked, rtol=1e-4, atol=1e-4)


def test_the_optimized_ir_an_export_and_a_recompiled_pickle_use_each_part_s_level(monkeypatch):
    """``kernel.llvm_ir``, an exported library's objects and a pickled kernel compiled again on
    another machine (here: a state whose fingerprint is another's) hold the code the build ran: the
    matrix product's nest at -O2, the rest at -O3."""
    k, (X, W, H) = _dense_relu_gradient(monkeypatch)
    c = k.compiled
    parts = sum(modsplit.split(c.llvm_ir_unoptimized, c.opt_level), [])
    assert sorted({level for _, level in parts}) == [2, 3]
    assert k.llvm_ir == "\n".join(jit.optimized_ir(t, level, c.target) for t, level in parts)
    shared = jit.compile_shared_objects(parts, c.target)
    assert all(objcheck.object_is_sound(o) for o in shared)
    assert shared != jit.compile_shared_objects([(c.llvm_ir_unoptimized, 3)], c.target)
    restored, (state,) = k.__reduce__()
    monkeypatch.setattr(compiled_cache, "COMPILED", CompiledCache())
    again = restored({**state, "target": "another machine"})
    assert again.compiled.obj == c.obj
    rng = np.random.default_rng(3)
    x, w, h = (rng.standard_normal(t.shape).astype(np.float32) for t in (X, W, H))
    masked = np.where(x.astype(np.float64) @ w > 0, h, 0)
    dx, dw = again(x, w, h)
    np.testing.assert_allclose(dx, masked @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, x.T @ masked, rtol=1e-4, atol=1e-4)


def _levels_asked(text: str) -> dict[str, int]:
    """Each nest function's name (its step's) and the level it asks for (3: none asked)."""
    out = {}
    for m in re.finditer(r'^define void @"\w+?_(nest\d+)"\(.*$', text, re.M):
        asked = re.search(r'"tensorad-opt-level"="(\d)"', m.group(0))
        out[m.group(1)] = int(asked.group(1)) if asked else 3
    return out


@pytest.mark.parametrize("share", [128, 256])
def test_a_nest_function_doing_a_small_share_of_the_work_compiles_at_O2(monkeypatch, share):
    """A nest function whose nests do at most ``1/MINOR_SHARE`` of the plain nests' work is compiled
    at -O2 (a convolution's weight gradient beside its Winograd transforms: -O3 spent 3x -O2's time on
    it); the share counts every nest calling the function (three identical 8-point steps, 24 of 4120
    points: one function, minor at 1/128 and not at 1/256, though each step alone is); the kernel gives
    NumPy's answer."""
    monkeypatch.setattr(emit, "MINOR_SHARE", share)
    monkeypatch.setattr(modsplit, "MIN_PART_LINES", 1)
    monkeypatch.setattr(compiled_cache, "COMPILED", CompiledCache())
    X = ta.placeholder((64, 64), "float32", name="X")
    A = ta.placeholder((8,), "float32", name="A")
    Y = ta.compute((64, 64), lambda i, j: X[i, j] * 2.0 + 1.0, name="Y")
    B1 = ta.compute((8,), lambda i: A[i] * 3.0, name="B1")
    B2 = ta.compute((8,), lambda i: B1[i] * 3.0, name="B2")
    B3 = ta.compute((8,), lambda i: B2[i] * 3.0, name="B3")
    k = ta.build([Y, B3], [X, A], cache=False, num_threads=1, fuse=False, materialize=[B1, B2])
    c = k.compiled
    assert _levels_asked(c.llvm_ir_unoptimized) == {"nest0": 3, "nest1": 2 if share == 128 else 3}
    parts = sum(modsplit.split(c.llvm_ir_unoptimized, c.opt_level), [])
    assert sorted({level for _, level in parts}) == ([2, 3] if share == 128 else [3])
    rng = np.random.default_rng(4)
    x, a = rng.standard_normal((64, 64), dtype=np.float32), rng.standard_normal(8, dtype=np.float32)
    y, b3 = k(x, a)
    np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(b3, a * 27, rtol=1e-6)
