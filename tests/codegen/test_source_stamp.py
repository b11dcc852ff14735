"""The source hash (``codegen/jit.source_hash``: what keys kernels and differentiated programs
to the compiler that made them) is remembered in the disk cache for the files' stamps: a new
process reads it instead of 1.6 MB of source.  It must equal the hash of the files, follow any
write to them, and never trust a malformed or foreign record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from tensorad.codegen.jit import disk_cache as diskcache
from tensorad.codegen.jit import engine as jit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PRINT = ("from tensorad.codegen.jit import engine as jit; "
          "from tensorad.codegen.gemm import version as libversion; "
          "print(jit.source_hash(), libversion.version())")


def _fresh_process(env_extra: dict) -> str:
    env = {**os.environ, **env_extra}
    out = subprocess.run([sys.executable, "-c", _PRINT], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def test_a_remembered_hash_is_the_hash_of_the_files(tmp_path):
    cache = {"TENSORAD_CACHE_DIR": str(tmp_path)}
    first = _fresh_process(cache)  # computes and remembers
    assert len(list(tmp_path.glob("*.bin"))) == 1
    second = _fresh_process(cache)  # reads the record
    scratch = _fresh_process({"TENSORAD_NO_DISK_CACHE": "1"})  # never remembered
    assert first == second == scratch


def test_the_stamp_follows_a_write_of_the_same_size(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("x = 1\n")
    before = jit._source_stamp([str(f)])
    time.sleep(0.01)
    f.write_text("x = 2\n")  # same size, new contents
    assert jit._source_stamp([str(f)]) != before
    os.utime(f, ns=(0, 0))  # a modification time set back does not bring the old stamp back
    assert jit._source_stamp([str(f)]) != before


@pytest.mark.parametrize("record", [
    b"not json", b"[]", json.dumps({"stamp": "another", "source": "0" * 64, "library": "0" * 64}).encode(),
    json.dumps({"stamp": "S", "source": "zz", "library": "0" * 64}).encode(),
    json.dumps({"stamp": "S", "source": "0" * 64}).encode(),
])
def test_a_malformed_or_foreign_record_is_not_trusted(tmp_path, monkeypatch, record):
    monkeypatch.setenv("TENSORAD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TENSORAD_NO_DISK_CACHE", raising=False)
    diskcache.put("k" * 64, record)
    assert jit._remembered("k" * 64, "S") is None
    good = json.dumps({"stamp": "S", "source": "1" * 64, "library": "2" * 64}).encode()
    diskcache.put("k" * 64, good)
    assert jit._remembered("k" * 64, "S") == ("1" * 64, "2" * 64)
