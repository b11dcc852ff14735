"""The benchmark workloads: the seed's table (DESIGN.md), with the seed's 2018 figures.

A workload names its inputs in the order every system receives them, the inputs whose
gradients are asked for, and a ``kind`` that selects its formulas in each system
(``sys_numpy``, ``sys_torch``, ``sys_jax``, ``sys_tensorad``, ``handwritten``).  ``tiny``
shapes keep the same structure at a size the smoke test runs in milliseconds.

Two suites: ``seed`` (the seed's table) and ``layers``, the ordinary layers of a ResNet, a
Transformer block and a classifier head at realistic shapes, none of which tensorad was tuned on.
Their float64 reference is PyTorch's autograd when PyTorch is installed (``reference.py``).

Inputs are uniform in ``[-scale, scale]`` (the seed's natural range ``[-1, 1]``), except the
inputs a workload names in ``params["onehot"]`` (one-hot rows: a classifier's targets) and
``params["positive"]`` (uniform in ``[0.5, 1.5]``: normalization scales).  The homebrew
softmax's logits (dense sums 1000 products) then reach about 44, where a row's sum of exps
squared is at the edge of float32's range -- a gradient that rewrote ``E / S / S`` into
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
    suite: str = "seed"

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

NO_SEED = (0.0, 0.0)
CONV_S1 = {"stride": 1, "padding": 1}
CONV_S2 = {"stride": 2, "padding": 1}
LAYERS: list[Workload] = [
    Workload("conv3x3_relu", "conv_relu", "ResNet conv 3x3 stride 1 pad 1 + ReLU (grad X, W)",
             {"X": (8, 64, 56, 56), "W": (64, 64, 3, 3)}, {"X": (2, 3, 7, 7), "W": (4, 3, 3, 3)},
             ("X", "W"), NO_SEED, params=CONV_S1, suite="layers"),
    Workload("conv3x3s2_relu", "conv_relu", "ResNet conv 3x3 stride 2 pad 1 + ReLU (grad X, W)",
             {"X": (8, 64, 56, 56), "W": (128, 64, 3, 3)}, {"X": (2, 3, 7, 7), "W": (4, 3, 3, 3)},
             ("X", "W"), NO_SEED, params=CONV_S2, suite="layers"),
    Workload("batch_norm", "batch_norm", "batch norm, training (grad X, gamma, beta)",
             {"X": (8, 64, 56, 56), "gamma": (64,), "beta": (64,)},
             {"X": (2, 3, 4, 5), "gamma": (3,), "beta": (3,)}, ("X", "gamma", "beta"), NO_SEED,
             params={"positive": ("gamma",)}, suite="layers"),
    Workload("max_pool3s2", "max_pool_pad", "max pool 3x3 stride 2 pad 1 (grad X)",
             {"X": (8, 64, 56, 56)}, {"X": (2, 3, 7, 7)}, ("X",), NO_SEED, suite="layers"),
    Workload("global_avg_pool", "global_avg_pool", "global average pool (grad X)",
             {"X": (16, 256, 14, 14)}, {"X": (2, 3, 4, 5)}, ("X",), NO_SEED, suite="layers"),
    Workload("layer_norm", "layer_norm", "layer norm over 256 features (grad X, gamma, beta)",
             {"X": (1024, 256), "gamma": (256,), "beta": (256,)},
             {"X": (6, 8), "gamma": (8,), "beta": (8,)}, ("X", "gamma", "beta"), NO_SEED,
             params={"positive": ("gamma",)}, suite="layers"),
    Workload("attention", "attention", "attention softmax(QK^T/8)V, 8 heads x 256 tokens (grad Q, K, V)",
             {"Q": (8, 256, 64), "K": (8, 256, 64), "V": (8, 256, 64)},
             {"Q": (2, 5, 4), "K": (2, 5, 4), "V": (2, 5, 4)}, ("Q", "K", "V"), NO_SEED, suite="layers"),
    Workload("gelu_mlp", "gelu_mlp", "GELU MLP 256 -> 1024 -> 256, 512 tokens (grad all)",
             {"X": (512, 256), "W1": (1024, 256), "B1": (1024,), "W2": (256, 1024), "B2": (256,)},
             {"X": (4, 6), "W1": (8, 6), "B1": (8,), "W2": (6, 8), "B2": (6,)},
             ("X", "W1", "B1", "W2", "B2"), NO_SEED, suite="layers"),
    Workload("log_softmax_nll", "log_softmax_nll", "log-softmax + NLL, 1000 classes (grad logits)",
             {"Z": (256, 1000), "T": (256, 1000)}, {"Z": (4, 7), "T": (4, 7)}, ("Z",), NO_SEED,
             params={"onehot": ("T",)}, suite="layers"),
]
WORKLOADS = WORKLOADS + LAYERS
SUITES = ("seed", "layers")
BY_NAME = {w.name: w for w in WORKLOADS}


def select(names: list[str] | None, suites: tuple[str, ...] = SUITES) -> list[Workload]:
    """The workloads named (in table order), those of ``suites`` when ``names`` is empty;
    unknown names raise."""
    if not names:
        return [w for w in WORKLOADS if w.suite in suites]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    return [w for w in WORKLOADS if w.name in names]


def make_inputs(w: Workload, tiny: bool = False, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic float32 inputs (the same in every worker process)."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, s in w.input_shapes(tiny).items():
        if k in w.params.get("onehot", ()):
            rows = int(np.prod(s[:-1]))
            onehot = np.zeros((rows, s[-1]), np.float32)
            onehot[np.arange(rows), rng.integers(0, s[-1], size=rows)] = 1.0
            out[k] = onehot.reshape(s)
        elif k in w.params.get("positive", ()):
            out[k] = rng.uniform(0.5, 1.5, size=s).astype(np.float32)
        else:
            out[k] = rng.uniform(-w.scale, w.scale, size=s).astype(np.float32)
    return out


def make_head(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    """The head gradient H (the upstream gradient of a hypothetical loss w.r.t. Y)."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape).astype(np.float32)
