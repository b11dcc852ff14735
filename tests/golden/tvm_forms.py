"""Programs in the forms of TVM's autodiff tests, written as a user writes them with
``ta.compute``: index-level bodies with reduce axes, ``where`` conditions, ``if_then_else``
padding, broadcasting, and pooling windows with strides and dilations.

Each builder returns the output and the float inputs it is differentiated with respect to.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorad as ta

Built = tuple[ta.Tensor, list]


def _f(name: str, *shape: int) -> ta.Tensor:
    return ta.placeholder(shape, "float32", name)


def matmul() -> Built:
    A, B = _f("A", 6, 8), _f("B", 8, 5)
    k = ta.reduce_axis((0, 8), "k")
    return ta.compute((6, 5), lambda i, j: ta.sum(A[i, k] * B[k, j], k), name="C"), [A, B]


def gram() -> Built:
    X = _f("X", 6, 7)
    k = ta.reduce_axis((0, 7), "k")
    return ta.compute((6, 6), lambda i, j: ta.sum(X[i, k] * X[j, k], k), name="G"), [X]


def conv2d() -> Built:
    n, c, h, w, f, kk = 2, 3, 8, 7, 4, 3
    X, W = _f("X", n, c, h, w), _f("W", f, c, kk, kk)
    rc, ry, rx = ta.reduce_axis((0, c), "rc"), ta.reduce_axis((0, kk), "ry"), ta.reduce_axis((0, kk), "rx")
    Y = ta.compute((n, f, h - kk + 1, w - kk + 1),
                   lambda b, o, y, x: ta.sum(X[b, rc, y + ry, x + rx] * W[o, rc, ry, rx], [rc, ry, rx]),
                   name="conv")
    return Y, [X, W]


def conv2d_padded() -> Built:
    n, c, h, w, f, kk, s = 2, 3, 8, 7, 4, 3, 2
    X, W = _f("X", n, c, h, w), _f("W", f, c, kk, kk)
    P = ta.compute((n, c, h + 2, w + 2), lambda b, ch, y, x: ta.if_then_else(
        (y >= 1) & (y < h + 1) & (x >= 1) & (x < w + 1), X[b, ch, y - 1, x - 1], 0.0), name="padded")
    rc, ry, rx = ta.reduce_axis((0, c), "rc"), ta.reduce_axis((0, kk), "ry"), ta.reduce_axis((0, kk), "rx")
    oh, ow = (h + 2 - kk) // s + 1, (w + 2 - kk) // s + 1
    Y = ta.compute((n, f, oh, ow), lambda b, o, y, x: ta.sum(
        P[b, rc, y * s + ry, x * s + rx] * W[o, rc, ry, rx], [rc, ry, rx]), name="conv")
    return Y, [X, W]


def pool(kind: str, k: int, stride: int, dilation: int = 1) -> Callable[[], Built]:
    def build() -> Built:
        n, c, h, w = 2, 3, 9, 8
        X = _f("X", n, c, h, w)
        span = dilation * (k - 1) + 1
        oh, ow = (h - span) // stride + 1, (w - span) // stride + 1
        ry, rx = ta.reduce_axis((0, k), "ry"), ta.reduce_axis((0, k), "rx")

        def at(b, ch, y, x):
            return X[b, ch, y * stride + ry * dilation, x * stride + rx * dilation]
        if kind == "max":
            Y = ta.compute((n, c, oh, ow), lambda *i: ta.max(at(*i), [ry, rx]), name="maxpool")
        else:
            Y = ta.compute((n, c, oh, ow), lambda *i: ta.sum(at(*i), [ry, rx]) / float(k * k), name="avgpool")
        return Y, [X]
    return build


def softmax() -> Built:
    n, m = 4, 9
    X = _f("X", n, m)
    k1, k2 = ta.reduce_axis((0, m), "k1"), ta.reduce_axis((0, m), "k2")
    mx = ta.compute((n,), lambda i: ta.max(X[i, k1], k1), name="mx")
    E = ta.compute((n, m), lambda i, j: ta.exp(X[i, j] - mx[i]), name="E")
    S = ta.compute((n,), lambda i: ta.sum(E[i, k2], k2), name="S")
    return ta.compute((n, m), lambda i, j: E[i, j] / S[i], name="softmax"), [X]


def log_softmax() -> Built:
    n, m = 4, 9
    X = _f("X", n, m)
    k1, k2 = ta.reduce_axis((0, m), "k1"), ta.reduce_axis((0, m), "k2")
    mx = ta.compute((n,), lambda i: ta.max(X[i, k1], k1), name="mx")
    S = ta.compute((n,), lambda i: ta.sum(ta.exp(X[i, k2] - mx[i]), k2), name="S")
    return ta.compute((n, m), lambda i, j: X[i, j] - mx[i] - ta.log(S[i]), name="logsoftmax"), [X]


def sum_where_triangle() -> Built:
    A, x = _f("A", 7, 7), _f("x", 7)
    k = ta.reduce_axis((0, 7), "k")
    return ta.compute((7,), lambda i: ta.sum(A[i, k] * x[k], k, where=k <= i), name="trmv"), [A, x]


def max_where_band() -> Built:
    A = _f("A", 6, 9)
    k = ta.reduce_axis((0, 9), "k")
    return ta.compute((6,), lambda i: ta.max(A[i, k], k, where=(k >= i) & (k < i + 3)), name="band"), [A]


def sum_where_even() -> Built:
    A = _f("A", 5, 8)
    k = ta.reduce_axis((0, 8), "k")
    return ta.compute((5,), lambda i: ta.sum(A[i, k] * A[i, k], k, where=k % 2 == 0), name="even"), [A]


def broadcast_add() -> Built:
    A, b = _f("A", 5, 6), _f("b", 6)
    return ta.compute((5, 6), lambda i, j: A[i, j] + b[j], name="Y"), [A, b]


def broadcast_outer() -> Built:
    x, y = _f("x", 5), _f("y", 7)
    return ta.compute((5, 7), lambda i, j: x[i] * y[j], name="outer"), [x, y]


def sum_of_squares() -> Built:
    A = _f("A", 5, 6)
    i, j = ta.reduce_axis((0, 5), "i"), ta.reduce_axis((0, 6), "j")
    return ta.compute((), lambda: ta.sum(A[i, j] * A[i, j], [i, j]), name="ss"), [A]


def product_reduction() -> Built:
    A = _f("A", 4, 6)
    k = ta.reduce_axis((0, 6), "k")
    return ta.compute((4,), lambda i: ta.prod(A[i, k], k), name="prod"), [A]


def relu_select() -> Built:
    A = _f("A", 5, 6)
    return ta.compute((5, 6), lambda i, j: ta.if_then_else(A[i, j] > 0.0, A[i, j], 0.0), name="relu"), [A]


def transpose_mix() -> Built:
    A = _f("A", 6, 6)
    return ta.compute((6, 6), lambda i, j: A[i, j] * A[j, i] + A[i, i], name="mix"), [A]


def scan(kind: str) -> Callable[[], Built]:
    def build() -> Built:
        X = _f("X", 4, 16)
        k = ta.reduce_axis((0, 16), "k")
        reduce = {"sum": ta.sum, "max": ta.max, "prod": ta.prod}[kind]
        return ta.compute((4, 16), lambda i, j: reduce(X[i, k], k, where=k <= j), name=f"cum{kind}"), [X]
    return build


FORMS: dict[str, Callable[[], Built]] = {
    "matmul": matmul,
    "gram": gram,
    "conv2d": conv2d,
    "conv2d_padded_strided": conv2d_padded,
    "max_pool": pool("max", 2, 2),
    "max_pool_overlapping": pool("max", 3, 1),
    "avg_pool": pool("avg", 2, 2),
    "softmax": softmax,
    "log_softmax": log_softmax,
    "sum_where_triangle": sum_where_triangle,
    "max_where_band": max_where_band,
    "sum_where_even": sum_where_even,
    "broadcast_add": broadcast_add,
    "broadcast_outer": broadcast_outer,
    "sum_of_squares": sum_of_squares,
    "product_reduction": product_reduction,
    "relu_select": relu_select,
    "transpose_mix": transpose_mix,
    "cumsum": scan("sum"),
    "cummax": scan("max"),
    "cumprod": scan("prod"),
    **{f"max_pool_k{k}_s{s}_d{d}": pool("max", k, s, d)
       for k in (1, 2) for s in (1, 2, 3) for d in (1, 2)},
}
