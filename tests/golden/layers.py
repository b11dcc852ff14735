"""Every ``ta.topi`` and ``ta.topi.nn`` layer, written by hand at two shapes, for the work gate.

Each builder takes the shape set (:data:`SMALL` or :data:`MEDIUM`: axes that divide no stride
or window evenly) and returns the layer's output and the float inputs it is differentiated
with respect to.  Integer inputs (indices, labels) are placeholders too: they are read, never
differentiated.  Layers with variants that lower differently (pooling kinds, strided and
dilated convolutions, a softmax over another axis) have an entry per variant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import tensorad as ta
from tensorad import topi

nn = topi.nn


class Dims(NamedTuple):
    """The sizes every layer draws its shapes from."""

    n: int  # batch
    c: int  # channels in
    f: int  # channels out
    h: int  # image height
    w: int  # image width
    rows: int
    cols: int
    seq: int  # tokens
    d: int  # features per token
    classes: int


SMALL = Dims(n=2, c=3, f=4, h=9, w=7, rows=4, cols=6, seq=5, d=4, classes=5)
MEDIUM = Dims(n=4, c=8, f=12, h=19, w=17, rows=24, cols=40, seq=33, d=16, classes=50)
SHAPES = {"small": SMALL, "medium": MEDIUM}

Built = tuple[ta.Tensor, list]


def _f(name: str, *shape: int) -> ta.Tensor:
    return ta.placeholder(shape, "float32", name)


def _i(name: str, *shape: int) -> ta.Tensor:
    return ta.placeholder(shape, "int32", name)


def _matrix(s: Dims) -> ta.Tensor:
    return _f("X", s.rows, s.cols)


def _image(s: Dims) -> ta.Tensor:
    return _f("X", s.n, s.c, s.h, s.w)


def _binary(op: Callable, rhs_shape: Callable[[Dims], tuple]) -> Callable[[Dims], Built]:
    """``op(A, B)`` for ``A [rows, cols]`` and ``B`` of ``rhs_shape`` (broadcast)."""
    def build(s: Dims) -> Built:
        A, B = _f("A", s.rows, s.cols), _f("B", *rhs_shape(s))
        return op(A, B), [A, B]
    return build


def _unary(op: Callable) -> Callable[[Dims], Built]:
    def build(s: Dims) -> Built:
        X = _matrix(s)
        return op(X), [X]
    return build


def _on_image(op: Callable) -> Callable[[Dims], Built]:
    def build(s: Dims) -> Built:
        X = _image(s)
        return op(X), [X]
    return build


def _matmul(s: Dims) -> Built:
    A, B = _f("A", s.rows, s.cols), _f("B", s.cols, s.d)
    return topi.matmul(A, B), [A, B]


def _batched_matmul(s: Dims) -> Built:
    A, B = _f("A", s.n, s.seq, s.d), _f("B", s.n, s.d, s.seq)
    return topi.matmul(A, B), [A, B]


def _broadcast_to(s: Dims) -> Built:
    X = _f("X", 1, s.cols)
    return topi.broadcast_to(X, (s.rows, s.cols)), [X]


def _cast(s: Dims) -> Built:
    X = _matrix(s)
    return topi.cast(X, "float64"), [X]


def _concatenate(s: Dims) -> Built:
    A, B = _f("A", s.rows, s.cols), _f("B", s.rows + 3, s.cols)
    return topi.concatenate([A, B], 0), [A, B]


def _split(s: Dims) -> Built:
    X = _matrix(s)
    top, bottom = topi.split(X, [1], axis=0)
    return topi.add(topi.sum(top, axis=0), topi.sum(bottom, axis=0)), [X]


def _squeeze(s: Dims) -> Built:
    X = _f("X", s.rows, 1, s.cols)
    return topi.squeeze(X, 1), [X]


def _take(s: Dims) -> Built:
    X, idx = _matrix(s), _i("I", s.seq)
    return topi.take(X, idx, axis=0, mode="clip"), [X]


def _index_select(s: Dims) -> Built:
    X, idx = _matrix(s), _i("I", s.seq)
    return topi.index_select(X, idx, axis=1, mode="wrap"), [X]


def _embedding(s: Dims) -> Built:
    W, idx = _f("W", s.classes, s.d), _i("I", s.n, s.seq)
    return topi.embedding(W, idx, mode="clip"), [W]


def _embedding_bag(reduce: str, weighted: bool) -> Callable[[Dims], Built]:
    def build(s: Dims) -> Built:
        W, idx = _f("W", s.classes, s.d), _i("I", s.n, s.seq)
        psw = _f("P", s.n, s.seq) if weighted else None
        Y = topi.embedding_bag(W, idx, reduce, per_sample_weights=psw, mode="clip")
        return Y, [W] + ([psw] if weighted else [])
    return build


def _dense(bias: bool) -> Callable[[Dims], Built]:
    def build(s: Dims) -> Built:
        X, W = _f("X", s.rows, s.cols), _f("W", s.d, s.cols)
        B = _f("B", s.d) if bias else None
        return nn.dense(X, W, B), [X, W] + ([B] if bias else [])
    return build


def _conv2d(stride: int, pad: int, dilation: int, groups: int = 1) -> Callable[[Dims], Built]:
    def build(s: Dims) -> Built:
        c, f = s.c * groups, s.f * groups
        X, W = _f("X", s.n, c, s.h, s.w), _f("W", f, s.c, 3, 3)
        return nn.conv2d(X, W, stride, pad, dilation, groups), [X, W]
    return build


def _conv2d_transpose(stride: int, pad: int) -> Callable[[Dims], Built]:
    def build(s: Dims) -> Built:
        X, W = _image(s), _f("W", s.c, s.f, 3, 3)
        return nn.conv2d_transpose(X, W, stride, pad), [X, W]
    return build


def _pool(k: int, stride: int, pad: int, kind: str, include_pad: bool = True) -> Callable[[Dims], Built]:
    return _on_image(lambda X: nn.pool(X, k, stride, [pad] * 4, kind, count_include_pad=include_pad))


def _pad(s: Dims) -> Built:
    X = _image(s)
    return nn.pad(X, [0, 0, 1, 2], [0, 0, 2, 1]), [X]


def _norm(kind: str) -> Callable[[Dims], Built]:
    def build(s: Dims) -> Built:
        if kind in ("layer_norm", "rms_norm"):
            X, g, b = _f("X", s.rows, s.cols), _f("g", s.cols), _f("b", s.cols)
        else:
            X, g, b = _image(s), _f("g", s.c), _f("b", s.c)
        if kind == "layer_norm":
            return nn.layer_norm(X, g, b), [X, g, b]
        if kind == "rms_norm":
            return nn.rms_norm(X, g), [X, g]
        if kind == "batch_norm":
            return nn.batch_norm(X, g, b), [X, g, b]
        if kind == "instance_norm":
            return nn.instance_norm(X, g, b), [X, g, b]
        return nn.group_norm(X, 1, g, b), [X, g, b]
    return build


def _attention(causal: bool) -> Callable[[Dims], Built]:
    def build(s: Dims) -> Built:
        Q, K, V = (_f(n, s.n, s.seq, s.d) for n in "QKV")
        return nn.scaled_dot_product_attention(Q, K, V, causal=causal), [Q, K, V]
    return build


def _cross_entropy(smoothing: float) -> Callable[[Dims], Built]:
    def build(s: Dims) -> Built:
        X, L = _f("X", s.rows, s.classes), _i("L", s.rows)
        return nn.cross_entropy(X, L, label_smoothing=smoothing), [X]
    return build


def _nll_loss(s: Dims) -> Built:
    X, L = _f("X", s.rows, s.classes), _i("L", s.rows)
    return nn.nll_loss(nn.log_softmax(X), L), [X]


def _row(s: Dims) -> tuple:
    return (s.cols,)


def _column(s: Dims) -> tuple:
    return (s.rows, 1)


def _same(s: Dims) -> tuple:
    return (s.rows, s.cols)


#: name -> builder; each is lowered at every shape of :data:`SHAPES`
LAYERS: dict[str, Callable[[Dims], Built]] = {
    "add": _binary(topi.add, _row),
    "subtract": _binary(topi.subtract, _same),
    "multiply": _binary(topi.multiply, _column),
    "divide": _binary(topi.divide, _same),
    "power": _binary(topi.power, _same),
    "power_scalar": _unary(lambda X: topi.power(X, 3.0)),
    "maximum": _binary(topi.maximum, _same),
    "minimum": _binary(topi.minimum, _row),
    "broadcast_to": _broadcast_to,
    "matmul": _matmul,
    "matmul_batched": _batched_matmul,
    "abs": _unary(topi.abs),
    "cast": _cast,
    "cos": _unary(topi.cos),
    "exp": _unary(topi.exp),
    "log": _unary(topi.log),
    "negative": _unary(topi.negative),
    "sigmoid": _unary(topi.sigmoid),
    "sin": _unary(topi.sin),
    "sqrt": _unary(topi.sqrt),
    "tanh": _unary(topi.tanh),
    "erf": _unary(topi.erf),
    "mean": _unary(lambda X: topi.mean(X, axis=1)),
    "mean_all": _unary(topi.mean),
    "var": _unary(lambda X: topi.var(X, axis=0)),
    "var_ddof": _unary(lambda X: topi.var(X, axis=1, ddof=1)),
    "sum": _unary(lambda X: topi.sum(X, axis=0)),
    "sum_keepdims": _unary(lambda X: topi.sum(X, axis=1, keepdims=True)),
    "max": _unary(lambda X: topi.max(X, axis=1)),
    "max_image_middle": _on_image(lambda X: topi.max(X, axis=2)),
    "min": _unary(lambda X: topi.min(X, axis=0)),
    "prod": _unary(lambda X: topi.prod(X, axis=1)),
    "full_like": _unary(lambda X: topi.add(X, topi.full_like(X, 2.0))),
    "ones_like": _unary(lambda X: topi.multiply(X, topi.ones_like(X))),
    "zeros_like": _unary(lambda X: topi.subtract(X, topi.zeros_like(X))),
    "reshape": _on_image(lambda X: topi.reshape(X, (X.shape[0] * X.shape[1], X.shape[2] * X.shape[3]))),
    "transpose": _on_image(lambda X: topi.transpose(X, (0, 2, 3, 1))),
    "concatenate": _concatenate,
    "split": _split,
    "expand_dims": _unary(lambda X: topi.expand_dims(X, 1, 2)),
    "squeeze": _squeeze,
    "take": _take,
    "index_select": _index_select,
    "embedding": _embedding,
    "embedding_bag_mean": _embedding_bag("mean", False),
    "embedding_bag_weighted": _embedding_bag("sum", True),
    "dense": _dense(True),
    "dense_nobias": _dense(False),
    "conv2d": _conv2d(1, 1, 1),
    "conv2d_strided": _conv2d(2, 1, 1),
    "conv2d_dilated": _conv2d(1, 2, 2),
    "conv2d_grouped": _conv2d(1, 1, 1, groups=2),
    "conv2d_transpose": _conv2d_transpose(2, 1),
    "conv2d_transpose_unit": _conv2d_transpose(1, 0),
    "max_pool": _pool(3, 2, 1, "max"),
    "max_pool_1x1": _pool(1, 2, 0, "max"),
    "avg_pool": _pool(2, 2, 0, "avg"),
    "avg_pool_excluding_padding": _pool(3, 2, 1, "avg", include_pad=False),
    "upsampling_nearest": _on_image(lambda X: nn.upsampling(X, 2)),
    "upsampling_bilinear": _on_image(lambda X: nn.upsampling(X, 2, "bilinear")),
    "upsampling_bilinear_aligned": _on_image(lambda X: nn.upsampling(X, 2, "bilinear", align_corners=True)),
    "pad": _pad,
    "softmax": _unary(nn.softmax),
    "softmax_channels": _on_image(lambda X: nn.softmax(X, axis=1)),
    "log_softmax": _unary(nn.log_softmax),
    "flatten": _on_image(nn.flatten),
    "relu": _unary(nn.relu),
    "gelu": _unary(nn.gelu),
    "gelu_tanh": _unary(lambda X: nn.gelu(X, "tanh")),
    "silu": _unary(nn.silu),
    "nn_erf": _unary(nn.erf),
    "layer_norm": _norm("layer_norm"),
    "rms_norm": _norm("rms_norm"),
    "batch_norm": _norm("batch_norm"),
    "group_norm": _norm("group_norm"),
    "instance_norm": _norm("instance_norm"),
    "attention": _attention(False),
    "attention_causal": _attention(True),
    "cross_entropy": _cross_entropy(0.0),
    "cross_entropy_smoothed": _cross_entropy(0.1),
    "nll_loss": _nll_loss,
}
