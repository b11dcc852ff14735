"""The matrix-product library (codegen/gemm/library.py) is compiled piece by piece, only what a build links.

A build records, in its compiled code (``kernel.compiled.library``), each library piece it
links and how it got it: ``compiled``, ``disk`` (a new process reads the disk cache) or
``process`` (linked already).  Counted, never timed (compile time is measured by
``python -m benchmarks.compile_time``).  Library entries carry the full text of their key and
sound object code: damaged, truncated or swapped entries are compiled again and rewritten.

Each case runs in subprocesses (fresh processes) over a cache directory of its own: a copy of the
one that the first process's run over an empty cache filled (``cold_run``, shared).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, sys
import numpy as np
import tensorad as ta
rng = np.random.default_rng(0)
out = {}
def product(name, a_shape, b_shape, fn, want):
    A = ta.placeholder(a_shape, "float32", "A")
    B = ta.placeholder(b_shape, "float32", "B")
    k = ta.reduce_axis((0, 37), "k")
    C = ta.compute((29, 53), lambda i, j: ta.sum(fn(A, B, i, j, k), k), name="C")
    kern = ta.build([C], [A, B], microkernel=True)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    got = kern(a, b)
    ok = bool(np.allclose(got, want(a.astype(np.float64), b.astype(np.float64)), rtol=1e-4, atol=1e-4))
    out[name] = {"library": kern.compiled.library, "ok": ok,
                 "symbols": kern.compiled.meta["libraries"]}
# A[i, k] B[k, j]: A contiguous along k (transposed into panels), B along j (copied)
product("first", (29, 37), (37, 53), lambda A, B, i, j, k: A[i, k] * B[k, j], lambda a, b: a @ b)
# A read along i (copied), B as before: one new piece, the rest linked already
product("second", (37, 29), (37, 53), lambda A, B, i, j, k: A[k, i] * B[k, j], lambda a, b: a.T @ b)
out["stats"] = sum(list(out[name]["library"].values()).count("compiled") for name in ("first", "second"))
print(json.dumps(out))
"""


def _run(cache_dir) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TENSORAD_NO_DISK_CACHE"}
    env["TENSORAD_CACHE_DIR"] = str(cache_dir)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _origins(run: dict, name: str) -> dict[str, str]:
    """The run's record for one build, keyed by the piece's part (``core``, ``packA_copy``..)."""
    return {piece.split("_", 3)[3]: how for piece, how in run[name]["library"].items()}


def _library_entries(cache_dir) -> dict[str, bytes]:
    """The disk entries of library pieces (found by their key's text, which they record)."""
    found = {}
    for p in cache_dir.iterdir():
        data = p.read_bytes()
        if b"gemmlib\n(" in data[:200]:
            found[p.name] = data
    return found


@pytest.fixture(scope="module")
def cold_run(tmp_path_factory):
    """The first process's run over an empty disk cache: its directory and result (read, never
    changed, by the tests: each copies the directory before it runs again)."""
    cache_dir = tmp_path_factory.mktemp("cold")
    return cache_dir, _run(cache_dir)


def test_a_build_compiles_only_the_pieces_it_links_and_a_new_process_reads_them(cold_run, tmp_path):
    cold_dir, first = cold_run
    shutil.copytree(cold_dir, tmp_path, dirs_exist_ok=True)
    assert first["first"]["ok"] and first["second"]["ok"]
    # one core (micro-kernel, tables, driver) and one packer per side: what the product uses
    assert _origins(first, "first") == {"core": "compiled", "packA_transpose": "compiled",
                                        "packB_copy": "compiled"}
    assert _origins(first, "second") == {"core": "process", "packA_copy": "compiled", "packB_copy": "process"}
    assert first["stats"] == 4  # nothing else of the library was compiled
    entries = _library_entries(tmp_path)
    assert len(entries) == 4
    again = _run(tmp_path)  # a new process: the kernels and every piece from the disk cache
    assert again["first"]["ok"] and again["second"]["ok"] and again["stats"] == 0
    assert set(_origins(again, "first").values()) == {"disk"}
    assert _origins(again, "second") == {"core": "process", "packA_copy": "disk", "packB_copy": "process"}


def test_tampered_library_entries_are_rebuilt(cold_run, tmp_path):
    from tensorad.codegen.jit import disk_cache as diskcache

    shutil.copytree(cold_run[0], tmp_path, dirs_exist_ok=True)
    entries = _library_entries(tmp_path)
    names = sorted(entries)
    assert len(names) == 4
    # two entries swapped, each re-signed for the other's key (hashes valid, contents wrong),
    # one damaged, one truncated
    a, b, c, d = names
    payload = {n: diskcache._unpack(n[:-4], entries[n]) for n in (a, b)}
    (tmp_path / a).write_bytes(diskcache.pack(a[:-4], payload[b]))
    (tmp_path / b).write_bytes(diskcache.pack(b[:-4], payload[a]))
    damaged = bytearray(entries[c])
    damaged[-100] ^= 0xFF
    (tmp_path / c).write_bytes(bytes(damaged))
    (tmp_path / d).write_bytes(entries[d][:len(entries[d]) // 2])
    for p in tmp_path.iterdir():  # the kernels' own entries removed: they link the library again
        if p.name not in entries:
            p.unlink()
    rebuilt = _run(tmp_path)
    assert rebuilt["first"]["ok"] and rebuilt["second"]["ok"]
    assert rebuilt["stats"] == 4  # every tampered piece compiled again
    assert {**_origins(rebuilt, "second"), **_origins(rebuilt, "first")} == {
        "core": "compiled", "packA_transpose": "compiled", "packB_copy": "compiled", "packA_copy": "compiled"}
    again = _run(tmp_path)  # and rewritten whole
    assert again["stats"] == 0 and set(_origins(again, "first").values()) == {"disk"}
