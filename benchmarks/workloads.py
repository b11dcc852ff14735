"""The benchmark workloads: the seed's table (DESIGN.md), with the seed's 2018 figures.

A workload names its inputs in the order every system receives them, the inputs whose
gradients are asked for, and a ``kind`` that selects its formulas in each system
(``sys_numpy``, ``sys_torch``, ``sys_jax``, ``sys_tensorad``, ``handwritten``).  ``tiny``
shapes keep the same structure at a size the smoke test runs in milliseconds.

Five suites: ``seed`` (the seed's table); ``layers``, the ordinary layers of a ResNet, a
Transformer block and a classifier head at realistic shapes, none of which tensorad was tuned on;
``models``, whole models (a Transformer block, a small CNN, a ResNet basic block, an MLP
classifier, an LSTM) from their inputs to the loss;
``norms`` (not in the default set), the layers' neighbours: group/instance/RMS/layer norms at
other and odd widths, a language-model head with label smoothing, SwiGLU, causal ViT attention
(197 tokens), an embedding table's gradient, long-sequence attention, residual + layer norm;
``spelled`` (not in the default set), layers written with ``ta.compute`` as a user writes them,
beside their ``ta.topi`` spelling.
Their float64 reference is PyTorch's autograd when PyTorch is installed (``reference.py``).

Inputs are uniform in ``[-scale, scale]`` (the seed's natural range ``[-1, 1]``), except the
inputs a workload names in ``params["onehot"]`` (one-hot rows: a classifier's targets) and
``params["positive"]`` (uniform in ``[0.5, 1.5]``: normalization scales).  The homebrew
softmax's logits (dense sums 1000 products) then reach about 44, where a row's sum of exps
squared is at the edge of float32's range -- a gradient that rewrote ``E / S / S`` into
``E / (S * S)`` is wrong there (``tests/regressions/test_fastmath.py``), and so is JAX's: its
division rule multiplies by ``S^-2``, which (or whose product with the head) is a float32 subnormal on
the two rows whose sums of exps pass 6e18, and XLA's CPU code flushes subnormals to zero; the check
reports this workload's JAX backward as a MISMATCH (``tests/benchmarks/test_harness.py``).
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
    seed_ms: tuple[float, float]   # the seed's forward and backward ms (TVM, 2018)
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
# Whole models, forward (the loss) and backward (every parameter's gradient): a pre-norm
# Transformer block (embedding, layer norm, causal attention, GELU MLP, cross-entropy over the
# next token), the small CNN of examples/torch_cnn.py (conv + bias + ReLU + max pool + dense
# + cross-entropy), a ResNet basic block with a classifier head, a 3-layer MLP classifier and
# 12 steps of an LSTM cell (gates in PyTorch's order i, f, g, o).  ``params["ints"]`` names the
# integer inputs and their ranges (full, tiny).
TRANSFORMER = {"B": 4, "L": 64, "D": 128, "HEADS": 4, "V": 512}
TRANSFORMER_TINY = {"B": 2, "L": 4, "D": 8, "HEADS": 4, "V": 5}


def _transformer_shapes(c: dict) -> dict[str, tuple[int, ...]]:
    b, n, d, v = c["B"], c["L"], c["D"], c["V"]
    return {"tokens": (b, n), "labels": (b, n), "E": (v, d), "g1": (d,), "b1": (d,), "Wq": (d, d),
            "Wk": (d, d), "Wv": (d, d), "Wo": (d, d), "g2": (d,), "b2": (d,), "W1": (d, 4 * d),
            "c1": (4 * d,), "W2": (4 * d, d), "Wout": (d, v)}


TRANSFORMER_GRADS = ("E", "g1", "b1", "Wq", "Wk", "Wv", "Wo", "g2", "b2", "W1", "c1", "W2", "Wout")


def _resnet_shapes(n: int, c: int, hw: int, classes: int) -> dict[str, tuple[int, ...]]:
    conv, chan = (c, c, 3, 3), (c,)
    return {"X": (n, c, hw, hw), "W1": conv, "g1": chan, "b1": chan, "W2": conv, "g2": chan,
            "b2": chan, "Wd": (classes, c), "Bd": (classes,), "labels": (n,)}


RESNET_GRADS = ("W1", "g1", "b1", "W2", "g2", "b2", "Wd", "Bd")


def _mlp_shapes(batch: int, widths: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    layers = {}
    for i, (a, b) in enumerate(zip(widths, widths[1:]), 1):
        layers[f"W{i}"], layers[f"B{i}"] = (b, a), (b,)
    return {"X": (batch, widths[0]), **layers, "labels": (batch,)}


MLP_GRADS = ("W1", "B1", "W2", "B2", "W3", "B3")


def _lstm_shapes(steps: int, batch: int, inputs: int, hidden: int) -> dict[str, tuple[int, ...]]:
    return {"X": (steps, batch, inputs), "h0": (batch, hidden), "c0": (batch, hidden),
            "Wih": (4 * hidden, inputs), "Whh": (4 * hidden, hidden), "b": (4 * hidden,)}
MODELS: list[Workload] = [
    Workload("transformer_block", "transformer", "Transformer block: embedding, causal attention, "
             "GELU MLP, cross-entropy; 4 x 64 tokens, d=128, 4 heads, vocabulary 512 (grad all)",
             _transformer_shapes(TRANSFORMER), _transformer_shapes(TRANSFORMER_TINY), TRANSFORMER_GRADS,
             NO_SEED, scale=0.2, suite="models",
             params={"positive": ("g1", "g2"), "heads": TRANSFORMER["HEADS"],
                     "ints": {"tokens": (TRANSFORMER["V"], TRANSFORMER_TINY["V"]),
                              "labels": (TRANSFORMER["V"], TRANSFORMER_TINY["V"])}}),
    Workload("small_cnn", "cnn", "small CNN: conv 3x3 pad 1 + bias + ReLU, max pool 2x2, dense, "
             "cross-entropy; 32 images 3x32x32 (grad all)",
             {"X": (32, 3, 32, 32), "W": (16, 3, 3, 3), "B": (16,), "Wd": (10, 16 * 16 * 16), "Bd": (10,),
              "labels": (32,)},
             {"X": (2, 3, 6, 6), "W": (4, 3, 3, 3), "B": (4,), "Wd": (5, 4 * 3 * 3), "Bd": (5,),
              "labels": (2,)},
             ("W", "B", "Wd", "Bd"), NO_SEED, scale=0.5, suite="models",
             params={"ints": {"labels": (10, 5)}}),
    Workload("resnet_block", "resnet", "ResNet basic block: conv 3x3 pad 1, batch norm, ReLU, conv "
             "3x3 pad 1, batch norm, + input, ReLU, global average pool, dense, cross-entropy; "
             "16 images 64x16x16 (grad all)",
             _resnet_shapes(16, 64, 16, 10), _resnet_shapes(2, 3, 4, 5), RESNET_GRADS, NO_SEED,
             scale=0.2, suite="models",
             params={"positive": ("g1", "g2"), "ints": {"labels": (10, 5)}}),
    Workload("mlp_classifier", "mlp", "MLP classifier: dense + bias + ReLU 784 -> 512 -> 256, dense "
             "-> 10, cross-entropy; batch 128 (grad all)",
             _mlp_shapes(128, (784, 512, 256, 10)), _mlp_shapes(3, (6, 5, 4, 5)), MLP_GRADS, NO_SEED,
             scale=0.1, suite="models", params={"ints": {"labels": (10, 5)}}),
    Workload("lstm", "lstm", "LSTM cell, 12 steps with shared weights, loss the sum of the last "
             "hidden state; batch 32, input 128, hidden 256 (grad Wih, Whh, b)",
             _lstm_shapes(12, 32, 128, 256), _lstm_shapes(3, 2, 4, 3), ("Wih", "Whh", "b"), NO_SEED,
             scale=0.1, suite="models"),
]
# The layers' neighbours, measured only when asked for (``--suite norms``).
_NORMED = {"positive": ("gamma",)}
NORMS: list[Workload] = [
    Workload("group_norm32", "group_norm", "group norm, 32 groups (grad X, gamma, beta)",
             {"X": (8, 256, 28, 28), "gamma": (256,), "beta": (256,)},
             {"X": (2, 64, 3, 5), "gamma": (64,), "beta": (64,)}, ("X", "gamma", "beta"), NO_SEED,
             params={"positive": ("gamma",), "groups": 32}, suite="norms"),
    Workload("instance_norm", "instance_norm", "instance norm (grad X, gamma, beta)",
             {"X": (8, 64, 56, 56), "gamma": (64,), "beta": (64,)},
             {"X": (2, 3, 4, 5), "gamma": (3,), "beta": (3,)}, ("X", "gamma", "beta"), NO_SEED,
             params=_NORMED, suite="norms"),
    Workload("rms_norm768", "rms_norm", "RMSNorm over 768, 512 tokens (grad X, gamma)",
             {"X": (512, 768), "gamma": (768,)}, {"X": (4, 7), "gamma": (7,)}, ("X", "gamma"),
             NO_SEED, params=_NORMED, suite="norms"),
    Workload("rms_norm4096", "rms_norm", "RMSNorm over 4096, 128 tokens (grad X, gamma)",
             {"X": (128, 4096), "gamma": (4096,)}, {"X": (3, 9), "gamma": (9,)}, ("X", "gamma"),
             NO_SEED, params=_NORMED, suite="norms"),
    Workload("layer_norm768", "layer_norm", "layer norm over 768, 512 tokens (grad X, gamma, beta)",
             {"X": (512, 768), "gamma": (768,), "beta": (768,)},
             {"X": (5, 7), "gamma": (7,), "beta": (7,)}, ("X", "gamma", "beta"), NO_SEED,
             params=_NORMED, suite="norms"),
    Workload("layer_norm1000", "layer_norm", "layer norm over 1000 (odd), 512 rows (grad X, gamma, beta)",
             {"X": (512, 1000), "gamma": (1000,), "beta": (1000,)},
             {"X": (3, 11), "gamma": (11,), "beta": (11,)}, ("X", "gamma", "beta"), NO_SEED,
             params=_NORMED, suite="norms"),
    Workload("ce_smooth32k", "ce_smooth", "cross-entropy, label smoothing 0.1, 32,000 classes, "
             "64 tokens (grad logits)",
             {"Z": (64, 32000), "labels": (64,)}, {"Z": (3, 13), "labels": (3,)}, ("Z",), NO_SEED,
             scale=4.0, params={"ints": {"labels": (32000, 13)}, "smoothing": 0.1}, suite="norms"),
    Workload("swiglu_mlp", "swiglu", "SwiGLU MLP 768 -> 2048 -> 768, 256 tokens (grad all)",
             {"X": (256, 768), "W1": (2048, 768), "W3": (2048, 768), "W2": (768, 2048)},
             {"X": (4, 6), "W1": (8, 6), "W3": (8, 6), "W2": (6, 8)}, ("X", "W1", "W3", "W2"),
             NO_SEED, scale=0.2, suite="norms"),
    Workload("causal_attention197", "causal_attention", "causal self-attention, mask j <= i, "
             "12 heads x 197 tokens x 64 (grad Q, K, V)",
             {"Q": (12, 197, 64), "K": (12, 197, 64), "V": (12, 197, 64)},
             {"Q": (2, 5, 3), "K": (2, 5, 3), "V": (2, 5, 3)}, ("Q", "K", "V"), NO_SEED, suite="norms"),
    Workload("embedding_mean", "embedding_mean", "embedding 30,000 x 256, 8 x 128 ids, mean over "
             "tokens (grad table)",
             {"E": (30000, 256), "ids": (8, 128)}, {"E": (5, 4), "ids": (2, 3)}, ("E",), NO_SEED,
             params={"ints": {"ids": (30000, 5)}}, suite="norms"),
    Workload("attention1024", "attention", "attention softmax(QK^T/8)V, 4 heads x 1,024 tokens x 64 "
             "(grad Q, K, V)",
             {"Q": (4, 1024, 64), "K": (4, 1024, 64), "V": (4, 1024, 64)},
             {"Q": (2, 6, 4), "K": (2, 6, 4), "V": (2, 6, 4)}, ("Q", "K", "V"), NO_SEED, suite="norms"),
    Workload("residual_layer_norm", "residual_layer_norm", "residual add + layer norm over 768, "
             "512 tokens (grad X, R, gamma, beta)",
             {"X": (512, 768), "R": (512, 768), "gamma": (768,), "beta": (768,)},
             {"X": (4, 7), "R": (4, 7), "gamma": (7,), "beta": (7,)}, ("X", "R", "gamma", "beta"),
             NO_SEED, params=_NORMED, suite="norms"),
]


# The rows spelled as a user writes them (``benchmarks/spelled.py``: ``ta.compute``,
# ``ta.sum``/``ta.max``, ``if_then_else``; ``params["spelled"]``), each beside its ``ta.topi``
# spelling at the same shapes (the ``layers`` entries, ``group_norm32``, ``ce_smooth32k``, and the
# topi rows below), and the peers' formula of the same ``kind``.  ``--suite spelled``.
_LSTM_CELL = _lstm_shapes(1, 32, 128, 256)
_LSTM_TINY = _lstm_shapes(1, 2, 4, 3)
_ATTN = {"Q": (8, 256, 64), "K": (8, 256, 64), "V": (8, 256, 64)}
_ATTN_TINY = {"Q": (2, 5, 3), "K": (2, 5, 3), "V": (2, 5, 3)}
SPELLED: list[Workload] = [
    Workload("causal_attention256", "causal_attention", "causal attention, topi, 8 heads x 256 "
             "tokens x 64 (grad Q, K, V)", _ATTN, _ATTN_TINY, ("Q", "K", "V"), NO_SEED, suite="spelled"),
    Workload("spelled_causal_attention", "causal_attention", "causal attention spelled: "
             "if_then_else(j <= i, sum(Q*K) * s, -inf), softmax, P V (grad Q, K, V)", _ATTN, _ATTN_TINY,
             ("Q", "K", "V"), NO_SEED, params={"spelled": True}, suite="spelled"),
    Workload("spelled_layer_norm", "layer_norm", "layer norm spelled with ta.compute (mean, var, "
             "normalize) over 256 features (grad X, gamma, beta)",
             {"X": (1024, 256), "gamma": (256,), "beta": (256,)},
             {"X": (6, 8), "gamma": (8,), "beta": (8,)}, ("X", "gamma", "beta"), NO_SEED,
             params={"positive": ("gamma",), "spelled": True}, suite="spelled"),
    Workload("spelled_group_norm32", "group_norm", "group norm spelled with ta.compute, 32 groups "
             "(grad X, gamma, beta)",
             {"X": (8, 256, 28, 28), "gamma": (256,), "beta": (256,)},
             {"X": (2, 64, 3, 5), "gamma": (64,), "beta": (64,)}, ("X", "gamma", "beta"), NO_SEED,
             params={"positive": ("gamma",), "groups": 32, "spelled": True}, suite="spelled"),
    Workload("spelled_ce_smooth32k", "ce_smooth", "cross-entropy spelled: a smoothed target "
             "if_then_else(c == L[r], ...) times log-softmax, 32,000 classes, 64 tokens (grad logits)",
             {"Z": (64, 32000), "labels": (64,)}, {"Z": (3, 13), "labels": (3,)}, ("Z",), NO_SEED,
             scale=4.0, params={"ints": {"labels": (32000, 13)}, "smoothing": 0.1, "spelled": True},
             suite="spelled"),
    Workload("lstm_cell", "lstm", "LSTM cell, topi, batch 32, input 128, hidden 256, summed "
             "(grad Wih, Whh, b)", _LSTM_CELL, _LSTM_TINY, ("Wih", "Whh", "b"), NO_SEED, scale=0.1,
             suite="spelled"),
    Workload("spelled_lstm_cell", "lstm", "LSTM cell spelled with ta.compute (two products, gates, "
             "cell) (grad Wih, Whh, b)", _LSTM_CELL, _LSTM_TINY, ("Wih", "Whh", "b"), NO_SEED,
             scale=0.1, params={"spelled": True}, suite="spelled"),
]


def _conv(name: str, title: str, x: tuple[int, ...], w: tuple[int, ...], x_tiny: tuple[int, ...],
          w_tiny: tuple[int, ...], bias: bool = False, **params) -> Workload:
    """A convolution variant of the ``convs`` suite (``kind`` ``conv``): ``params`` are
    ``ta.topi.nn.conv2d``'s (stride, padding, dilation) or, with ``transposed=True``,
    ``conv2d_transpose``'s; the groups are the shapes' (``X`` channels / ``W``'s second axis:
    ``W [C, 1, kh, kw]`` is depthwise); ``relu`` adds a ReLU and ``bias`` a per-channel bias
    input ``B``."""
    out = w[1] if params.get("transposed") else w[0]
    out_tiny = w_tiny[1] if params.get("transposed") else w_tiny[0]
    shapes, tiny = {"X": x, "W": w}, {"X": x_tiny, "W": w_tiny}
    if bias:
        shapes["B"], tiny["B"] = (out,), (out_tiny,)
    return Workload(name, "conv", title, shapes, tiny, tuple(shapes), NO_SEED, suite="convs",
                    params={"stride": 1, "padding": 0, "dilation": 1, **params})


# Convolution variants at the shapes of the networks that use them (MobileNet, ResNet's stem,
# ResNeXt, Inception, U-Net, DeepLab), none of which tensorad was tuned on; every gradient
# (X, W and the bias) is asked for.  ``python -m benchmarks --suite convs``; not in the default.
# ``grad_rtol``: the bias gradient behind a ReLU sums the head over the active points (|dB| ~ 100
# at batch 32), and a pre-activation within float32 rounding of 0 (about one of the 3.2M) is
# active in float32 and not in float64 -- each such point moves dB by |H| <= 1, so every
# float32 system (PyTorch's too: 1.5e-2 measured) misses the 1e-3 default there.
CONVS: list[Workload] = [
    _conv("depthwise3x3", "depthwise conv 3x3 pad 1, 128 channels (MobileNet)", (8, 128, 56, 56),
          (128, 1, 3, 3), (2, 4, 7, 7), (4, 1, 3, 3), padding=1),
    _conv("depthwise3x3s2", "depthwise conv 3x3 stride 2 pad 1, 128 channels (MobileNet)",
          (8, 128, 56, 56), (128, 1, 3, 3), (2, 4, 7, 7), (4, 1, 3, 3), stride=2, padding=1),
    _conv("pointwise1x1", "pointwise conv 1x1, 64 -> 256 (ResNet bottleneck)", (8, 64, 56, 56),
          (256, 64, 1, 1), (2, 3, 5, 5), (4, 3, 1, 1)),
    _conv("stem7x7s2", "ResNet stem conv 7x7 stride 2 pad 3, 3 -> 64 at 224x224", (8, 3, 224, 224),
          (64, 3, 7, 7), (2, 3, 11, 11), (4, 3, 7, 7), stride=2, padding=3),
    _conv("dilated3x3", "dilated conv 3x3 dilation 2 pad 2, 64 channels (DeepLab)", (8, 64, 56, 56),
          (64, 64, 3, 3), (2, 3, 9, 9), (4, 3, 3, 3), padding=2, dilation=2),
    _conv("grouped3x3", "grouped conv 3x3 pad 1, 32 groups of 4 channels (ResNeXt)", (8, 128, 28, 28),
          (128, 4, 3, 3), (2, 4, 6, 6), (4, 2, 3, 3), padding=1),
    _conv("conv5x5", "conv 5x5 pad 2, 32 -> 64 at 28x28 (Inception)", (8, 32, 28, 28), (64, 32, 5, 5),
          (2, 3, 7, 7), (4, 3, 5, 5), padding=2),
    _conv("convT2x2s2", "transposed conv 2x2 stride 2, 128 -> 64, 28x28 -> 56x56 (U-Net)",
          (8, 128, 28, 28), (128, 64, 2, 2), (2, 4, 5, 5), (4, 3, 2, 2), stride=2, transposed=True),
    _conv("conv3x3_bias_relu_b32", "conv 3x3 pad 1 + bias + ReLU, batch 32, 128 channels at 28x28",
          (32, 128, 28, 28), (128, 128, 3, 3), (2, 3, 6, 6), (4, 3, 3, 3), bias=True, padding=1,
          relu=True, grad_rtol=5e-2),
    _conv("conv3x3_odd7x13", "conv 3x3 pad 1 + ReLU on a 7x13 input, 64 -> 96", (32, 64, 7, 13),
          (96, 64, 3, 3), (2, 3, 3, 5), (4, 3, 3, 3), padding=1, relu=True),
]
WORKLOADS = WORKLOADS + LAYERS + MODELS + NORMS + SPELLED + CONVS
SUITES = ("seed", "layers", "models", "norms", "spelled", "convs")
BY_NAME = {w.name: w for w in WORKLOADS}


DEFAULT_SUITES = ("seed", "layers", "models")


def select(names: list[str] | None, suites: tuple[str, ...] = DEFAULT_SUITES) -> list[Workload]:
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
        if k in w.params.get("ints", {}):  # token ids, class labels
            out[k] = rng.integers(0, w.params["ints"][k][1 if tiny else 0], size=s).astype(np.int32)
        elif k in w.params.get("onehot", ()):
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
