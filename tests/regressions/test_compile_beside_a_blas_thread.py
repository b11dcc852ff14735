"""A build while another thread runs NumPy's matrix products: a compile in a forked child ran
OpenBLAS's fork handler, which stopped OpenBLAS's thread pool under the other thread's product, and
that thread waited for it for ever.  Beside another running Python thread a compile step runs in the
process (tensorad's own pool workers, :class:`ForkSafeThread` s, allow the fork).  The scenario runs
in a subprocess with a time limit (a regression hangs it, not the test run)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

from tensorad.codegen.jit import isolate

_SCRIPT = textwrap.dedent("""
    import threading
    import numpy as np
    import tensorad as ta

    x = np.ones((256, 300), np.float32)
    done = []

    def products():
        for _ in range(400):
            x @ x.T
        done.append(True)

    thread = threading.Thread(target=products, daemon=True)
    thread.start()
    for width in range(9, 13):
        X = ta.placeholder((8, width), "float32", name="X")
        kernel = ta.build(ta.compute((8, width), lambda a, b: X[a, b] * 2.0, name="Y"), [X])
        assert (kernel(np.ones((8, width), np.float32)) == 2).all()
    thread.join(timeout=30)
    assert done, "the thread's matrix products never finished"
""")


def test_products_in_another_thread_finish_while_kernels_compile():
    env = {**os.environ, "TENSORAD_NO_DISK_CACHE": "1", "OPENBLAS_NUM_THREADS": "2"}
    run = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]


def test_a_step_runs_here_beside_another_thread_and_forks_beside_pool_workers():
    stop = threading.Event()
    for kind in (threading.Thread, isolate.ForkSafeThread):
        thread = kind(target=stop.wait)
        thread.start()
        try:
            child = isolate.start(lambda: b"ok")
            assert (child.pid is None) == (kind is threading.Thread)
            assert child.result() == b"ok"
        finally:
            stop.set()
            thread.join()
            stop.clear()
