"""A build while another thread runs NumPy's matrix products: a compile in a forked child ran
OpenBLAS's fork handler, which stopped OpenBLAS's thread pool under the other thread's product, and
that thread waited for it for ever.  Compiles run in worker processes started clean (no fork of this
process), contained beside any thread.  The scenario runs in a subprocess with a time limit (a
regression hangs it, not the test run)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest
from tensorad.codegen.jit.compile_job import Job, Machine, Pipeline

_SCRIPT = textwrap.dedent("""
    import threading
    import numpy as np
    import tensorad as ta
    from tensorad.codegen.jit import isolate

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
    assert isolate.WORKERS.live, "the kernels were not compiled in workers"
""")


@pytest.mark.slow
def test_products_in_another_thread_finish_while_kernels_compile():
    env = {**os.environ, "TENSORAD_NO_DISK_CACHE": "1", "OPENBLAS_NUM_THREADS": "2"}
    run = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]


def test_a_compile_beside_another_thread_is_contained(stand_in_workers):
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        job = Job("abort", Pipeline(3), Machine("stand-in", "", ""))
        assert stand_in_workers.run([job]) == [(None, 0.0)]  # (it died in its worker, not here)
    finally:
        stop.set()
        thread.join()
