"""The GEMM sweep (GFLOP/s) and the memory-bound sweep (GB/s), and what they are compared to.

GEMM ``C[M,N] = A[M,K] B[K,N]`` in float32 at square and skinny shapes (few rows: 32 x 1000 x 1000 and
64 x 4096 x 1024, in the quick run too; few columns; short sums); the peak is the best
GFLOP/s any BLAS peer reached in the sweep (the largest square, 2048 in a full run, is there for
that). Memory-bound: elementwise add, relu and exp on 64 MB arrays (exp: the issue's "exp-heavy
kernels at the speed of ``torch.exp``"; memory-bound where the vector exp keeps up, as on
AVX-512, compute-bound on narrower vectors) and a 2x2 average pooling of a 64 MB tensor; bytes
moved count each input read once and each output written once, and the measured bandwidth is
the best of a NumPy copy and the peers' adds. Outputs are preallocated where the system allows
it (``out=``; not in JAX, whose functions return new buffers), so the rows measure the loops
rather than the page faults of fresh 64 MB outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SweepTask:
    name: str          # row label
    task: str          # sweep task a system implements: gemm, add, relu, exp, avg_pool, copy
    shapes: dict[str, tuple[int, ...]]
    kind: str          # "gemm" (GFLOP/s) or "memory" (GB/s)
    probe: bool = False  # only there to measure the peak / bandwidth

    @property
    def flops(self) -> int:
        (m, k), (_, n) = self.shapes["A"], self.shapes["B"]
        return 2 * m * n * k

    @property
    def bytes(self) -> int:
        size = {k: int(np.prod(s)) * 4 for k, s in self.shapes.items()}
        if self.task == "avg_pool":
            return size["X"] + size["X"] // 4
        if self.task == "add":
            return 3 * size["A"]
        return 2 * size["A"]   # relu, exp, copy


def _gemm(m: int, n: int, k: int, probe: bool = False) -> SweepTask:
    return SweepTask(f"gemm {m}x{n}x{k}", "gemm", {"A": (m, k), "B": (k, n)}, "gemm", probe)


def _mem(task: str, n: int, probe: bool = False) -> SweepTask:
    if task == "avg_pool":
        side = int(round((n / 256) ** 0.5))
        shape = (16, 16, side, side)
        return SweepTask(f"avg_pool {shape}".replace(" ", ""), task, {"X": shape}, "memory", probe)
    shapes = {"A": (n,), "B": (n,)} if task == "add" else {"A": (n,)}
    return SweepTask(f"{task} {n * 4 // 2**20}MB" if n >= 2**18 else f"{task} {n}", task, shapes,
                     "memory", probe)


M64 = 16 * 2**20   # float32 elements in 64 MB


def sweep_tasks(mode: str) -> list[SweepTask]:
    """The sweep rows of a run mode: "full", "quick" or "tiny" (the smoke test)."""
    if mode == "tiny":
        return [_gemm(16, 16, 16), _gemm(4, 16, 12), _mem("add", 4096), _mem("relu", 4096),
                _mem("exp", 4096), _mem("avg_pool", 4096 * 4), _mem("copy", 4096, probe=True)]
    gemm = [_gemm(256, 256, 256), _gemm(512, 512, 512), _gemm(1024, 1024, 1024),
            _gemm(32, 1000, 1000), _gemm(64, 4096, 1024), _gemm(1000, 32, 1000), _gemm(1000, 1000, 32)]
    if mode == "quick":
        gemm = [gemm[0], gemm[1], gemm[3], gemm[4], _gemm(1024, 1024, 1024, probe=True)]
    else:
        gemm.append(_gemm(2048, 2048, 2048, probe=True))
    mem = [_mem("add", M64), _mem("relu", M64), _mem("exp", M64), _mem("avg_pool", M64),
           _mem("copy", M64, probe=True)]
    return gemm + mem


def sweep_inputs(t: SweepTask, seed: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-1, 1, size=s).astype(np.float32) for k, s in t.shapes.items()}


def sweep_reference(t: SweepTask, a: dict[str, np.ndarray]) -> list[np.ndarray]:
    """float64 oracle of a sweep row."""
    from . import sys_numpy

    if t.task == "gemm":
        return [a["A"].astype(np.float64) @ a["B"].astype(np.float64)]
    if t.task == "add":
        return [a["A"].astype(np.float64) + a["B"]]
    if t.task == "relu":
        return [np.maximum(a["A"], 0)]
    if t.task == "exp":
        return [np.exp(a["A"].astype(np.float64))]
    if t.task == "avg_pool":
        return [sys_numpy.forward("avg_pool", {"X": a["X"].astype(np.float64)})]
    return [a["A"]]


def rate(t: SweepTask, median_ms: float) -> float:
    """GFLOP/s or GB/s (10^9) at a median run time."""
    work = t.flops if t.kind == "gemm" else t.bytes
    return work / (median_ms * 1e-3) / 1e9
