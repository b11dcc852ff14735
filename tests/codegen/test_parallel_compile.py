"""A first build compiles the library pieces its kernel links beside the kernel, in parallel
children (codegen/jit/isolate.in_children, jit.compile_objects, gemmlib.LinkPlan).

What is checked here is the mechanism's contract -- every result in order, a dead child's module
compiled again down its ladder, a Python error raised where it belongs, the pieces stored and
read back by a new process, the product right (NumPy) -- never its speed: the wall time is
measured by ``python -m benchmarks.compile_time`` and ``docs/performance_history.md``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.jit import isolate


@pytest.mark.parametrize("jobs", [1, 2, 5])
def test_every_result_in_order_a_dead_child_none(jobs):
    steps = [lambda i=i: f"object {i}".encode() for i in range(7)]
    steps[3] = os.abort  # (LLVM's abort, in its child)
    done = isolate.in_children(steps, jobs)
    assert [obj for obj, _ in done] == [f"object {i}".encode() if i != 3 else None for i in range(7)]
    assert all(cpu >= 0.0 for _, cpu in done)


def test_a_python_error_of_a_step_is_raised_here():
    def bad() -> bytes:
        raise ValueError("bad IR")

    with pytest.raises(ValueError, match="bad IR"):
        isolate.in_children([lambda: b"fine", bad], 2)


def _children() -> list[int]:
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                out.append(int(entry))
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the process table in /proc")
def test_an_error_leaves_no_child_behind():
    def bad() -> bytes:
        raise ValueError("bad IR")

    big = bytes(1 << 22)  # (children blocked writing 4 MB into pipes nobody reads yet)
    before = set(_children())
    with pytest.raises(ValueError, match="bad IR"):
        isolate.in_children([bad, lambda: big, lambda: big], 3)
    assert set(_children()) <= before


def test_without_a_fork_the_steps_run_here(monkeypatch):
    def no_fork() -> int:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(os, "fork", no_fork)
    assert [obj for obj, _ in isolate.in_children([lambda: b"a", lambda: b"b"], 2)] == [b"a", b"b"]


def test_large_results_from_several_children_at_once():
    # (more than a pipe holds, from children running together: read as they come, no deadlock)
    big = [bytes([i]) * (3 << 20) for i in range(3)]
    done = isolate.in_children([lambda b=b: b for b in big], 3)
    assert [obj for obj, _ in done] == big


_LOOP = """
define void @f(ptr %p) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %n, %loop ]
  %a = getelementptr float, ptr %p, i64 %i
  %v = load float, ptr %a
  %w = fmul float %v, 2.0
  store float %w, ptr %a
  %n = add i64 %i, 1
  %c = icmp eq i64 %n, 64
  br i1 %c, label %out, label %loop
out:
  ret void
}
"""


def test_a_module_whose_child_dies_goes_down_its_ladder(monkeypatch):
    monkeypatch.setattr("tensorad.codegen.target.usable_cpus", lambda: 2)
    emit = jit._emit
    o1, o3 = (emit(_LOOP, jit.Pipeline(level), jit.host()) for level in (1, 3))  # (deterministic)
    plain = emit(_LOOP, jit.Pipeline(0), jit.host())
    assert o1 != o3  # (-O3 vectorizes the loop)

    def aborting(text, pipeline, target):
        if pipeline.level == 3:  # (both -O3 rungs die, in their children)
            os.abort()
        return emit(text, pipeline, target)

    monkeypatch.setattr(jit, "_emit", aborting)
    done = jit.compile_objects([(lambda: _LOOP, 3, False), (lambda: _LOOP, 0, False)])
    assert [obj for obj, _ in done] == [o1, plain]


_FIRST_BUILD = r"""
import json, sys
import numpy as np
import tensorad as ta
A = ta.placeholder((70, 90), "float32", "A")
Bm = ta.placeholder((90, 50), "float32", "B")
k = ta.reduce_axis((0, 90), "k")
C = ta.compute((70, 50), lambda i, j: ta.sum(A[i, k] * Bm[k, j], k), name="C")
f = ta.build([C], [A, Bm], microkernel=True)
rng = np.random.default_rng(1)
a, b = rng.standard_normal((70, 90)).astype("float32"), rng.standard_normal((90, 50)).astype("float32")
err = float(np.abs(f(a, b) - a.astype("float64") @ b.astype("float64")).max())
print(json.dumps({"library": f.compiled.library, "err": err}))
"""


def test_a_first_build_compiles_the_pieces_a_new_process_reads_them(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TENSORAD_NO_DISK_CACHE"}
    env["TENSORAD_CACHE_DIR"] = str(tmp_path)
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _FIRST_BUILD], env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0 and out.stderr == "", out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["library"] and set(first["library"].values()) == {"compiled"}
    assert any(name.endswith("_core") for name in first["library"])  # (a core and its packers)
    assert second["library"] == {name: "disk" for name in first["library"]}
    assert first["err"] < 1e-3 and second["err"] < 1e-3
