"""The systems compared, and the small interface each one implements.

A system module (``sys_tensorad``, ``sys_torch``, ``sys_jax``, ``sys_numpy_peer``) provides

* ``setup(threads) -> dict`` (tensorad's also takes the target CPU to compile for): import the
  framework, apply its thread settings, return its
  version; raises :class:`Unavailable` ("not installed") when the framework is missing;
* ``forward(workload, arrays) -> Phase`` and ``backward(workload, arrays, head) -> Phase``;
* ``sweep(task, arrays) -> Phase`` for the GEMM and memory-bound sweeps.

Any of them raises :class:`Unavailable` for what the system cannot run (yet): the harness
reports the reason and goes on.  Modules are imported only inside the worker of their system,
so that PyTorch and JAX never load into a process that measures something else.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class Unavailable(Exception):
    """The system cannot run this: not installed, or not supported (yet)."""


@dataclass
class Phase:
    """One timed computation: ``fn()`` runs it, ``outputs(result)`` gives NumPy arrays."""

    fn: Callable[[], Any]
    outputs: Callable[[Any], list[np.ndarray]]
    sync: Callable[[Any], Any] | None = None
    prep_s: dict[str, float] = field(default_factory=dict)  # autodiff, build, jit, ...
    info: dict[str, Any] = field(default_factory=dict)       # e.g. tensorad's lowered work


# name -> (module, function prefix).  ``tensorad`` differentiates the topi forward with
# ta.JacobianRecursive; ``tensorad-hand`` compiles hand-written backward formulas.
SYSTEMS: dict[str, tuple[str, str]] = {
    "tensorad": ("benchmarks.sys_tensorad", "autodiff"),
    "tensorad-hand": ("benchmarks.sys_tensorad", "hand"),
    "torch": ("benchmarks.sys_torch", ""),
    "torch-compile": ("benchmarks.sys_torch_compile", ""),
    "jax": ("benchmarks.sys_jax", ""),
    "numpy": ("benchmarks.sys_numpy_peer", ""),
}
TENSORAD = ("tensorad", "tensorad-hand")
PEERS = ("torch", "torch-compile", "jax", "numpy")
# Systems that run the GEMM / memory sweeps (the hand variant has nothing different there).
SWEEP_SYSTEMS = ("tensorad", "torch", "jax", "numpy")


class System:
    """A system bound to its module; ``variant`` selects tensorad's autodiff or hand path."""

    def __init__(self, name: str) -> None:
        module, variant = SYSTEMS[name]
        self.name = name
        self.variant = variant
        try:
            self.module = importlib.import_module(module)
        except ImportError as e:  # pragma: no cover - our own modules import lazily
            raise Unavailable(f"not installed ({e})") from e

    def setup(self, threads: int, target: str = "") -> dict:
        if self.name in TENSORAD:
            return self.module.setup(threads, target)
        return self.module.setup(threads)

    def forward(self, workload, arrays) -> Phase:
        if self.variant:
            return self.module.forward(workload, arrays, self.variant)
        return self.module.forward(workload, arrays)

    def backward(self, workload, arrays, head) -> Phase:
        if self.variant:
            return self.module.backward(workload, arrays, head, self.variant)
        return self.module.backward(workload, arrays, head)

    def sweep(self, task: str, arrays: dict) -> Phase:
        return self.module.sweep(task, arrays)


def import_failure(package: str, e: ImportError) -> Unavailable:
    """"not installed" when ``package`` itself is missing, else the import error (a broken
    install or a half-written module is not the same thing as an absent peer)."""
    missing = isinstance(e, ModuleNotFoundError) and e.name == package
    return Unavailable("not installed" if missing else f"import failed: {type(e).__name__}: {e}")


def as_list(result: Any) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]
