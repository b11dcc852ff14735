"""Compile time and the caches of compiled code.

* Matrix products call the generic library (compiled once per process, or read from the disk
  cache), so their kernels are small and compile fast.
* The disk cache: a new process links stored object code instead of compiling (same results);
  corrupted entries are ignored and rewritten; ``cache=False`` and ``TENSORAD_NO_DISK_CACHE=1``
  neither read nor write it; writes leave no temporary files.

Every test that touches the disk cache runs in a subprocess with its own temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tensorad as ta

B = sys.modules["tensorad.codegen.build"]

SCRIPT = r"""
import json, sys
import numpy as np
import tensorad as ta
B = sys.modules["tensorad.codegen.build"]
cache = sys.argv[1] == "1"
X = ta.placeholder((40, 70), "float32", "X")
W = ta.placeholder((50, 70), "float32", "W")
k = ta.reduce_axis((0, 70), "k")
Y = ta.compute((40, 50), lambda i, j: ta.sum(X[i, k] * W[j, k], k), name="Y")
Z = ta.compute((40, 50), lambda i, j: ta.exp(Y[i, j] * 0.01), name="Z")
kern = ta.build([Z], [X, W], microkernel=True, cache=cache)
x = np.linspace(-1, 1, 40 * 70, dtype=np.float32).reshape(40, 70)
w = np.linspace(-1, 1, 50 * 70, dtype=np.float32).reshape(50, 70)
out = kern(x, w)
want = np.exp((x.astype(np.float64) @ w.T) * 0.01)
assert np.allclose(out, want, rtol=1e-4, atol=1e-5)
assert "define" in kern.llvm_ir and "ret" in kern.asm
stats = {"compiled": int(kern.origin == "compiled"), "loaded": int(kern.origin == "disk")}
print(json.dumps({"stats": stats, "sum": float(out.sum())}))
"""


def _run(cache_dir, cache=True, **env):
    e = {k: v for k, v in os.environ.items() if k != "TENSORAD_NO_DISK_CACHE"}
    e.update(TENSORAD_CACHE_DIR=str(cache_dir), **env)
    out = subprocess.run([sys.executable, "-c", SCRIPT, "1" if cache else "0"], env=e, capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _entries(cache_dir):
    return sorted(p for p in cache_dir.iterdir()) if cache_dir.exists() else []


@pytest.fixture(scope="module")
def cold_run(tmp_path_factory):
    """A first process's run with an empty disk cache: its directory and result (read, never changed,
    by the tests that use it)."""
    cache_dir = tmp_path_factory.mktemp("cold")
    return cache_dir, _run(cache_dir)


def test_new_process_links_cached_object_code(cold_run):
    cache_dir, first = cold_run
    assert first["stats"]["compiled"] == 1 and first["stats"]["loaded"] == 0
    files = _entries(cache_dir)
    assert files and all(p.suffix == ".bin" for p in files)  # no temporary files left
    second = _run(cache_dir)
    assert second["stats"] == {"compiled": 0, "loaded": 1}
    assert second["sum"] == first["sum"]
    assert _entries(cache_dir) == files


def test_corrupted_entries_are_ignored_and_rewritten(cold_run, tmp_path):
    cache_dir, first = cold_run
    assert first["stats"]["compiled"] == 1
    shutil.copytree(cache_dir, tmp_path, dirs_exist_ok=True)
    for p in _entries(tmp_path):
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0xFF  # a flipped byte: the checksum no longer matches
        p.write_bytes(bytes(data))
    again = _run(tmp_path)
    assert again["stats"] == {"compiled": 1, "loaded": 0} and again["sum"] == first["sum"]
    for p in _entries(tmp_path):
        p.write_bytes(p.read_bytes()[:20])  # truncated
    assert _run(tmp_path)["stats"]["compiled"] == 1
    assert _run(tmp_path)["stats"] == {"compiled": 0, "loaded": 1}  # rewritten whole


def test_disk_cache_can_be_turned_off(tmp_path):
    off = tmp_path / "off"
    assert _run(off, cache=False)["stats"]["compiled"] == 1
    assert _entries(off) == []
    env_off = tmp_path / "env"
    assert _run(env_off, TENSORAD_NO_DISK_CACHE="1")["stats"]["compiled"] == 1
    assert _entries(env_off) == []


GENERIC = r"""
import json
import numpy as np
import tensorad as ta
n = ta.size_var("n", max=64)
X = ta.placeholder((n, 8), "float32", "X")
W = ta.placeholder((8,), "float32", "W")
Y = ta.compute((n, 8), lambda i, j: ta.tanh(X[i, j] * W[j]), name="Y")
k = ta.reduce_axis((0, n), "k")
S = ta.compute((8,), lambda j: ta.sum(X[k, j] * X[k, j], axis=k), name="S")
kern = ta.build([Y, S], [X, W])
w = np.linspace(-1, 1, 8, dtype=np.float32)
for size in (1, 7, 64):
    x = np.linspace(-2, 2, size * 8, dtype=np.float32).reshape(size, 8)
    y, s = kern(x, w)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, np.tanh(x64 * w), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s, (x64 * x64).sum(0), rtol=1e-5)
print(json.dumps({"generic": kern.generic, "origins": [p.origin for _, p in kern.parts]}))
"""


def test_a_new_process_links_a_generic_kernels_parts_from_the_disk_cache(tmp_path):
    """A kernel built once over a size variable (its blocks of rows, a sum over the rows among its
    outputs) is stored part by part: a new process compiles none of it, and its results are right at
    1, 7 and 64 rows."""
    e = {k: v for k, v in os.environ.items() if k != "TENSORAD_NO_DISK_CACHE"}
    e.update(TENSORAD_CACHE_DIR=str(tmp_path))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", GENERIC], env=e, capture_output=True, text=True,
                             timeout=240)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["generic"] and len(first["origins"]) > 1 and set(first["origins"]) == {"compiled"}
    assert second["origins"] == ["disk"] * len(first["origins"])


def test_cache_option_must_be_a_bool():
    A = ta.placeholder((3,), "float32", "A")
    B = ta.compute((3,), lambda i: A[i] * 2.0, name="B")
    with pytest.raises(TypeError, match="cache"):
        ta.build([B], [A], cache="no")


def test_in_process_rebuild_is_a_lookup():
    A = ta.placeholder((64, 64), "float32", "A")
    k = ta.reduce_axis((0, 64), "k")
    C = ta.compute((64, 64), lambda i, j: ta.sum(A[i, k] * A[k, j], k), name="C")
    first = ta.build([C], [A], microkernel=True)
    again = ta.build([C], [A], microkernel=True, cache=False)
    assert again.compiled is first.compiled
    assert again.origin == "memory"  # nothing compiled, nothing read from disk


def test_matrix_product_kernels_are_small():
    # the packing and the micro-kernel live in the library: the kernel fills a descriptor
    X = ta.placeholder((32, 1000), "float32", "X")
    W = ta.placeholder((1000, 1000), "float32", "W")
    Bv = ta.placeholder((1000,), "float32", "B")
    Y = ta.topi.nn.dense(X, W, Bv)
    H = ta.placeholder(Y.shape, "float32", "H")
    for outs, ins in (([Y], [X, W, Bv]), (list(ta.JacobianRecursive(Y, [X, W, Bv], H)), [X, W, Bv, H])):
        text = ta.build(outs, ins).compiled.llvm_ir_unoptimized
        assert re.search(r"tensorad_gemm_f32_\d+x\d+_t[0-9a-f]+_driver", text)  # (MR x NR: the target's)
        assert "shufflevector" not in text and len(text.splitlines()) < 400


COMPILE_SCRIPT = r"""
import json, sys
import tensorad as ta
B = sys.modules["tensorad.codegen.build"]
X = ta.placeholder((2, 3, 6, 6), "float32", "X")   # warm the library pieces the big ones use
Wt = ta.placeholder((4, 3, 3, 3), "float32", "W")
Yt = ta.topi.nn.conv2d(X, Wt, 1, 0)
Ht = ta.placeholder(Yt.shape, "float32", "H")
ta.build(list(ta.JacobianRecursive(Yt, [X, Wt], Ht)), [X, Wt, Ht], microkernel=True)
out = {}
def sized(name, outs, ins):
    kern = ta.build(outs, ins)
    out[name] = {"compiled": int(kern.origin == "compiled"),
                 "lines": len(kern.compiled.llvm_ir_unoptimized.splitlines())}
p = {"X": ta.placeholder((32, 17, 28, 28), "float32", "X"),
     "W": ta.placeholder((19, 17, 3, 3), "float32", "W")}
Y = ta.topi.nn.conv2d(p["X"], p["W"], 1, 0)
H = ta.placeholder(Y.shape, "float32", "H")
sized("conv2d forward", [Y], [p["X"], p["W"]])
sized("conv2d backward", list(ta.JacobianRecursive(Y, [p["X"], p["W"]], H)), [p["X"], p["W"], H])
print(json.dumps(out))
"""


def test_convolution_kernels_are_small_once_the_library_is_warm(tmp_path):
    # Compile time is measured by the benchmark (python -m benchmarks.compile_time); here we count
    # what makes it small: in a fresh process with an empty disk cache, once the library is warm,
    # each seed conv2d kernel is one LLVM module of a few hundred lines calling the library.
    env = {k: v for k, v in os.environ.items() if k != "TENSORAD_NO_DISK_CACHE"}
    env["TENSORAD_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    sizes = json.loads(out.stdout.strip().splitlines()[-1])
    for name, size in sizes.items():
        assert size["compiled"] == 1, (name, size)
        assert size["lines"] < 1500, (name, size)


def test_library_routines_are_shared_between_kernels():
    A = ta.placeholder((70, 80), "float64", "A")
    k = ta.reduce_axis((0, 80), "k")
    C1 = ta.compute((70, 70), lambda i, j: ta.sum(A[i, k] * A[j, k], k), name="C1")
    C2 = ta.compute((70, 70), lambda i, j: ta.sum(A[i, k] * A[j, k] * 1.0, k), name="C2")
    a = np.random.default_rng(0).standard_normal((70, 80))
    for C in (C1, C2):
        np.testing.assert_allclose(ta.build([C], [A], microkernel=True)(a), a @ a.T, rtol=1e-12, atol=1e-12)
