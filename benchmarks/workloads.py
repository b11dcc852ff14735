"""The benchmark workloads: the seed's table (DESIGN.md), with the seed's 2018 figures.

A workload names its inputs in the order every system receives them, the inputs whose
gradients are asked for, and a ``kind`` that selects its formulas in each system
(``sys_numpy``, ``sys_torch``, ``sys_jax``, ``sys_tensorad``, ``handwritten``).  ``tiny``
shapes keep the same structure at a size the smoke test runs in milliseconds.

Inputs are uniform in ``[-scale, scale]``, by default the seed's natural range ``[-1, 1]``: the
homebrew softmax's logits (dense sums 1000 products) then reach about 44, where a row's sum of
exps squared is at the edge of float32's range -- a gradient that rewrote ``E / S / S`` into
``E / (S * S)`` is wrong there (issue 8, D0; ``tests/regressions/test_fastmath.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str
    title: str
    shapes: dict[str, tuple[int, ...]]
    tiny: dict[str, tuple[int, ...]]
    grads: tuple[str, ...]
    seed_ms: tuple[float, float]   # seed 003's forward and backward ms (TVM, 2018)
    scale: float = 1.0
    params: dict = field(default_factory=dict)

    def input_shapes(self, tiny: bool = False) -> dict[str, tuple[int, ...]]:
        return self.tiny if tiny else self.shapes

    def describe(self, tiny: bool = False) -> str:
        shapes = " ".join(f"{k}{tuple(v)}".replace(" ", "") for k, v in self.input_shapes(tiny).items())
        return f"{shapes}; grad {','.join(self.grads)}"


POOL = {"kernel": (2, 2), "stride": (2, 2)}

WORKLOADS: list[Workload] = [
    Workload("dense_big", "dense", "dense (grad W, B)",
             {"X": (32, 10000), "W": (3000, 10000), "B": (3000,)},
             {"X": (4, 64), "W": (48, 64), "B": (48,)}, ("W", "B"), (858, 928)),
    Workload("dense", "dense", "dense (grad X, W, B)",
             {"X": (32, 1000), "W": (1000, 1000), "B": (1000,)},
             {"X": (4, 32), "W": (24, 32), "B": (24,)}, ("X", "W", "B"), (28, 60)),
    Workload("conv2d", "conv2d", "conv2d stride 1, no padding (grad X, W)",
             {"X": (32, 17, 28, 28), "W": (19, 17, 3, 3)},
             {"X": (2, 3, 8, 8), "W": (4, 3, 3, 3)}, ("X", "W"), (52, 118)),
    Workload("avg_pool", "avg_pool", "avg pool 2x2 stride 2 (grad X)",
             {"X": (32, 17, 280, 280)}, {"X": (2, 3, 8, 8)}, ("X",), (14, 233), params=POOL),
    Workload("softmax_homebrew", "softmax_homebrew", "softmax homebrew exp(dense)/sum (grad X, W)",
             {"X": (60, 1000), "W": (1000, 1000)}, {"X": (3, 16), "W": (20, 16)}, ("X", "W"),
             (10, 223)),
    Workload("flatten", "flatten", "flatten (grad X)",
             {"X": (32, 10, 20, 25)}, {"X": (2, 3, 4, 5)}, ("X",), (0, 1568)),
    Workload("max_pool", "max_pool", "max pool 2x2 stride 2 (grad X)",
             {"X": (1, 2, 100, 100)}, {"X": (1, 2, 8, 8)}, ("X",), (0, 475), params=POOL),
    Workload("softmax", "softmax", "softmax, topi (grad X)",
             {"X": (60, 200)}, {"X": (3, 12)}, ("X",), (0, 785)),
]

BY_NAME = {w.name: w for w in WORKLOADS}


def select(names: list[str] | None) -> list[Workload]:
    """The workloads named (in table order), all when ``names`` is empty; unknown names raise."""
    if not names:
        return list(WORKLOADS)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    return [w for w in WORKLOADS if w.name in names]


def make_inputs(w: Workload, tiny: bool = False, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic float32 inputs (the same in every worker process)."""
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-w.scale, w.scale, size=s).astype(np.float32)
            for k, s in w.input_shapes(tiny).items()}


def make_head(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    """The head gradient H (the upstream gradient of a hypothetical loss w.r.t. Y)."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape).astype(np.float32)
