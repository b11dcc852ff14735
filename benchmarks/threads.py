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

* ``peer_isa_env``: when tensorad compiles for a CPU narrower than the host (``--target "llvm
  -mcpu=haswell"`` on an AVX-512 machine), the peers are held to the same instruction set where
  their libraries allow it -- oneDNN (``ONEDNN_MAX_CPU_ISA``), PyTorch's own kernels
  (``ATEN_CPU_CAPABILITY``), MKL (``MKL_ENABLE_INSTRUCTIONS``), OpenBLAS (``OPENBLAS_CORETYPE``)
  and XLA's generated code (``--xla_cpu_max_isa``) -- so that the column measures what a user of
  that CPU sees.  XLA's matrix products (library kernels, not generated code) ignore the
  flag and keep the host's vectors (measured: a 1024^3 ``jnp.dot`` at 188 GFLOP/s on one
  AVX-512 core with and without it), so JAX stays the stricter peer there.

Separate processes also keep the runtimes from disturbing each other: PyTorch's and XLA's
worker threads spin for a while after each parallel region, which on a 2-core machine steals
the second core from whichever system is measured next, and PyTorch bundles its own libgomp.
"""

from __future__ import annotations

import os
import sys

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS")


# (vector bits, FMA) of tensorad's target -> each peer library's cap at that instruction set
_PEER_ISA = {
    (256, True): {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
                  "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell", "xla": "AVX2"},
    (256, False): {"ONEDNN_MAX_CPU_ISA": "AVX", "ATEN_CPU_CAPABILITY": "default",
                   "MKL_ENABLE_INSTRUCTIONS": "AVX", "OPENBLAS_CORETYPE": "SandyBridge", "xla": "AVX"},
    (128, False): {"ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default",
                   "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "OPENBLAS_CORETYPE": "Nehalem", "xla": "SSE4_2"},
}


def peer_isa_env(target_bits: int, target_fma: bool, host_bits: int) -> dict[str, str]:
    """The variables that hold the peers to tensorad's target's instruction set (see the
    module's docstring); none when the target is as wide as the host (or is not x86)."""
    cap = _PEER_ISA.get((target_bits, target_fma if target_bits == 256 else False))
    if target_bits >= host_bits or cap is None:
        return {}
    env = {k: v for k, v in cap.items() if k != "xla"}
    env["XLA_FLAGS"] = f"--xla_cpu_max_isa={cap['xla']}"
    return env


def with_peer_isa(env: dict[str, str], cap: dict[str, str]) -> dict[str, str]:
    """``env`` with ``cap`` (:func:`peer_isa_env`) applied; XLA's flag joins the others."""
    out = dict(env)
    for key, value in cap.items():
        if key == "XLA_FLAGS":
            kept = [f for f in out.get(key, "").split() if not f.startswith("--xla_cpu_max_isa")]
            out[key] = " ".join(kept + [value])
        else:
            out[key] = value
    return out


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


def apply_thread_limit(n: int, numpy_blas: bool = True) -> list[int]:
    """Pin this process to the first ``n`` allowed CPUs and set the thread variables.

    Call before importing NumPy, PyTorch or JAX.  Returns the CPUs used (fewer than ``n`` when
    the machine has fewer: the caller reports it).  ``numpy_blas=False``: NumPy's BLAS gets one
    thread -- in a process that times another system, NumPy only computes references, and
    OpenBLAS's idle threads spin for ~0.1 s after each call on the cores that system is timed
    on (measured: a 2-thread 512^3 tensorad product right after a float64 ``a @ b`` took 1.83 ms
    a call, 0.97 without it).
    """
    cpus = allowed_cpus()[:n]
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    env = thread_env(n)
    if not numpy_blas:
        env["OPENBLAS_NUM_THREADS"] = "1"
    os.environ.update({k: v for k, v in env.items() if k in THREAD_ENV or k == "XLA_FLAGS"})
    return cpus


def configure_torch(torch, n: int) -> None:
    """PyTorch's own thread settings (its inter-op pool can be set once per process only)."""
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def peer_cap(target: str) -> dict[str, str]:
    """The peers' instruction-set cap for tensorad's ``target`` (:func:`peer_isa_env`; none
    for the host, ``""`` or ``"llvm"``, or a target this machine cannot run)."""
    if not target or target == "llvm":
        return {}
    from tensorad.codegen.target import host_target, parse_target

    tgt, host = parse_target(target), host_target()
    return peer_isa_env(tgt.vector_bits, tgt.fma, host.vector_bits) if tgt.runs_here(host) else {}


def run_again_with_peer_cap(target: str, argv: list[str]) -> None:
    """For a process that runs the peers itself (``target_bench``, ``tools/probe_unseen.py``):
    when ``target`` calls for a cap this process was not started with, start it again (``argv``
    after the interpreter) with the cap in its environment, which torch and the BLAS read when
    they load.  Returns only when no restart is needed."""
    cap = peer_cap(target)
    if cap and os.environ.get("ONEDNN_MAX_CPU_ISA") != cap["ONEDNN_MAX_CPU_ISA"]:
        print(f"peers held to {cap['ONEDNN_MAX_CPU_ISA']} (running again with the cap)", flush=True)
        os.execve(sys.executable, [sys.executable] + argv, with_peer_isa(dict(os.environ), cap))
