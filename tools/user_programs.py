"""Larger programs a user composes from ``ta.topi`` layers, for ``tools/difftime.py --programs``:
the time to differentiate and optimize a whole model, not one layer (the bar is per layer;
these check that the optimizer's per-call work does not grow faster than the model).

Each entry of :data:`PROGRAMS` builds its placeholders and returns ``(loss or output, the
tensors differentiated)``; nothing here is timed or checked -- only defined.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorad as ta
from tensorad import topi

nn = topi.nn


def _encoder_layer(x, d: int, heads: int, k: int):
    """A pre-norm Transformer encoder layer (bidirectional attention, GELU MLP); ``k`` names
    its weights."""
    b, n, _ = x.shape
    w = {s: ta.placeholder(shape, "float32", f"{s}{k}") for s, shape in (
        ("g1", (d,)), ("b1", (d,)), ("Wq", (d, d)), ("Wk", (d, d)), ("Wv", (d, d)), ("Wo", (d, d)),
        ("g2", (d,)), ("b2", (d,)), ("W1", (d, 4 * d)), ("c1", (4 * d,)), ("W2", (4 * d, d)))}

    def split(t):
        return topi.transpose(topi.reshape(t, (b, n, heads, d // heads)), (0, 2, 1, 3))
    h = nn.layer_norm(x, w["g1"], w["b1"])
    q, kk, v = (split(topi.matmul(h, w[s])) for s in ("Wq", "Wk", "Wv"))
    a = nn.scaled_dot_product_attention(q, kk, v)
    x = x + topi.matmul(topi.reshape(topi.transpose(a, (0, 2, 1, 3)), (b, n, d)), w["Wo"])
    h = nn.gelu(topi.matmul(nn.layer_norm(x, w["g2"], w["b2"]), w["W1"]) + w["c1"])
    return x + topi.matmul(h, w["W2"]), list(w.values())


def encoder2():
    """Two encoder layers over 4 x 64 tokens, d = 128, 4 heads; the loss a sum of the output."""
    x = ta.placeholder((4, 64, 128), "float32", "X")
    y, p1 = _encoder_layer(x, 128, 4, 1)
    y, p2 = _encoder_layer(y, 128, 4, 2)
    return topi.sum(y), [x] + p1 + p2


def resnet_block():
    """A ResNet basic block with batch norm (training statistics): conv 3x3, BN, ReLU, conv
    3x3, BN, the identity added, ReLU; 8 x 64 x 28 x 28."""
    x = ta.placeholder((8, 64, 28, 28), "float32", "X")
    w1, w2 = (ta.placeholder((64, 64, 3, 3), "float32", f"W{k}") for k in (1, 2))
    g1, b1, g2, b2 = (ta.placeholder((64,), "float32", n) for n in ("g1", "b1", "g2", "b2"))
    h = nn.relu(nn.batch_norm(nn.conv2d(x, w1, 1, 1), g1, b1))
    h = nn.batch_norm(nn.conv2d(h, w2, 1, 1), g2, b2)
    return nn.relu(h + x), [x, w1, g1, b1, w2, g2, b2]


def mlp_dropout():
    """An MLP 784 -> 512 -> 256 -> 10 whose hidden layers are multiplied by 0/1 masks scaled by
    1 / (1 - p) (dropout as a user writes it, the masks inputs), cross-entropy over labels."""
    x = ta.placeholder((128, 784), "float32", "X")
    labels = ta.placeholder((128,), "int32", "labels")
    ws = [ta.placeholder(s, "float32", f"W{k}") for k, s in enumerate(((512, 784), (256, 512), (10, 256)))]
    bs = [ta.placeholder((s[0],), "float32", f"B{k}") for k, s in enumerate(((512,), (256,), (10,)))]
    masks = [ta.placeholder((128, n), "float32", f"M{k}") for k, n in enumerate((512, 256))]
    h = x
    for k in range(2):
        h = topi.multiply(nn.relu(nn.dense(h, ws[k], bs[k])), topi.multiply(masks[k], 1 / 0.9))
    return nn.cross_entropy(nn.dense(h, ws[2], bs[2]), labels), ws + bs


def lstm2():
    """Two steps of an LSTM cell (64 x 256 inputs, 512 hidden units), the loss a sum of the
    last hidden state; the weights shared by the steps."""
    xs = [ta.placeholder((64, 256), "float32", f"X{t}") for t in range(2)]
    h = ta.placeholder((64, 512), "float32", "H0")
    c = ta.placeholder((64, 512), "float32", "C0")
    wx = ta.placeholder((2048, 256), "float32", "Wx")
    wh = ta.placeholder((2048, 512), "float32", "Wh")
    bias = ta.placeholder((2048,), "float32", "b")
    for x in xs:
        g = topi.add(topi.add(nn.dense(x, wx), nn.dense(h, wh)), bias)
        i, f, gg, o = topi.split(g, 4, axis=1)
        c = topi.add(topi.multiply(topi.sigmoid(f), c), topi.multiply(topi.sigmoid(i), topi.tanh(gg)))
        h = topi.multiply(topi.sigmoid(o), topi.tanh(c))
    return topi.sum(h), [wx, wh, bias, xs[0]]


PROGRAMS: dict[str, Callable[[], tuple]] = {
    "encoder2": encoder2, "resnet_block": resnet_block, "mlp_dropout": mlp_dropout, "lstm2": lstm2,
}
