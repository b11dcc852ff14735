"""Exported kernels meet damaged, changed, replaced and foreign files; the build meets a process
with no home directory.

Each case runs ``ta.load`` (and the kernel it returns) in a child process: mapping a truncated
library or running code for another CPU kills a process with a signal, and that must fail the
test, not end pytest.  The child prints what it saw and exits non-zero when a library was not
refused, so the parent asserts on the exit status and the message.  (A child costs an interpreter's
start and a link: the fast tier runs the truncated library's, ``make test`` every one.)

* a truncated library (size check before mapping), a library with changed code bytes and a
  library that is not the one its ``.json`` describes (hash check before mapping);
* a library whose target needs CPU features this host lacks (a real one built for a feature
  this host does not have, and a ``.json`` whose recorded features name one);
* a description written before the size, hash and target were recorded, one that is not text
  and one whose entry point is not a name;
* a description whose argument shapes or dtypes were changed (the library holds a digest of them:
  its code run on arrays of the changed sizes would write past them);
* ``export`` over a path whose library is loaded (the loaded kernel keeps its code) and
  ``ta.load`` after the library was replaced on disk (the new library is loaded);
* ``ta.build`` with no home directory and no ``TENSORAD_CACHE_DIR``: a warning, no disk cache.
* ``export`` of a kernel of a symbolic program that compiles per size, or of stages: refused, naming
  the kernel of one size.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from tensorad.codegen import ExportError

import tensorad as ta

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                              reason="no system C compiler")

# the child's common part: a small kernel Y = X * scale + 1, and `refused` that exits non-zero
# unless the call raises ExportError with all the given words in its message
PRELUDE = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tensorad as ta
    from tensorad.codegen import ExportError

    X = ta.placeholder((64,), name="X")
    x = np.arange(64, dtype=np.float32)

    def kernel(scale, target="llvm"):
        return ta.build([ta.compute((64,), lambda i: X[i] * scale + 1.0, name="Y")], [X],
                        target=target)

    def refused(call, *words):
        try:
            got = call()
        except ExportError as exc:
            message = str(exc)
            print("REFUSED:", message)
            missing = [w for w in words if w not in message]
            if missing:
                sys.exit(f"the message does not name {missing}: {message}")
            return
        if callable(got):
            got(x)  # the library was accepted: call it, as a user would
        sys.exit("NOT REFUSED")
""")


def _child(tmp_path, body: str, env: dict | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=env)


def _assert_ok(done: subprocess.CompletedProcess, *expected: str) -> None:
    assert done.returncode == 0, (f"child exited with {done.returncode}\n"
                                  f"stdout: {done.stdout}\nstderr: {done.stderr[-3000:]}")
    for text in expected:
        assert text in done.stdout, done.stdout


def _text_section(path: str) -> tuple[int, int]:
    """File offset and size of an ELF64 library's ``.text`` section."""
    import struct

    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def section(k):
        return struct.unpack_from("<IIQQQQ", data, shoff + k * shentsize)

    names_at = section(shstrndx)[4]
    for k in range(shnum):
        name, _type, _flags, _addr, offset, size = section(k)
        if data[names_at + name:data.index(b"\0", names_at + name)] == b".text":
            return offset, size
    raise AssertionError("no .text section")


@needs_cc
def test_a_truncated_library_is_refused_before_it_is_mapped(tmp_path):
    done = _child(tmp_path, """
        p = kernel(2.0).export("k.so")
        size = os.path.getsize(p)
        with open(p, "r+b") as f:
            f.truncate(size // 2)
        refused(lambda: ta.load(p), "k.so", f"{size // 2} bytes", f"{size}")
    """)
    _assert_ok(done, "REFUSED")


@pytest.mark.slow
@needs_cc
def test_a_library_with_changed_code_is_refused(tmp_path):
    done = _child(tmp_path, f"""
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_exported_files import _text_section
        p = kernel(2.0).export("k.so")
        offset, size = _text_section(p)
        with open(p, "r+b") as f:
            f.seek(offset + size // 2)
            code = f.read(32)
            f.seek(offset + size // 2)
            f.write(bytes(b ^ 0xFF for b in code))
        refused(lambda: ta.load(p), "k.so", "SHA-256")
    """)
    _assert_ok(done, "REFUSED")


@pytest.mark.slow
@needs_cc
def test_a_library_that_is_not_the_one_described_is_refused(tmp_path):
    # another kernel's library under this name (the .json kept): same size is not enough
    done = _child(tmp_path, """
        p = kernel(2.0).export("k.so")
        os.makedirs("other")
        q = kernel(3.0).export("other/k.so")
        os.replace(q, p)
        refused(lambda: ta.load(p), "k.so")
    """)
    _assert_ok(done, "REFUSED")


@pytest.mark.slow
@needs_cc
@pytest.mark.parametrize("change", ["shape", "dtype"])
def test_a_description_with_changed_argument_specs_is_refused(tmp_path, change):
    done = _child(tmp_path, f"""
        p = kernel(2.0).export("k.so")
        side = p[:-3] + ".json"
        meta = json.load(open(side))
        if {change!r} == "shape":
            meta["inputs"][0][1] = meta["outputs"][0][1] = [1]
            x = np.ones(1, np.float32)
        else:
            meta["inputs"][0][2] = meta["outputs"][0][2] = "float64"
            x = np.ones(64)
        json.dump(meta, open(side, "w"))
        refused(lambda: ta.load(p), "k.json", "changed or damaged")
    """)
    _assert_ok(done, "REFUSED")


#: x86 features LLVM knows, one of which a host may lack
FEATURES = ("avx512f", "amx-tile", "avx512vp2intersect", "amx-fp16", "amx-complex", "sha512", "sm4",
            "avx10.2", "xop", "fma4", "sse4a", "tbm")


@pytest.mark.slow
@needs_cc
def test_a_library_for_a_cpu_with_features_this_host_lacks_is_refused(tmp_path):
    """The child picks a feature its host lacks: it sees the real host, where this process may
    pretend to be another CPU (``make test-as``), and a library for AVX-512 loads on an AVX-512 host."""
    done = _child(tmp_path, f"""
        import llvmlite.binding as llvm
        try:
            have = llvm.get_host_cpu_features()
        except RuntimeError:
            have = {{}}
        feature = next((f for f in {FEATURES!r} if f in have and not have[f]), None)
        if feature is None:
            sys.exit("EVERY FEATURE")
        # a CPU of the other family where it is the one missing (AVX-512 on an AVX2 host)
        target = "llvm -mcpu=skylake-avx512" if feature == "avx512f" else "llvm -mattr=+" + feature
        p = kernel(2.0, target=target).export("k.so")
        meta = json.load(open("k.json"))
        print("RECORDED:", meta.get("target"))
        refused(lambda: ta.load(p), "k.so", feature, "this CPU")
    """)
    if "EVERY FEATURE" in done.stderr:
        pytest.skip("this host has every feature tried (the recorded-features test still runs)")
    _assert_ok(done, "REFUSED")


@needs_cc
def test_recorded_target_features_are_checked_against_the_host(tmp_path):
    x = ta.placeholder((4,), name="X")
    path = ta.build([ta.compute((4,), lambda i: x[i] + 1.0, name="Y")], [x]).export(tmp_path / "k.so")
    side = tmp_path / "k.json"
    meta = json.loads(side.read_text())
    meta["target"]["features"].append("no-cpu-has-this")
    side.write_text(json.dumps(meta))
    with pytest.raises(ExportError, match="no-cpu-has-this"):
        ta.load(path)
    meta["target"]["triple"] = "riscv64-unknown-linux-gnu"
    side.write_text(json.dumps(meta))
    with pytest.raises(ExportError, match="riscv64"):
        ta.load(path)


@needs_cc
def test_a_description_without_size_hash_and_target_asks_to_export_again(tmp_path):
    x = ta.placeholder((4,), name="X")
    path = ta.build([ta.compute((4,), lambda i: x[i] + 1.0, name="Y")], [x]).export(tmp_path / "k.so")
    side = tmp_path / "k.json"
    meta = json.loads(side.read_text())
    for field in ("library", "target"):
        meta.pop(field)
    meta["format"] = 1  # what export wrote before these were recorded
    side.write_text(json.dumps(meta))
    with pytest.raises(ExportError, match="export the kernel again"):
        ta.load(path)


@needs_cc
def test_a_description_that_is_not_text_or_names_no_entry_point_is_refused(tmp_path):
    """A ``.json`` that is not text (binary garbage) raised a ``UnicodeDecodeError``, and one whose
    entry point is not a string a ``TypeError`` from ctypes ("attribute name must be string"): both
    are refused naming the file."""
    x = ta.placeholder((4,), name="X")
    path = ta.build([ta.compute((4,), lambda i: x[i] + 1.0, name="Y")], [x]).export(tmp_path / "k.so")
    side = tmp_path / "k.json"
    meta = json.loads(side.read_text())
    side.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match="k.json' is not a tensorad kernel description"):
        ta.load(path)
    for main in (None, 7, ["f"]):
        side.write_text(json.dumps({**meta, "main": main}))
        with pytest.raises(ExportError, match="k.json' does not record the library's entry point"):
            ta.load(path)


@pytest.mark.slow
@needs_cc
def test_export_over_a_loaded_library_leaves_the_loaded_kernel_intact(tmp_path):
    done = _child(tmp_path, """
        a, b = kernel(2.0), kernel(3.0)
        p = a.export("k.so")
        before = os.stat(p).st_ino
        la = ta.load(p)
        b.export(p)
        np.testing.assert_array_equal(la(x), x * 2 + 1)
        assert os.stat(p).st_ino != before, "export rewrote the library in place"
        np.testing.assert_array_equal(ta.load(p)(x), x * 3 + 1)
        assert sorted(os.listdir(".")) == ["child.py", "k.h", "k.json", "k.so"], os.listdir(".")
        print("INTACT")
    """)
    _assert_ok(done, "INTACT")


@pytest.mark.slow
@needs_cc
def test_load_after_the_library_was_replaced_loads_the_new_one(tmp_path):
    done = _child(tmp_path, """
        p = kernel(2.0).export("k.so")
        la = ta.load(p)
        os.makedirs("new")
        kernel(3.0).export("new/k.so")
        for ext in (".so", ".json", ".h"):
            os.replace("new/k" + ext, "k" + ext)
        np.testing.assert_array_equal(ta.load(p)(x), x * 3 + 1)
        np.testing.assert_array_equal(la(x), x * 2 + 1)
        np.testing.assert_array_equal(ta.load(p)(x), x * 3 + 1)
        print("NEW")
    """)
    _assert_ok(done, "NEW")


@pytest.mark.slow
def test_no_home_directory_builds_without_a_disk_cache_and_warns_once(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("HOME", "TENSORAD_CACHE_DIR", "XDG_CACHE_HOME", "TENSORAD_NO_DISK_CACHE")}
    done = _child(tmp_path, """
        import warnings
        from pathlib import Path
        import pwd

        def no_entry(uid):
            raise KeyError(f"getpwuid(): uid not found: {uid}")

        pwd.getpwuid = no_entry
        try:
            Path.home()
        except RuntimeError:
            pass
        else:
            sys.exit("Path.home() still finds a home directory")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for scale in (2.0, 3.0, 2.0):
                np.testing.assert_array_equal(kernel(scale)(x), x * scale + 1)
        named = [str(w.message) for w in seen if "TENSORAD_CACHE_DIR" in str(w.message)]
        assert len(named) == 1, [str(w.message) for w in seen]
        print("WARNED:", named[0])
    """, env=env)
    _assert_ok(done, "WARNED")
    assert not (tmp_path / "~").exists()


def test_exporting_a_kernel_that_compiles_per_size_is_refused_naming_the_kernel_of_one_size(tmp_path):
    """A kernel built over a size variable that compiles once per size has no library of its own:
    ``export`` raises ``ExportError`` saying how to export one size's kernel (a generic kernel exports:
    tests/errors/test_exported_generic_files.py)."""
    n = ta.size_var("n")
    x = ta.placeholder((n,), "float32", name="x")
    k = ta.reduce_axis((0, n), name="k")
    kernel = ta.build(ta.compute((n,), lambda i: ta.sum(x[k], axis=k, where=k <= i), name="y"), [x])
    assert not kernel.generic
    with pytest.raises(ExportError, match=r"export the kernel of one size: .*n=\.\.\."):
        kernel.export(tmp_path / "k.so")
    assert not any(tmp_path.iterdir())


def test_export_of_a_staged_kernel_is_refused(tmp_path):
    """A program that reads a sum over its rows after it is made is one kernel of stages for every size:
    it has no library of its own either."""
    n = ta.size_var("n")
    x = ta.placeholder((n,), "float32", name="x")
    k = ta.reduce_axis((0, n), name="k")
    total = ta.compute((1,), lambda _: ta.sum(x[k], axis=k), name="total")
    y = ta.compute((n,), lambda i: x[i] - total[0], name="y")
    kernel = ta.build(y, [x])
    assert kernel.generic and type(kernel).__name__ == "StagedKernel"
    with pytest.raises(ExportError, match=r"export the kernel of one size: .*n=\.\.\."):
        kernel.export(tmp_path / "k.so")
    assert not any(tmp_path.iterdir())
