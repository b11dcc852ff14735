"""The disk cache cannot be fooled: each attack on an entry is rebuilt, never
loaded, raised, hung on or crashed on.

A first process builds kernels ``A * c + 1`` (one cache entry each) in a private directory;
the test then damages the entries, one attack per kernel; a second process builds them all
again and checks every result against NumPy and that exactly the attacked entries were
recompiled.  Both run as subprocesses (with a time limit: a FIFO that blocks is a failure,
and a segmentation fault is a return code, not the end of the test run).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from tensorad.codegen.jit import disk_cache as diskcache

import tensorad  # noqa: F401  (loads tensorad.codegen.build, shadowed by the function build)

build_module = sys.modules["tensorad.codegen.build"]

SCRIPT = r"""
import json, sys
import numpy as np
import tensorad as ta
A = ta.placeholder((7,), "float32", "A")
a = np.arange(7, dtype=np.float32)
keys, bad, stats = {}, [], {"compiled": 0, "loaded": 0}
for c in [float(x) for x in sys.argv[1].split(",")]:
    Y = ta.compute((7,), lambda i: A[i] * c + 1.0, name="Y")
    k = ta.build([Y], [A])
    keys[str(c)] = k.compiled.key
    stats[{"compiled": "compiled", "disk": "loaded"}[k.origin]] += 1
    if not np.array_equal(k(a), a * np.float32(c) + np.float32(1)):
        bad.append(c)
print(json.dumps({"stats": stats, "keys": keys, "bad": bad}))
"""

CONSTANTS = [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]


def _run(cache_dir, constants=CONSTANTS):
    env = {k: v for k, v in os.environ.items() if k != "TENSORAD_NO_DISK_CACHE"}
    env["TENSORAD_CACHE_DIR"] = str(cache_dir)
    out = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(map(str, constants))], env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, f"rc={out.returncode}\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def _entry_parts(path, key):
    payload = diskcache._unpack(key, path.read_bytes())
    assert payload is not None
    return build_module._unpack_entry(payload)


def _repack(path, key, meta_bytes, obj, zsource):
    import struct
    payload = struct.pack("<III", len(meta_bytes), len(obj), len(zsource)) + meta_bytes + obj + zsource
    path.write_bytes(diskcache.pack(key, payload))  # a valid hash over what we wrote


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs and symbolic links")
def test_attacked_entries_are_rebuilt_and_results_stay_right(tmp_path):
    cache = tmp_path / "cache"
    first = _run(cache)
    assert first["bad"] == [] and first["stats"]["compiled"] == len(CONSTANTS)
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700  # created private to the user
    key = {float(c): k for c, k in first["keys"].items()}
    path = {c: diskcache.path_of(k).name for c, k in key.items()}
    p = {c: cache / name for c, name in path.items()}

    # 2: another kernel's valid entry (A * 5 + 1) copied over this key's file
    p[2.0].write_bytes(p[5.0].read_bytes())
    # 3: a valid hash over junk object code (and 4: over truncated object code)
    meta, obj, zsrc = _entry_parts(p[3.0], key[3.0])
    _repack(p[3.0], key[3.0], json.dumps(meta).encode(), b"\x7fELF" + b"junk" * 64, zsrc)
    meta, obj, zsrc = _entry_parts(p[4.0], key[4.0])
    _repack(p[4.0], key[4.0], json.dumps(meta).encode(), obj[: len(obj) // 2], zsrc)
    # 6: malformed metadata under a valid hash: wrong types, then not JSON at all
    meta, obj, zsrc = _entry_parts(p[6.0], key[6.0])
    _repack(p[6.0], key[6.0], json.dumps({**meta, "nargs": "2", "libraries": 7}).encode(), obj, zsrc)
    meta, obj, zsrc = _entry_parts(p[7.0], key[7.0])
    _repack(p[7.0], key[7.0], b"{not json", obj, zsrc)
    # 8: a FIFO (reading it would block forever); 9: a symbolic link to /dev/zero (endless)
    p[8.0].unlink()
    os.mkfifo(p[8.0])
    p[9.0].unlink()
    os.symlink("/dev/zero", p[9.0])

    second = _run(cache)
    assert second["bad"] == []
    attacked = [2.0, 3.0, 4.0, 6.0, 7.0, 8.0, 9.0]
    assert second["stats"] == {"compiled": len(attacked), "loaded": len(CONSTANTS) - len(attacked)}
    # rebuilt entries were rewritten as regular files: a third process loads everything
    assert all(stat.S_ISREG(os.lstat(p[c]).st_mode) for c in CONSTANTS)
    assert _run(cache)["stats"] == {"compiled": 0, "loaded": len(CONSTANTS)}


def test_entry_for_another_key_or_damaged_is_not_returned(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORAD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TENSORAD_NO_DISK_CACHE", raising=False)
    diskcache.put("a" * 64, b"payload of a")
    assert diskcache.get("a" * 64) == b"payload of a"
    (tmp_path / f"{'b' * 64}.bin").write_bytes((tmp_path / f"{'a' * 64}.bin").read_bytes())
    assert diskcache.get("b" * 64) is None  # a copied entry names its own key
    good = (tmp_path / f"{'a' * 64}.bin").read_bytes()
    for damaged in (good[:-1], good[:10], b"", good[:-1] + bytes([good[-1] ^ 1])):
        (tmp_path / f"{'a' * 64}.bin").write_bytes(damaged)
        assert diskcache.get("a" * 64) is None


def test_oversized_and_foreign_entries_are_not_read(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORAD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TENSORAD_NO_DISK_CACHE", raising=False)
    monkeypatch.setattr(diskcache, "MAX_ENTRY_BYTES", 100)
    diskcache.put("c" * 64, b"x" * 200)
    assert diskcache.get("c" * 64) is None  # larger than the limit: not read
    (tmp_path / f"{'d' * 64}.bin").mkdir()
    assert diskcache.get("d" * 64) is None  # a directory, not a regular file
    if hasattr(os, "getuid"):
        monkeypatch.setattr(os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)
        monkeypatch.setattr(diskcache, "MAX_ENTRY_BYTES", 1000)
        assert diskcache.get("c" * 64) is None  # owned by another user
