"""LLVM 22.1's SLP vectorizer never finished on one kernel -- a checked-mode
build (every access bounds-tested, ``checked=True``) of a gather through a ``take(mode="clip")``
of a ``take`` index, for an AVX2 target (``-mcpu=haswell`` or ``-mattr=-avx512f``; the AVX-512
host compiled it in 30 ms).  The build hung forever, and the fuzz runner did not see it: the
loop ran in a forked compile child, whose CPU a worker's limit did not count.

Now a compile child runs under a CPU-time limit (``isolate.CPU_LIMIT_SECONDS``) and one past it
is treated like an aborted one: the next rung of ``jit.ladder`` (-O3 without SLP) compiles the
module.  The build runs in a subprocess (a regression hangs it, not the test run) with the limit
lowered to 2 CPU-s; the oracle is ``ta.evaluate``, which compiles nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from tensorad.codegen.jit import engine as jit
from tensorad.codegen.jit import isolate

_CHILD = textwrap.dedent("""
    import numpy as np
    import tensorad as ta
    from tensorad.codegen.jit import isolate

    isolate.CPU_LIMIT_SECONDS = 2
    g = ta.placeholder((1, 17), "int32", name="g")
    r0 = ta.reduce_axis((1, 3), name="r0")
    t0 = ta.compute((5, 2), lambda i0, i1: ta.sum(ta.cast("float32", g[0, (i0 * 2 + r0) % 17]),
                                                  axis=r0, where=r0 != 2), name="t0")
    t2 = ta.compute((2, 5, 16), lambda i0, i1, i2: t0.take(4 - i2 % 5, g[0, i1] * 2 + 1, mode="clip"),
                    name="t2")
    f = ta.build(t2, [g], checked=True, target="llvm -mcpu=haswell")
    x = np.random.default_rng(811880).integers(-3, 4, (1, 17)).astype(np.int32)
    np.testing.assert_array_equal(f(x), ta.evaluate(t2, {g: x}))
    print("ok")
""")


def test_a_looping_llvm_pass_falls_to_the_next_rung():
    env = dict(os.environ, TENSORAD_NO_DISK_CACHE="1")
    run = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300,
                         env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "ok"


def test_a_child_past_its_cpu_limit_is_stopped():
    def spin() -> bytes:
        while True:
            pass

    begin = isolate.cpu_seconds()
    assert isolate.in_child(spin, cpu_limit=1) is None
    assert isolate.cpu_seconds() - begin >= 0.9  # (it computed until the limit, then stopped)
    assert isolate.in_child(lambda: b"object code", cpu_limit=1) == b"object code"


def test_the_ladder_goes_past_a_rung_that_loops(monkeypatch):
    monkeypatch.setattr(isolate, "CPU_LIMIT_SECONDS", 1)

    def step(pipeline: jit.Pipeline) -> bytes:
        while pipeline.slp:
            pass
        return repr(pipeline).encode()

    assert jit._contained(jit.ladder(3), step) == repr(jit.Pipeline(3, slp=False)).encode()


def test_a_child_dies_with_its_parent(tmp_path, running):
    # the compile child of a killed process does not go on computing as an orphan
    pid_file = tmp_path / "child.pid"
    code = textwrap.dedent(f"""
        import os
        from tensorad.codegen.jit import isolate

        def spin():
            open({str(pid_file)!r}, "w").write(str(os.getpid()))
            while True:
                pass

        isolate.in_child(spin, cpu_limit=60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 60
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(child)
