"""A fuzz worker died of SIGABRT inside LLVM's linking of a
kernel, after about 30,000 kernels in one process; the program passes alone.  Every kernel alive
has its object code linked with its own memory mappings (two a kernel), and past the system's
limit on a process's mappings (``vm.max_map_count``, 65,530 by default) LLVM's section allocator
aborts.  Now ``build`` raises a clear error before the limit instead
(``codegen/jit/engine._room_for_object``); the fuzzer's workers restart every few hundred programs.
Here the limit is made small so that the next kernel would cross it."""

from __future__ import annotations

import pytest
from tensorad.codegen.jit import engine as jit

import tensorad as ta


def _count_maps() -> int:
    with open("/proc/self/maps", "rb") as f:
        return sum(1 for _ in f)


@pytest.mark.skipif(jit._read_int(jit.MAP_LIMIT_FILE) is None,
                    reason="no /proc/sys/vm/max_map_count: a system without the limit (not Linux)")
def test_a_kernel_past_the_mapping_limit_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORAD_CACHE_DIR", str(tmp_path))  # (a fresh kernel: it must be linked)
    X = ta.placeholder((16,), "float32", "X")
    monkeypatch.setattr(jit.state(), "maps_counted", 0)  # (count afresh at the next link)
    limit = _count_maps() + jit.MAP_HEADROOM + 1  # (the next object's estimate crosses it)
    monkeypatch.setattr(jit.state(), "map_limit", limit)
    Y = ta.compute((16,), lambda i: X[i] * 3.0 - 0.5, name="Y469528")
    with pytest.raises(RuntimeError, match="vm.max_map_count"):
        ta.build([Y], [X])
    monkeypatch.setattr(jit.state(), "map_limit", limit + 10 * jit.MAP_HEADROOM)
    assert float(ta.build([Y], [X])(__import__("numpy").ones(16, "float32"))[0]) == 2.5
