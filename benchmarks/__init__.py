"""tensorad's benchmark harness: ``python -m benchmarks`` (``make bench``).

Runs the seed's workloads (``workloads.py``) forward and backward on tensorad (autodiff and
hand-written gradients) and its peers (PyTorch eager, JAX jit, NumPy), at 1 and 2 threads, each
(thread count, system) in its own process (``threads.py``); plus a GEMM and a memory-bound
sweep (``sweeps.py``).  Prints a table, saves JSON and a chart under the untracked
``benchmarks/results/``; ``python -m benchmarks.readme`` (``make bench-readme``) publishes a full,
quiet run as the README's table and chart (``benchmarks/readme/``).

This package deliberately imports nothing heavy at import time: the worker processes must set
their thread limits before NumPy is loaded.
"""
