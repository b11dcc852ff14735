"""A kernel's module compiled in parts side by side (codegen/jit/module_split.py): each part is a
module LLVM accepts, every function is defined in exactly one part (its internal helpers
copied where called), a nest alike in several kernels is one unit compiled once, the JIT links the
parts with calls across them, and the kernel computes
what ``ta.evaluate`` does -- for random programs cut at every nest, for the disk cache and for
pickling.  Malformed bundles are refused, not linked.  Identical internal functions of a
module are merged into one."""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import os
import pickle
import re
import shutil
import subprocess
import sys
import textwrap

import llvmlite.binding as llvm
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from strategies import random_feed, random_program
from tensorad.codegen import target
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.jit import module_split as modsplit
from tensorad.codegen.jit import object_check as objcheck
from tensorad.codegen.runtime import compiled_cache
from tensorad.codegen.runtime.compiled_cache import CompiledCache

import tensorad as ta

BUILD = sys.modules["tensorad.codegen.build"]  # (``tensorad.codegen.build`` is the function)

_DEFINED = re.compile(r'^define\s+(internal\s+|private\s+)?.*?@"([^"]+)"\(', re.M)


@contextlib.contextmanager
def _split_everything():
    """Every module cut at every nest, and the process's kernels set aside so that each build
    compiles (with ``cache=False``: not read from disk either)."""
    saved = modsplit.MIN_PART_LINES, compiled_cache.COMPILED
    modsplit.MIN_PART_LINES = 1
    compiled_cache.COMPILED = CompiledCache()
    try:
        yield
    finally:
        modsplit.MIN_PART_LINES, compiled_cache.COMPILED = saved


def _cut(text: str, opt_level: int = 3) -> list[tuple[str, int]]:
    """The modules :func:`modsplit.split` cuts ``text`` into: the rest's parts, then the units."""
    parts, units = modsplit.split(text, opt_level)
    return parts + units


def _program():
    X = ta.placeholder((6, 9), "float32", name="X")
    W = ta.placeholder((9, 5), "float32", name="W")
    k = ta.reduce_axis((0, 9), name="k")
    Y = ta.compute((6, 5), lambda i, j: ta.sum(X[i, k] * W[k, j], axis=k), name="Y")
    Z = ta.compute((6, 5), lambda i, j: ta.tanh(ta.maximum(Y[i, j], 0.0)) + ta.exp(-Y[i, j]), name="Z")
    H = ta.placeholder((6, 5), "float32", name="H")
    grads = list(ta.JacobianRecursive(Z, [X, W], H))
    return [X, W, H], [Z, *grads]


def test_each_part_is_a_module_and_every_function_is_defined_once():
    inputs, outputs = _program()
    text = ta.build(outputs, inputs).llvm_ir_unoptimized
    with _split_everything():
        parts = [p for p, _ in _cut(text)]
    assert len(parts) >= 3
    external = {name for local, name in _DEFINED.findall(text) if not local}
    assert len(external) >= 3
    seen: list[str] = []
    for p in parts:
        llvm.parse_assembly(p).verify()
        seen += [name for local, name in _DEFINED.findall(p) if not local]
    assert len(seen) == len(set(seen))  # (each external function in one part exactly)
    units = {n for n in seen if n.startswith("tensorad_fn_")}
    assert units and set(seen) - units <= external
    called = {n for p in parts for n in re.findall(r'^declare[^@]*@"([^"]+)"', p, re.M)}
    assert called & (external | units) <= set(seen)  # (what a part calls of another, another defines)


def test_a_small_module_stays_whole():
    X = ta.placeholder((6, 9), "float32", name="X")
    small = ta.build(ta.compute((6, 9), lambda i, j: X[i, j] + 1.0, name="Y"), [X]).llvm_ir_unoptimized
    assert modsplit.split(small) == ([(small, 3)], [])  # (under MIN_PART_LINES a part: not worth a child)


def test_a_module_with_a_shared_global_or_metadata_naming_a_function_stays_whole():
    text = textwrap.dedent("""
        define void @"a"(ptr %p) noinline nounwind {
          store i32 1, ptr %p
          ret void
        }
        define void @"b"(ptr %p) noinline nounwind {
          call void @"a"(ptr %p)
          ret void
        }
    """)
    with _split_everything():
        assert len(_cut(text)) == 2
        shared = text + '@"g" = global i32 0\n'
        assert modsplit.split(shared) == ([(shared, 3)], [])
        assert modsplit.split(text + '!0 = !{ptr @"a"}\n') == ([(text + '!0 = !{ptr @"a"}\n', 3)], [])


def test_a_module_calling_the_math_library_is_cut_and_each_part_keeps_the_vector_forms_it_calls():
    # (the vector forms are named only by their scalar function's attribute and kept by
    # ``llvm.compiler.used``: each part lists the ones it defines)
    X = ta.placeholder((64,), "float32", name="X")
    outs = [ta.compute((64,), lambda i, k=k: ta.tanh(X[i] * (k + 1.0)) + ta.sigmoid(X[i] - k)
                       + ta.tanh(X[i] + k) * ta.sigmoid(X[i] * k) + ta.tanh(X[i] - 2.0 * k), name=f"Y{k}")
            for k in range(4)]
    with _split_everything():
        kern = ta.build(outs, [X], cache=False)
        text = modsplit.merge_duplicates(kern.llvm_ir_unoptimized)
        parts = [p for p, _ in _cut(text)]
    assert "llvm.compiler.used" in text and len(parts) >= 2
    with_vectors = 0
    for part in parts:
        llvm.parse_assembly(part).verify()
        defined = {name for _, name in _DEFINED.findall(part)}
        named = set(re.findall(r'_ZGV[\w.]+\(([\w.]+)\)"', part))
        kept = re.findall(r'^@"llvm.compiler.used" = .*$', part, re.M)
        assert named <= defined
        assert set(re.findall(r'@"([\w.]+)"', kept[0].split("[", 2)[2]) if kept else ()) == named
        with_vectors += bool(named)
    assert with_vectors >= 2
    x = np.linspace(-3, 3, 64).astype(np.float32)
    for k, got in enumerate(kern(x)):
        s = 1 / (1 + np.exp(-(x.astype(np.float64) - k)))
        t = 1 / (1 + np.exp(-(x.astype(np.float64) * k)))
        want = np.tanh(x * (k + 1.0)) + s + np.tanh(x + k) * t + np.tanh(x - 2.0 * k)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


_LEVELS = textwrap.dedent("""
    define internal void @"helper"(ptr %p) noinline nounwind {
      store i32 1, ptr %p
      ret void
    }
    define void @"heavy"(ptr %p) noinline nounwind {
      call void @"helper"(ptr %p)
      ret void
    }
    define void @"light"(ptr %p) "tensorad-opt-level"="2" noinline nounwind {
      call void @"helper"(ptr %p)
      ret void
    }
    define void @"main"(ptr %p) noinline nounwind {
      call void @"heavy"(ptr %p)
      call void @"light"(ptr %p)
      ret void
    }
""")


def test_a_nest_asking_for_a_lower_level_is_a_unit_of_that_level():
    """A nest marked to be optimized at -O2 at most is a unit of its own at -O2, however light; the
    others' units and the rest at the level asked for the kernel, the helper copied where called."""
    parts, units = modsplit.split(_LEVELS)  # ("heavy" lighter than a part: in the rest)
    assert [level for _, level in parts + units] == [3, 2]
    defined = [{name for _, name in _DEFINED.findall(text)} for text, _ in parts + units]
    assert defined == [{"main", "heavy", "helper"}, {"helper", units[0][0][14:50]}]
    with _split_everything():
        parts, units = modsplit.split(_LEVELS)
        assert [level for _, level in parts + units] == [3, 3, 2]  # (the rest, "main"; "heavy"; "light")
        for text, _ in parts + units:
            llvm.parse_assembly(text).verify()
        assert [level for _, level in _cut(_LEVELS, 2)] == [2, 2, 2]  # (asking for -O2 of -O2)


def _pack(name: str, value: str, loop_md: int) -> str:
    """An internal loop storing ``value``, its loop metadata node ``!loop_md``."""
    return textwrap.dedent(f"""
    define internal void @"{name}"(ptr %p, i64 %n) nounwind {{
    entry:
      br label %"loop"
    loop:
      %i = phi i64 [0, %"entry"], [%j, %"loop"]
      %q = getelementptr inbounds float, ptr %p, i64 %i
      store float {value}, ptr %q
      %j = add nsw i64 %i, 1
      %c = icmp slt i64 %j, %n
      br i1 %c, label %"loop", label %"exit", !llvm.loop !{loop_md}
    exit:
      ret void
    }}""")


_TWINS = _pack("pack1", "0.0", 2) + _pack("pack2", "0.0", 3) + _pack("pack3", "1.0", 4) + textwrap.dedent("""
    define void @"nest"(ptr %p, ptr %t) nounwind {
      call void @"pack1"(ptr %p, i64 4)
      call void @"pack2"(ptr %p, i64 8)
      call void @"pack3"(ptr %p, i64 8)
      store ptr @"pack2", ptr %t
      ret void
    }
    !0 = !{ !"llvm.loop.vectorize.enable", i1 0 }
    !1 = !{ !"llvm.loop.unroll.disable" }
    !2 = distinct !{ !2, !0, !1 }
    !3 = distinct !{ !3, !0, !1 }
    !4 = distinct !{ !4, !0, !1 }
""")


def test_identical_internal_functions_are_merged_into_one():
    merged = modsplit.merge_duplicates(_TWINS)
    mod = llvm.parse_assembly(merged)
    mod.verify()
    assert sorted(f.name for f in mod.functions if not f.is_declaration) == ["nest", "pack1", "pack3"]
    assert 'call void @"pack1"(ptr %p, i64 8)' in merged and 'store ptr @"pack1"' in merged
    # (another loop metadata, another function; an external function is never merged)
    other = _TWINS.replace("!3 = distinct !{ !3, !0, !1 }", "!3 = distinct !{ !3, !1 }")
    assert modsplit.merge_duplicates(other) == other
    external = _TWINS.replace('define internal void @"pack2"', 'define void @"pack2"')
    assert modsplit.merge_duplicates(external) == external
    assert modsplit.merge_duplicates(merged) == merged


def test_a_product_run_in_batch_pieces_whose_epilogue_reads_no_batch_axis_has_one_finisher():
    """A convolution whose padded input is made a few images at a time runs its product in batch
    pieces, each with a finisher applying ReLU to its finished blocks.  The finishers bound every batch
    digit, the second piece's as its offset plus the batch point: code nothing read, which made each
    piece's finisher a text of its own, compiled once per piece.  Bound only where read, they are one
    function; the kernel computes the NumPy convolution."""
    from dataclasses import replace

    from tensorad.codegen.llvm.emit import ModuleEmitter
    from tensorad.codegen.llvm.ir_loops import finish_ir

    X = ta.placeholder((4, 8, 64, 64), "float32", "X")
    W = ta.placeholder((8, 8, 3, 3), "float32", "W")
    Y = ta.topi.nn.relu(ta.topi.nn.conv2d(X, W, 1, 1))
    pinned = replace(target.parse_target("llvm -mcpu=skylake-avx512"), l1d=32 << 10, l2=1 << 20, l3=32 << 20)
    low = ta.lower([Y], [X, W], target=pinned)
    text = finish_ir(str(ModuleEmitter(low.program, "p", target=pinned).emit()))
    finishers = re.compile(r'^define[^@\n]*@"p_nest\d+_finish"', re.M)
    assert len(finishers.findall(text)) == 2  # (two batch pieces, as the pinned target plans them)
    assert len(finishers.findall(modsplit.merge_duplicates(text))) == 1
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8, 64, 64)).astype(np.float32)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # (n, c, y, x, ky, kx)
    want = np.maximum(np.einsum("ncyxij,fcij->nfyx", windows, w.astype(np.float64)), 0.0)
    np.testing.assert_allclose(ta.build([Y], [X, W], cache=False)(x, w), want, rtol=1e-4, atol=1e-4)


def _nest(k: int, scale: str) -> str:
    return textwrap.dedent(f"""
    @"k0123456789abcdef_nest{k}_c" = private constant [2 x float] [float 1.0, float {scale}]
    define void @"k0123456789abcdef_nest{k}"(ptr noalias %p, i64 %n) noinline nounwind {{
    entry:
      br label %body
    body:
      %i = phi i64 [ 0, %entry ], [ %j, %body ]
      %a = getelementptr float, ptr %p, i64 %i
      %c = load float, ptr getelementptr (float, ptr @"k0123456789abcdef_nest{k}_c", i64 1)
      %v = load float, ptr %a
      %w = call float @"llvm.fabs.f32"(float %v)
      %x = fmul float %w, %c
      store float %x, ptr %a
      %j = add i64 %i, 1
      %d = icmp slt i64 %j, %n
      br i1 %d, label %body, label %done, !llvm.loop !{k + 1}
    done:
      ret void
    }}""")


_ALIKE = '; ModuleID = "k0123456789abcdef"\n' + _nest(1, "2.0") + _nest(2, "2.0") + _nest(3, "3.0") + """
define void @"k0123456789abcdef_main"(ptr %p, ptr %q) noinline nounwind optnone {
  call void @"k0123456789abcdef_nest1"(ptr %p, i64 8)
  call void @"k0123456789abcdef_nest2"(ptr %q, i64 8)
  call void @"k0123456789abcdef_nest3"(ptr %q, i64 8)
  ret void
}
declare float @"llvm.fabs.f32"(float %".1")
!0 = !{ !"llvm.loop.unroll.disable" }
!2 = distinct !{ !2, !0 }
!3 = distinct !{ !3, !0 }
!4 = distinct !{ !4, !0 }
"""


def test_nests_alike_but_for_their_names_are_one_unit_named_by_its_content(monkeypatch):
    """Two nests alike but for their names and their constants' (a forward's nest that its gradient's
    kernel runs again) are one unit, ``tensorad_fn_<hash of its text>``, which the rest of the module
    declares and calls for both; a nest with another constant is another unit.  Lighter than a part,
    they stay in the module, whole."""
    monkeypatch.setattr(modsplit, "MIN_PART_LINES", 1)
    [(rest, _)], units = modsplit.split(_ALIKE)
    assert len(units) == 2
    for text, level in units:
        llvm.parse_assembly(text).verify()
        assert level == 3 and "k0123456789abcdef" not in text
    mod = llvm.parse_assembly(rest)
    mod.verify()
    assert [f.name for f in mod.functions if not f.is_declaration] == ["k0123456789abcdef_main"]
    called = re.findall(r'call void @"(tensorad_fn_\w+)"', rest)
    assert called[0] == called[1] != called[2] and set(called) == {t[14:50] for t, _ in units}
    assert modsplit.split(_ALIKE.replace("k0123456789abcdef", "kfedcba9876543210"))[1] == units
    monkeypatch.setattr(modsplit, "MIN_PART_LINES", 1000)
    assert modsplit.split(_ALIKE) == ([(_ALIKE, 3)], [])


def _alike_kernels(monkeypatch, tmp_path) -> tuple:
    """Two kernels running one nest alike (``Y``'s), built one after the other with every nest a unit and
    the disk cache in ``tmp_path``; their inputs; the names of the units each build handed to LLVM."""
    monkeypatch.setattr(modsplit, "MIN_PART_LINES", 1)
    monkeypatch.setattr(compiled_cache, "COMPILED", CompiledCache())
    monkeypatch.setenv("TENSORAD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TENSORAD_NO_DISK_CACHE", raising=False)
    compiled, real = [], jit.compile_objects

    def recorded(modules, target=None):
        texts = [(text(), level, light) for text, level, light in modules]
        compiled.append({t[14:50] for t, _, _ in texts if t.startswith('; ModuleID = "tensorad_fn_')})
        return real([(lambda t=t: t, level, light) for t, level, light in texts], target)
    monkeypatch.setattr(jit, "compile_objects", recorded)
    X = ta.placeholder((64, 47), name="X")
    V = ta.placeholder((32, 16), name="V")
    Y = ta.compute(X.shape, lambda i, j: ta.tanh(X[i, j]) * ta.exp(-X[i, j]), name="Y")
    Z = ta.compute(V.shape, lambda i, j: ta.sigmoid(V[i, j]), name="Z")
    first = ta.build([Y], [X], num_threads=1)
    return first, ta.build([Z, Y], [V, X], num_threads=1), (X, V), compiled


def _check_alike(first, second, inputs, seed) -> None:
    rng = np.random.default_rng(seed)
    x, v = (rng.standard_normal(t.shape, dtype=np.float32) for t in inputs)
    want = np.tanh(x) * np.exp(-x)
    np.testing.assert_allclose(first(x), want, rtol=1e-5, atol=1e-6)
    z, y = second(v, x)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z, 1 / (1 + np.exp(-v)), rtol=1e-5, atol=1e-6)


def test_a_nest_alike_in_two_kernels_is_compiled_by_the_first_build_only(monkeypatch, tmp_path):
    """The second of two kernels that run one nest alike (its unit, codegen/jit/module_split.py) links
    the object code the first build compiled (on disk): LLVM compiles its rest and its other nest's unit
    alone.  Both compute NumPy's."""
    first, second, inputs, units = _alike_kernels(monkeypatch, tmp_path)
    assert len(units) == 2 and len(units[0]) == 1 and len(units[1]) == 1 and units[1].isdisjoint(units[0])
    assert units[0] <= {t[14:50] for t, _ in modsplit.split(second.compiled.llvm_ir_unoptimized)[1]}
    _check_alike(first, second, inputs, 4)


@pytest.mark.parametrize("damage", [lambda b: b[:len(b) // 2], lambda b: b[:-9] + bytes([b[-9] ^ 1]) + b[-8:]
                                    ],
                         ids=["truncated", "flipped"])
def test_a_damaged_unit_on_disk_is_compiled_again(monkeypatch, tmp_path, damage):
    """A unit's object code on disk (codegen/jit/disk_cache.py) that is truncated or has a byte changed
    is not linked: the next build compiles the unit again, and its kernel computes NumPy's result."""
    from tensorad.codegen.jit import disk_cache

    _alike_kernels(monkeypatch, tmp_path)
    files = {f: (disk_cache.get(f.stem) or b"")[4:].startswith(b"unit\n") for f in tmp_path.glob("*.bin")}
    assert sum(files.values()) == 2
    for f, unit in files.items():  # (the units damaged, the kernels' entries gone)
        f.write_bytes(damage(f.read_bytes())) if unit else f.unlink()
    first, second, inputs, units = _alike_kernels(monkeypatch, tmp_path)
    assert first.origin == second.origin == "compiled" and [len(u) for u in units] == [1, 1]
    _check_alike(first, second, inputs, 5)


@pytest.mark.skipif(not (os.environ.get("CC") or any(map(shutil.which, ("cc", "gcc", "clang")))),
                    reason="kernel.export links with a system C compiler (CC, cc, gcc or clang): none here")
def test_two_exported_kernels_holding_one_unit_run_side_by_side_in_one_process(monkeypatch, tmp_path):
    """Two exported kernels (codegen/runtime/export.py) holding one unit, loaded into one process with
    their symbols global (as a program linked with both sees them), by ``ctypes`` and by ``ta.load``:
    neither library exports a unit's name, and both compute NumPy's result."""
    first, second, inputs, _ = _alike_kernels(monkeypatch, tmp_path / "cache")
    paths = [first.export(tmp_path / "first.so"), second.export(tmp_path / "second.so")]
    units = [t[14:50] for t, _ in modsplit.split(second.compiled.llvm_ir_unoptimized)[1]]
    libs = [ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL) for p in paths]
    assert len(units) == 2 and not [u for lib in libs for u in units if hasattr(lib, u)]
    rng = np.random.default_rng(6)
    x, v = (rng.standard_normal(t.shape, dtype=np.float32) for t in inputs)
    y, z, y2 = np.empty_like(x), np.empty_like(v), np.empty_like(x)
    libs[0].first(*(a.ctypes.data_as(ctypes.c_void_p) for a in (x, y)), 1)
    libs[1].second(*(a.ctypes.data_as(ctypes.c_void_p) for a in (v, x, z, y2)), 1)
    want = np.tanh(x) * np.exp(-x)
    for got in (y, y2, ta.load(paths[0])(x), ta.load(paths[1])(v, x)[1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z, 1 / (1 + np.exp(-v)), rtol=1e-5, atol=1e-6)


SETTINGS = dict(deadline=None, derandomize=True, max_examples=25,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(**SETTINGS)
@given(random_program(dtype="float64"))
def test_random_programs_compiled_in_parts_agree_with_evaluate(program):
    feed = random_feed(program.placeholders, np.random.default_rng(5))
    want = ta.evaluate(program.outputs, feed)
    with _split_everything():
        kern = ta.build(program.outputs, program.placeholders, num_threads=2, parallel_min_work=0,
                        cache=False)
    got = kern(*[feed[p] for p in program.placeholders])
    got = got if isinstance(got, tuple) else (got,)
    for t, g, w in zip(program.outputs, got, want):
        if t.dtype in ta.FLOAT_DTYPES:
            np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9, err_msg=t.name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=t.name)


def test_a_bundled_kernel_pickles_and_reads_back_from_the_disk_cache(tmp_path):
    inputs, outputs = _program()
    rng = np.random.default_rng(0)
    feed = [rng.standard_normal(t.shape).astype(np.float32) for t in inputs]
    want = ta.evaluate(outputs, dict(zip(inputs, feed)))
    with _split_everything():
        kern = ta.build(outputs, inputs, cache=False)
    assert kern.compiled.obj.startswith(modsplit.BUNDLE_MAGIC)
    again = pickle.loads(pickle.dumps(kern))
    for k in (kern, again):
        for g, w in zip(k(*feed), want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    # a fresh process: the first builds and writes the bundle to the disk cache, the second reads it
    code = textwrap.dedent("""
        import sys, numpy as np, tensorad as ta
        from tensorad.codegen import target
        from tensorad.codegen.jit import module_split as modsplit
        build = sys.modules["tensorad.codegen.build"]
        modsplit.MIN_PART_LINES, target.usable_cpus = 1, lambda: 2
    """) + textwrap.dedent(inspect.getsource(_program)) + textwrap.dedent("""
        inputs, outputs = _program()
        k = ta.build(outputs, inputs)
        rng = np.random.default_rng(0)
        feed = [rng.standard_normal(t.shape).astype(np.float32) for t in inputs]
        want = ta.evaluate(outputs, dict(zip(inputs, feed)))
        for g, w in zip(k(*feed), want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        bundled = k.compiled.obj[:8] == modsplit.BUNDLE_MAGIC
        print(int(k.origin == "compiled"), int(k.origin == "disk"), bundled)
    """)
    env = dict(os.environ, TENSORAD_CACHE_DIR=str(tmp_path))
    env.pop("TENSORAD_NO_DISK_CACHE", None)
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           timeout=600) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    assert runs[0].stdout.split() == ["1", "0", "True"]
    assert runs[1].stdout.split() == ["0", "1", "True"]


def test_bundles_round_trip_and_malformed_ones_are_refused():
    inputs, outputs = _program()
    text = ta.build(outputs, inputs).llvm_ir_unoptimized
    with _split_everything():
        parts = [jit.compile_object(p, 2) for p, _ in _cut(text)]
    b = modsplit.bundle(parts)
    assert modsplit.unbundle(b) == parts and objcheck.object_is_sound(b)
    assert modsplit.bundle(parts[:1]) == parts[0] and modsplit.unbundle(parts[0]) == parts[:1]
    for bad in (b[:-1], b + b"x", b[:len(modsplit.BUNDLE_MAGIC) + 2],
                modsplit.bundle([parts[0], modsplit.bundle(parts)]),  # (a bundle inside a bundle)
                modsplit.bundle([parts[0], b"junk"])):
        assert not objcheck.object_is_sound(bad)
    with pytest.raises(ValueError):
        modsplit.unbundle(b[:-3])
    # the parts call each other: the symbols one leaves undefined, another defines
    defined = {n for p in parts for n in objcheck.defined_symbols(p)}
    assert any(n in defined for p in parts for n in objcheck.undefined_symbols(p))


def _lstm_loss(x, h, c, wih, whh, b):
    """NumPy float64: the sum of an LSTM's last hidden state (gates i, f, g, o)."""
    def sig(v):
        return 1 / (1 + np.exp(-v))
    for t in range(x.shape[0]):
        i, f, g, o = np.split(x[t] @ wih.T + h @ whh.T + b, 4, axis=1)
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
    return h.sum()


def test_the_steps_of_an_lstm_share_one_packing_function_and_its_gradient_is_right():
    steps, batch, width = 4, 8, 16
    nn = ta.topi.nn
    X = ta.placeholder((steps, batch, width), "float32", "X")
    h0, c0 = (ta.placeholder((batch, width), "float32", n) for n in ("h0", "c0"))
    Wih, Whh = (ta.placeholder((4 * width, width), "float32", n) for n in ("Wih", "Whh"))
    b = ta.placeholder((4 * width,), "float32", "b")
    h, c = h0, c0
    for t in range(steps):
        i, f, g, o = ta.topi.split(nn.dense(X[t], Wih) + nn.dense(h, Whh, b), 4, axis=1)
        c = ta.topi.sigmoid(f) * c + ta.topi.sigmoid(i) * ta.topi.tanh(g)
        h = ta.topi.sigmoid(o) * ta.topi.tanh(c)
    loss = ta.topi.sum(h)
    head = ta.placeholder(loss.shape, "float32", "H")
    kern = ta.build(list(ta.JacobianRecursive(loss, [Whh], head)), [X, h0, c0, Wih, Whh, b, head],
                    cache=False, microkernel=True)
    text = kern.llvm_ir_unoptimized
    packers = re.findall(r'^define internal void @"(\w+_pack[AB](?:_row)?)"', text, re.M)
    uses = sum(len(re.findall(rf'ptrtoint [^@]*@"{p}"', text)) for p in packers)
    assert packers and uses > len(packers)  # (one packing function serves several steps' products)
    rng = np.random.default_rng(0)
    args = [rng.uniform(-0.5, 0.5, t.shape) for t in (X, h0, c0, Wih, Whh, b)]
    got = kern(*[a.astype(np.float32) for a in args], np.float32(1.0))
    want, eps = np.zeros(Whh.shape), 1e-6
    for index in np.ndindex(*Whh.shape):
        plus, minus = args[4].copy(), args[4].copy()
        plus[index] += eps
        minus[index] -= eps
        rise = _lstm_loss(*args[:4], plus, args[5]) - _lstm_loss(*args[:4], minus, args[5])
        want[index] = rise / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
