"""Adaptive timing: warm up, then the median and interquartile range of repeated runs.

One timing is never trusted.  ``measure`` calls the function once to warm it up (first-call
costs: JIT compilation, page faults of fresh buffers, lazy initialisation), estimates its
duration, then chooses how many samples to take so that the whole measurement lasts about
``target_s`` (at least ``min_runs`` samples).  Functions that take microseconds are called
``batch`` times per sample so that the timer's resolution and the loop's overhead do not
dominate; a sample is then the mean over its batch.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

# A sample shorter than this is batched (several calls per sample).
MIN_SAMPLE_S = 1e-3
MAX_SAMPLES = 200
# Calls slower than this get 3 samples (the least that has a median and a spread) instead of
# ``min_runs``: a 2-second kernel is timed in 6 s, not 10.
SLOW_CALL_S = 0.25


@dataclass(frozen=True)
class Timing:
    """Summary of the samples of one measurement, in milliseconds."""

    median_ms: float
    q1_ms: float
    q3_ms: float
    min_ms: float
    runs: int      # samples taken
    batch: int     # calls per sample
    total_s: float  # wall time spent measuring (warm-up included)

    @property
    def iqr_ms(self) -> float:
        return self.q3_ms - self.q1_ms

    def to_json(self) -> dict:
        d = asdict(self)
        d["iqr_ms"] = self.iqr_ms
        return d


def quartiles(samples: list[float]) -> tuple[float, float, float]:
    """(Q1, median, Q3) by linear interpolation; defined for one sample or more."""
    xs = sorted(samples)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[1], q[2]


def plan(estimate_s: float, target_s: float, min_runs: int) -> tuple[int, int]:
    """(samples, batch) for a function that takes about ``estimate_s`` per call."""
    estimate_s = max(estimate_s, 1e-7)
    batch = 1 if estimate_s >= MIN_SAMPLE_S else math.ceil(MIN_SAMPLE_S / estimate_s)
    runs = int(target_s / (estimate_s * batch))
    floor = 3 if estimate_s > SLOW_CALL_S else min_runs
    return min(max(runs, floor), MAX_SAMPLES), batch


def measure(fn: Callable[[], object], target_s: float = 0.3, min_runs: int = 5,
            warmup: int = 1, sync: Callable[[object], object] | None = None,
            estimate_s: float | None = None) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then adaptive repeats (see module doc).

    ``sync`` is applied to each result inside the timed region (JAX's asynchronous dispatch
    needs ``block_until_ready``).  ``warmup=0`` is allowed when the caller already ran ``fn``
    and passes the duration of that call as ``estimate_s``.
    """
    if min_runs < 3:
        raise ValueError("min_runs must be at least 3: a single timing is never reported")
    if warmup < 1 and estimate_s is None:
        raise ValueError("warmup=0 needs estimate_s (the duration of a call already made)")
    start = time.perf_counter()
    sync = sync or (lambda r: r)
    estimate = estimate_s
    for _ in range(warmup):
        t0 = time.perf_counter()
        sync(fn())
        estimate = time.perf_counter() - t0
    # A second, cheap estimate for fast functions (the first call may still be cold).
    if estimate < 0.05:
        t0 = time.perf_counter()
        sync(fn())
        estimate = min(estimate, time.perf_counter() - t0)
    runs, batch = plan(estimate, target_s, min_runs)
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(batch):
            sync(fn())
        samples.append((time.perf_counter() - t0) / batch)
    q1, med, q3 = quartiles(samples)
    return Timing(median_ms=med * 1e3, q1_ms=q1 * 1e3, q3_ms=q3 * 1e3, min_ms=min(samples) * 1e3,
                  runs=runs, batch=batch, total_s=time.perf_counter() - start)
