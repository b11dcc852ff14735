"""Limiting every system of a benchmark process to N threads, cleanly.

Each (thread count, system) pair runs in its own worker process (``benchmarks.worker``), and
the limit is applied before NumPy, PyTorch or JAX is imported, because most of their thread
pools read their size once, at import or first use:

* CPU affinity (``os.sched_setaffinity``) pins the process to N CPUs.  This is the setting
  every runtime respects: XLA's CPU client sizes its thread pools from the schedulable CPUs,
  OpenMP (libgomp, used by tensorad's kernels and by PyTorch) and OpenBLAS default to them, and
  it also stops a 1-thread run from migrating between cores.
* ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` fix the OpenMP and BLAS
  pools (NumPy's matmul, PyTorch's intra-op pool) to N explicitly.
* ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`` for N = 1 makes XLA run its Eigen kernels
  (matmul, convolution) on the calling thread.
* PyTorch additionally gets ``torch.set_num_threads(N)`` and one inter-op thread
  (``configure_torch``), tensorad kernels ``ta.build(..., num_threads=N)``.

Separate processes also keep the runtimes from disturbing each other: PyTorch's and XLA's
worker threads spin for a while after each parallel region, which on a 2-core machine steals
the second core from whichever system is measured next, and PyTorch bundles its own libgomp.
"""

from __future__ import annotations

import os

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS")


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on, in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def thread_env(n: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker process limited to ``n`` threads."""
    env = dict(os.environ if base is None else base)
    for key in THREAD_ENV:
        env[key] = str(n)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_cpu_multi_thread_eigen")]
    if n == 1:
        flags.append("--xla_cpu_multi_thread_eigen=false")
    env["XLA_FLAGS"] = " ".join(flags)
    return env


def apply_thread_limit(n: int) -> list[int]:
    """Pin this process to the first ``n`` allowed CPUs and set the thread variables.

    Call before importing NumPy, PyTorch or JAX.  Returns the CPUs used (fewer than ``n`` when
    the machine has fewer: the caller reports it).
    """
    cpus = allowed_cpus()[:n]
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    os.environ.update({k: v for k, v in thread_env(n).items() if k in THREAD_ENV or k == "XLA_FLAGS"})
    return cpus


def configure_torch(torch, n: int) -> None:
    """PyTorch's own thread settings (its inter-op pool can be set once per process only)."""
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
