"""The workloads of the optimizer's bar, each with its hand-written gradient's work.

Every workload builds a forward computation with ``ta.topi`` (small shapes that do not divide
strides and windows evenly), a head ``H`` and the inputs to differentiate, and states the work
of the hand-written gradient formula -- innermost loop-body executions, counted the way
``ta.lower(...).work`` counts them -- next to the formula itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import tensorad as ta


@dataclass
class Workload:
    name: str
    output: ta.Tensor
    inputs: list
    formula: str
    hand_work: int


def _pairs(size: int, out: int, window: int, stride: int, pad: int, dilation: int = 1) -> int:
    """#{(o, k): 0 <= o*stride + k*dilation - pad < size}: valid (output, tap) pairs per axis."""
    return sum(1 for o in range(out) for k in range(window)
               if 0 <= o * stride + k * dilation - pad < size)


def dense() -> Workload:
    b, n_in, n_out = 4, 7, 5
    X, W, B = ta.placeholder((b, n_in), name="X"), ta.placeholder((n_out, n_in), name="W"), \
        ta.placeholder((n_out,), name="B")
    # dX = H W (b*in*out), dW = H^T X (out*in*b), dB = sum_i H (out*b)
    return Workload("dense", ta.topi.nn.dense(X, W, B), [X, W, B],
                    "dX=H.W, dW=H^T.X, dB=sum_i H: 2*b*in*out + b*out", 2 * b * n_in * n_out + b * n_out)


def conv2d(stride: int = 2, pad: int = 1, dilation: int = 1) -> Workload:
    n, c, h, w, f, k = 2, 3, 9, 8, 4, 3
    X, Wt = ta.placeholder((n, c, h, w), name="X"), ta.placeholder((f, c, k, k), name="W")
    Y = ta.topi.nn.conv2d(X, Wt, stride, pad, dilation)
    oh, ow = Y.shape[2:]
    ph, pw = _pairs(h, oh, k, stride, pad, dilation), _pairs(w, ow, k, stride, pad, dilation)
    # each (output position, tap) pair that lands inside X is one multiply-add of dX and of dW
    return Workload(f"conv2d(s={stride},p={pad},d={dilation})", Y, [X, Wt],
                    "dX, dW over valid (out, tap) pairs: 2*N*F*C*Ph*Pw", 2 * n * f * c * ph * pw)


def pool(kind: str, k: int, stride: int, pad: int = 0) -> Workload:
    n, c, h, w = 2, 3, 9, 7
    X = ta.placeholder((n, c, h, w), name="X")
    Y = ta.topi.nn.pool(X, k, stride, [pad] * 4, kind)
    oh, ow = Y.shape[2:]
    ph, pw = _pairs(h, oh, k, stride, pad), _pairs(w, ow, k, stride, pad)
    gather = n * c * ph * pw
    if kind == "avg":
        return Workload(f"avg_pool(k={k},s={stride},p={pad})", Y, [X],
                        "dX[h] = sum over windows holding h of H/k^2: N*C*Ph*Pw", gather)
    windows = n * c * oh * ow
    # the maximum and its tie count (a pass over each window), the lone winner's scatter, and the
    # routing of tied points (a gather's pairs when every point ties: the worst case)
    return Workload(f"max_pool(k={k},s={stride},p={pad})", Y, [X],
                    "max and tie count 2*N*C*OH*OW*k^2 + scatter N*C*OH*OW + tie routing N*C*Ph*Pw",
                    2 * windows * k * k + windows + gather)


def softmax() -> Workload:
    n, m = 3, 7
    X = ta.placeholder((n, m), name="X")
    # forward max, sum of exp, Y; then s = sum_j H*Y and dX = Y*(H - s): 5 passes over X
    return Workload("softmax", ta.topi.nn.softmax(X), [X], "max, sum, Y, sum(H*Y), dX: 5*n*m", 5 * n * m)


def log_softmax() -> Workload:
    n, m = 3, 7
    X = ta.placeholder((n, m), name="X")
    # forward max and sum of exp; s = sum_j H; dX = H - exp(X - max)/sum * s: 4 passes
    return Workload("log_softmax", ta.topi.nn.log_softmax(X), [X],
                    "max, sum, sum_j H, dX: 4*n*m", 4 * n * m)


def homebrew_softmax() -> Workload:
    n, k, m = 3, 6, 5
    X, W = ta.placeholder((n, k), name="X"), ta.placeholder((m, k), name="W")
    E = ta.topi.exp(ta.topi.nn.dense(X, W))
    S = ta.topi.sum(E, axis=-1, keepdims=True)
    Y = E / S
    # D = X W^T (n*m*k), S (n*m), s = sum(H*Y) (n*m), G = Y*(H - s) (n*m),
    # dX = G W (n*k*m), dW = G^T X (m*k*n)
    return Workload("softmax_homebrew", Y, [X, W], "D, S, s, G, dX, dW: 3*n*m*k + 3*n*m",
                    3 * n * m * k + 3 * n * m)


def flatten() -> Workload:
    X = ta.placeholder((2, 3, 4, 5), name="X")
    return Workload("flatten", ta.topi.nn.flatten(X), [X], "dX = H[n, flat index]: |X|", 120)


def reshape() -> Workload:
    X = ta.placeholder((4, 6, 5), name="X")
    return Workload("reshape", ta.topi.reshape(X, (5, 3, 8)), [X], "dX = H[reshaped index]: |X|", 120)


def transpose() -> Workload:
    X = ta.placeholder((3, 4, 5), name="X")
    return Workload("transpose", ta.topi.transpose(X, (2, 0, 1)), [X], "dX = H transposed: |X|", 60)


def broadcast_add() -> Workload:
    A, b = ta.placeholder((4, 6), name="A"), ta.placeholder((6,), name="b")
    return Workload("broadcast_add", A + b, [A, b], "dA = H (n*m), db = sum_i H (n*m): 2*n*m", 48)


def elementwise(fn: Callable, name: str) -> Workload:
    X = ta.placeholder((4, 6), name="X")
    return Workload(name, fn(X), [X], "dX = H * f'(X): n*m", 24)


def concat() -> Workload:
    A, B = ta.placeholder((3, 4), name="A"), ta.placeholder((5, 4), name="B")
    return Workload("concatenate", ta.topi.concatenate([A, B], 0), [A, B],
                    "dA, dB = slices of H: |A| + |B|", 32)


def split() -> Workload:
    X = ta.placeholder((6, 5), name="X")
    top, bottom = ta.topi.split(X, [2], axis=0)
    Y = ta.compute((4, 5), lambda i, j: ta.if_then_else(i < 2, top[i, j], 2.0 * bottom[i, j]),
                   name="Y")
    # Y reads rows 0-1 of X (top) and rows 4-5 (bottom[2:4]); rows 2-3 get no gradient
    return Workload("split", Y, [X], "dX = H on rows 0-1, 2H on rows 4-5: 4*5", 20)


def all_workloads() -> list[Workload]:
    return [
        dense(),
        conv2d(1, 0, 1), conv2d(2, 1, 1), conv2d(2, 0, 2), conv2d(3, 2, 1),
        pool("avg", 2, 2), pool("avg", 3, 2), pool("avg", 3, 2, 1),
        pool("max", 2, 2), pool("max", 3, 2), pool("max", 3, 1, 1),
        softmax(), log_softmax(), homebrew_softmax(),
        flatten(), reshape(), transpose(), broadcast_add(),
        elementwise(ta.topi.nn.relu, "relu"), elementwise(ta.topi.sigmoid, "sigmoid"),
        elementwise(ta.topi.tanh, "tanh"),
        concat(), split(),
    ]


# ---- the operator families: hand formulas at <= 1.1x (test_families.py) ---------------------
# Work counts innermost loop-body executions; a pass over a tensor of n elements is n, and
# each reduction is its own pass (two sums over the same domain count twice).

def _nchw() -> tuple:
    n, c, h, w = 2, 4, 5, 3
    return (ta.placeholder((n, c, h, w), name="X"), ta.placeholder((c,), name="g"),
            ta.placeholder((c,), name="b"), n * c * h * w, c)


def batch_norm() -> Workload:
    X, g, b, size, c = _nchw()
    # mean[c] = sum X / M, var[c] = sum (X - mean)^2 / M, rstd = (var + eps)^-1/2   (2 passes, C)
    # dbeta = sum H, dgamma = rstd * sum H (X - mean)                                (2 passes)
    # dX = g rstd (H - dbeta/M - (X - mean) rstd^2 dgamma'/M): sum(X - mean) = 0     (1 pass)
    return Workload("batch_norm", ta.topi.nn.batch_norm(X, g, b), [X, g, b],
                    "mean, var, dbeta, sum H(X - mean), dX: 5*NCHW + C", 5 * size + c)


def layer_norm() -> Workload:
    r, d = 6, 7
    X, g, b = ta.placeholder((r, d), name="X"), ta.placeholder((d,), name="g"), \
        ta.placeholder((d,), name="b")
    # mean, var per row (2 passes, R rstd); dbeta = sum_r H, dgamma = sum_r H xhat (2 passes);
    # per row a = sum_d H g, c = sum_d H g xhat (2 passes); dX = rstd (H g - a/D - xhat c/D)
    return Workload("layer_norm", ta.topi.nn.layer_norm(X, g, b), [X, g, b],
                    "mean, var, dbeta, dgamma, two row sums, dX: 7*R*D + R", 7 * r * d + r)


def group_norm(groups: int) -> Workload:
    X, g, b, size, c = _nchw()
    n = X.shape[0]
    # per (n, c): p = sum_hw H, q = sum_hw H (X - mean)  (2 passes, shared by the statistics'
    # adjoints and dgamma/dbeta); mean, var (2 passes), dX (1 pass); per (n, c) and per c:
    # dbeta = sum_n p, dgamma = sum_n rstd q, and the two per-group sums of g p, g rstd q
    name = "instance_norm" if groups == c else f"group_norm(G={groups})"
    return Workload(name, ta.topi.nn.group_norm(X, groups, g, b), [X, g, b],
                    "mean, var, p, q, dX: 5*NCHW + 4*N*C", 5 * size + 4 * n * c)


def variance() -> Workload:
    r, d = 6, 7
    X = ta.placeholder((r, d), name="X")
    # mean (1 pass); dX = H * 2 (X - mean) / D (1 pass; the mean's adjoint is sum(X - mean) = 0)
    return Workload("var", ta.topi.var(X, axis=1), [X], "mean, dX: 2*R*D", 2 * r * d)


def upsampling_nearest() -> Workload:
    X = ta.placeholder((2, 3, 4, 5), name="X")
    # dX[y, x] = sum of the s*s outputs it fills: one read of each output
    return Workload("upsampling_nearest", ta.topi.nn.upsampling(X, 2), [X], "dX: |Y|", 2 * 3 * 8 * 10)


def causal_attention() -> Workload:
    length, d = 9, 4
    Q, K, V = (ta.placeholder((length, d), name=n) for n in "QKV")
    t = length * (length + 1) // 2  # (l, s) pairs with s <= l
    # forward on the triangle: S = QK^T (T*D), max, sum, P (3T); backward: dV = P^T H, dP = H V^T
    # (2 T*D), r = sum_s dP P (T), dS = P (dP - r) (T), dQ = dS K, dK = dS^T Q (2 T*D)
    return Workload("causal_attention", ta.topi.nn.scaled_dot_product_attention(Q, K, V, causal=True),
                    [Q, K, V], "S, max, sum, P, dV, dP, r, dS, dQ, dK: 5*T*D + 5*T", 5 * t * d + 5 * t)


def constant_head() -> Workload:
    n = 16
    A = ta.placeholder((n, n), name="A")
    k = ta.reduce_axis((0, n), "k")
    B = ta.compute((n, n), lambda i, j: ta.sum(A[i, k] * A[k, i] + 5.0, k), name="B")
    # dA[p, q] = (h[p] + h[q]) A[q, p] with h[i] = sum_j H[i, j]: n^2 + n^2
    return Workload("sum_k(A[i,k]A[k,i]+5)", B, [A], "h = sum_j H, dA: 2*n^2", 2 * n * n)


def family_workloads() -> list[Workload]:
    return [batch_norm(), layer_norm(), group_norm(2), group_norm(4), variance(),
            upsampling_nearest(), upsampling_bilinear(), causal_attention(), constant_head()]


def upsampling_bilinear() -> Workload:
    n, c, h, w = 2, 3, 4, 5
    X = ta.placeholder((n, c, h, w), name="X")
    # separable, scale 2, align_corners=False: along W each output reads 2 columns of T
    # ([N, C, 2h, w]) but the first and last of a row read 1 (clamped): dT taps
    # N*C*2h*(2*2w - 2); along H each T element reads 2 rows of X, the edge rows 1: dX taps
    # N*C*w*(2*2h - 2).  The gradient gathers each input's taps once.
    hand = n * c * 2 * h * (2 * 2 * w - 2) + n * c * w * (2 * 2 * h - 2)
    return Workload("upsampling_bilinear", ta.topi.nn.upsampling(X, 2, "bilinear"), [X],
                    "dT, dX over the interpolation taps", hand)


def hand_causal_attention(n: int, d: int, lifted: bool = False):
    """Causal attention written by hand: softmax's input is an elementwise tensor
    (``scaled = scores / 8``; with ``lifted``, one compute ``sum(Q K) / 8`` whose sum the
    language lifts into ``scores.red``), the mask an ``if_then_else`` inside sums
    ``where j <= i``, and the scores are defined on the whole square."""
    Q, K, V = (ta.placeholder((n, d), name=c) for c in "QKV")
    r = ta.reduce_axis((0, d), "d")
    if lifted:
        Ss = ta.compute((n, n), lambda i, j: ta.sum(Q[i, r] * K[j, r], r) / 8.0, name="scores")
    else:
        S = ta.compute((n, n), lambda i, j: ta.sum(Q[i, r] * K[j, r], r), name="scores")
        Ss = ta.compute((n, n), lambda i, j: S[i, j] / 8.0, name="scaled")
    s1, s2, s3 = (ta.reduce_axis((0, n), "s") for _ in range(3))
    m = ta.compute((n,), lambda i: ta.max(Ss[i, s1], s1, where=s1 <= i), name="rowmax")
    E = ta.compute((n, n), lambda i, j: ta.if_then_else(j <= i, ta.exp(Ss[i, j] - m[i]), 0.0), name="E")
    den = ta.compute((n,), lambda i: ta.sum(E[i, s2], s2, where=s2 <= i), name="den")
    P = ta.compute((n, n), lambda i, j: E[i, j] / den[i], name="P")
    out = ta.compute((n, d), lambda i, e: ta.sum(P[i, s3] * V[s3, e], s3, where=s3 <= i), name="O")
    H = ta.placeholder(out.shape, name="H")
    return out, [Q, K, V], H


# ---- classes found above the hand-written formula ----------------------------------------------
# Each is written as a user writes it, its hand-written gradient's work stated beside it.  The
# work gate (tests/golden) pins what the optimizer does; test_hand_work_gaps.py holds those that
# reach their formula, and the others' formulas say where it should get to.

def min_middle_axis() -> Workload:
    b, k, j = 3, 7, 5
    A = ta.placeholder((b, k, j), name="A")
    # one pass finds each winner and counts its ties; one routes H / count to the winners
    return Workload("min_middle_axis", ta.topi.min(A, axis=1), [A],
                    "winner with its tie count, routing: 2*B*K*J", 2 * b * k * j)


def gram() -> Workload:
    n, d = 6, 5
    X = ta.placeholder((n, d), name="X")
    G = ta.topi.matmul(X, ta.topi.transpose(X))
    # S = H + H^T (n^2), dX = S X (n^2 d)
    return Workload("gram(X X^T)", G, [X], "S = H + H^T, dX = S X: n^2*d + n^2", n * n * d + n * n)


def causal_attention_where() -> Workload:
    n, d = 9, 4
    out, inputs, _ = hand_causal_attention(n, d)
    t = n * (n + 1) // 2
    # as causal_attention, every pass on the triangle
    return Workload("causal_attention_where", out, inputs,
                    "S, max, sum, P, dV, dP, r, dS, dQ, dK on the triangle: 5*T*D + 5*T",
                    5 * t * d + 5 * t)


def softmax_channels() -> Workload:
    n, c, h, w = 2, 5, 4, 3
    X = ta.placeholder((n, c, h, w), name="X")
    # m = max_c, se = sum_c exp, r = sum_c H P, dX = P (H - r): four passes over X
    return Workload("softmax(axis=1)", ta.topi.nn.softmax(X, axis=1), [X],
                    "m, se, r = sum_c H P, dX = P (H - r): 4*NCHW", 4 * n * c * h * w)


def avg_pool_excluding_padding() -> Workload:
    n, c, h, w, k, stride, pad = 2, 3, 9, 7, 3, 2, 1
    X = ta.placeholder((n, c, h, w), name="X")
    Y = ta.topi.nn.pool(X, k, stride, [pad] * 4, "avg", count_include_pad=False)
    oh, ow = Y.shape[2:]
    ph, pw = _pairs(h, oh, k, stride, pad), _pairs(w, ow, k, stride, pad)
    # a window's count is a closed form of its position; dX gathers H / count over the windows
    return Workload("avg_pool_excluding_padding", Y, [X],
                    "dX[h] = sum over windows holding h of H/count: N*C*Ph*Pw", n * c * ph * pw)


def log_softmax_nll_onehot() -> Workload:
    r, c = 6, 9
    X, T = ta.placeholder((r, c), name="X"), ta.placeholder((r, c), name="T")
    L = ta.topi.nn.log_softmax(X)
    loss = -ta.topi.sum(ta.topi.multiply(T, L)) / float(r)
    # m, se (forward), t = sum_c T, dX = h (P t - T) / R: four passes over the logits
    return Workload("log_softmax_nll_onehot", loss, [X], "m, se, sum_c T, dX: 4*R*C", 4 * r * c)


def max_pool_1x1(stride: int) -> Workload:
    wl = pool("max", 1, stride)
    windows = math.prod(wl.output.shape)  # a window of one point: no winner, no ties
    return Workload(f"max_pool_1x1(s={stride})", wl.output, wl.inputs,
                    "the head copied to each window's point N*C*OH*OW, the rest zeroed", 2 * windows)


def _prefix(kind: str) -> Workload:
    r, n = 4, 16
    X = ta.placeholder((r, n), name="X")
    k = ta.reduce_axis((0, n), "k")
    reduce = {"sum": ta.sum, "max": ta.max, "prod": ta.prod}[kind]
    Y = ta.compute((r, n), lambda i, j: reduce(X[i, k], k, where=k <= j), name=f"cum{kind}")
    # the forward is a scan (R*N); the adjoint of a prefix reduction is a suffix scan of the head
    # (R*N), plus for max the winners' routing and for prod the products on either side (R*N each).
    # Linear at every length on AVX-512 and AVX2 alike: a scan's rows are vectorized across rows
    # (transposed in registers) or, a sum's and a product's on AVX2, run as scalar chains.
    # A product's gradient scans at every length: its exclusive product and recurrence combine
    # in order, unvectorized in any loops
    passes = {"sum": 2, "max": 3, "prod": 4}[kind]
    return Workload(f"cum{kind}", Y, [X], f"scan, suffix scans: {passes}*R*N", passes * r * n)


def _box(reduce, name: str, n: int = 12) -> tuple[ta.Tensor, ta.Tensor]:
    """``Y[i, j] = reduce over a <= i, b <= j of X[a, b]`` on an n x n ``X``: ``(Y, X)``."""
    X = ta.placeholder((n, n), name="X")
    a, b = ta.reduce_axis((0, n), "a"), ta.reduce_axis((0, n), "b")
    return ta.compute((n, n), lambda i, j: reduce(X[a, b], [a, b], where=(a <= i) & (b <= j)), name=name), X


def summed_area() -> Workload:
    n = 12
    Y, X = _box(ta.sum, "sat", n)
    # the adjoint sums the head over the quadrant after each point: a suffix scan of each row, then of
    # each column of those (N*N each)
    return Workload("summed_area", Y, [X], "row suffix scans, column suffix scans: 2*N*N", 2 * n * n)


def cummax_padded() -> Workload:
    n = 32
    X = ta.placeholder((n,), name="X")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((n,), lambda i: ta.max(ta.if_then_else(k <= i, X[k], -math.inf), k), name="cummax_padded")
    # the winner's scan with its tie count, the suffix scan of the head's shares (the padding counted
    # among the ties where the maximum is -inf), the routing: N each
    return Workload("cummax_padded", Y, [X], "winner scan, shares' suffix scan, routing: 3*N", 3 * n)


def strided_prefix() -> Workload:
    n = 32
    X = ta.placeholder((2 * n,), name="X")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((n,), lambda i: ta.sum(X[2 * k], k, where=k <= i), name="strided_prefix")
    return Workload("strided_prefix", Y, [X], "suffix scan of the head onto the even points: N", n)


def cummax_middle() -> Workload:
    b, n, c = 3, 16, 5
    X = ta.placeholder((b, n, c), name="X")
    k = ta.reduce_axis((0, n), "k")
    Y = ta.compute((b, n, c), lambda p, i, q: ta.max(X[p, k, q], k, where=k <= i), name="cummax_middle")
    # along a middle axis as along the last: the winner's scan with its tie count, the suffix scan of
    # the head's shares, the routing: B*N*C each
    return Workload("cummax_middle", Y, [X], "winner scan, shares' suffix scan, routing: 3*B*N*C",
                    3 * b * n * c)


ARGMAX = ta.comm_reducer(
    lambda x, y: (ta.select(x[0] >= y[0], x[0], y[0]), ta.select(x[0] >= y[0], x[1], y[1])),
    lambda v, i: (ta.min_value(v), ta.const(-1, i)), name="argmax")


def running_argmax() -> Workload:
    r, n = 4, 16
    X = ta.placeholder((r, n), name="X")
    k = ta.reduce_axis((0, n), "k")
    V, _ = ta.compute((r, n), lambda i, j: ARGMAX((X[i, k], k), axis=k, where=k <= j), name="running_argmax")
    # the winner's scan (its value carried beside its index), the head scattered to each winner: R*N each
    return Workload("running_argmax", V, [X], "winner scan, scatter of the head: 2*R*N", 2 * r * n)


def box_max() -> Workload:
    n = 12
    Y, X = _box(ta.max, "box_max", n)
    # a running max of running maxes: both winner scans with their tie counts, the whole window's ties,
    # the head's shares, each running max's suffix recurrence and routing: N*N each
    return Workload("box_max", Y, [X], "nested running maxes, ties over the window: 8*N*N", 8 * n * n)


def gap_workloads() -> list[Workload]:
    return [min_middle_axis(), gram(), causal_attention_where(), softmax_channels(),
            avg_pool_excluding_padding(), log_softmax_nll_onehot(), max_pool_1x1(1), max_pool_1x1(2),
            _prefix("sum"), _prefix("max"), _prefix("prod"), summed_area(), cummax_padded(), strided_prefix(),
            cummax_middle(), running_argmax(), box_max()]


# ---- a holdout: operators as a user writes them, each with an expert's backward -------------
# Written with ``ta.compute`` and reductions, not with the operator library.  Each formula counts
# the passes an expert's backward runs (reading the inputs and the head, recomputing what the
# forward computed): a pass over n elements is n, a per-row scalar R.

def _rows(*names: str, r: int = 6, d: int = 7) -> list:
    return [ta.placeholder((r, d), name=n) for n in names]


def middle_variance() -> Workload:
    b, n, d = 3, 7, 5
    X = ta.placeholder((b, n, d), name="X")
    k, k2 = ta.reduce_axis((0, n), "k"), ta.reduce_axis((0, n), "k2")
    mean = ta.compute((b, d), lambda i, j: ta.sum(X[i, k, j], k) / float(n), name="mean")
    V = ta.compute((b, d), lambda i, j: ta.sum((X[i, k2, j] - mean[i, j]) ** 2, k2) / float(n), name="var")
    # mean (B*N*D); dX = H 2 (X - mean) / N (B*N*D)
    return Workload("holdout_var_middle", V, [X], "mean, dX: 2*B*N*D", 2 * b * n * d)


def _sumsq(X: ta.Tensor, name: str) -> ta.Tensor:
    k = ta.reduce_axis((0, X.shape[1]), "k")
    return ta.compute((X.shape[0],), lambda i: ta.sum(X[i, k] * X[i, k], k), name=name)


def l2_normalize() -> Workload:
    (X,) = _rows("X")
    r, d = X.shape
    ss = _sumsq(X, "ss")
    Y = ta.compute((r, d), lambda i, j: X[i, j] / ta.sqrt(ss[i] + 1e-6), name="Y")
    # s = sum X^2, c = sum H X (2 R*D, R), dX = H / n - X c / n^3 (R*D)
    return Workload("holdout_l2_normalize", Y, [X], "s, c, dX: 3*R*D + R", 3 * r * d + r)


def cosine_similarity() -> Workload:
    A, B = _rows("A", "B")
    r, d = A.shape
    k = ta.reduce_axis((0, d), "k")
    dot = ta.compute((r,), lambda i: ta.sum(A[i, k] * B[i, k], k), name="dot")
    na, nb = _sumsq(A, "na"), _sumsq(B, "nb")
    Y = ta.compute((r,), lambda i: dot[i] / ta.sqrt(na[i] * nb[i] + 1e-8), name="cos")
    # dot, |A|^2, |B|^2 (3 R*D, R), dA = H (B - y A |b|/|a|) / (|a||b|), dB alike (2 R*D)
    return Workload("holdout_cosine_similarity", Y, [A, B], "three row sums, dA, dB: 5*R*D + R",
                    5 * r * d + r)


def grouped_conv() -> Workload:
    n, c, h, w, f, g, kk = 2, 4, 7, 6, 4, 2, 3
    cg, fg = c // g, f // g
    X, Wt = ta.placeholder((n, c, h, w), name="X"), ta.placeholder((f, cg, kk, kk), name="W")
    oh, ow = h - kk + 1, w - kk + 1
    rc, ry, rx = ta.reduce_axis((0, cg), "rc"), ta.reduce_axis((0, kk), "ry"), ta.reduce_axis((0, kk), "rx")
    Y = ta.compute((n, f, oh, ow), lambda b, o, i, j: ta.sum(
        X[b, o // fg * cg + rc, i + ry, j + rx] * Wt[o, rc, ry, rx], [rc, ry, rx]), name="Y")
    # dX, dW: one multiply-add per (output, channel of its group, tap) each
    return Workload("holdout_grouped_conv", Y, [X, Wt], "dX, dW: 2*N*F*Cg*OH*OW*K*K",
                    2 * n * f * cg * oh * ow * kk * kk)


def depthwise_separable_conv() -> Workload:
    n, c, h, w, f, kk = 2, 3, 7, 6, 4, 3
    X, Wd, Wp = ta.placeholder((n, c, h, w), name="X"), ta.placeholder((c, kk, kk), name="Wd"), \
        ta.placeholder((f, c), name="Wp")
    oh, ow = h - kk + 1, w - kk + 1
    ry, rx, rc = ta.reduce_axis((0, kk), "ry"), ta.reduce_axis((0, kk), "rx"), ta.reduce_axis((0, c), "rc")
    D = ta.compute((n, c, oh, ow), lambda b, ch, i, j: ta.sum(X[b, ch, i + ry, j + rx] * Wd[ch, ry, rx],
                                                             [ry, rx]), name="D")
    Y = ta.compute((n, f, oh, ow), lambda b, o, i, j: ta.sum(Wp[o, rc] * D[b, rc, i, j], rc), name="Y")
    p = n * c * oh * ow
    # D again (9 P), dD = Wp^T H (F P), dWp = H D^T (F P), dX, dWd over the taps (2 * 9 P)
    return Workload("holdout_depthwise_separable_conv", Y, [X, Wd, Wp],
                    "D, dD, dWp, dX, dWd: 2*F*P + 3*K*K*P", 2 * f * p + 3 * kk * kk * p)


def avg_pool_ceil() -> Workload:
    n, c, h, w = 2, 3, 7, 5
    X = ta.placeholder((n, c, h, w), name="X")
    oh, ow = (h + 1) // 2, (w + 1) // 2
    ry, rx = ta.reduce_axis((0, 2), "ry"), ta.reduce_axis((0, 2), "rx")

    def count(i, j):  # the window's elements inside X (ceil mode clips the last window)
        return ta.cast("float32", (ta.minimum(2 * i + 2, h) - 2 * i) * (ta.minimum(2 * j + 2, w) - 2 * j))

    S = ta.compute((n, c, oh, ow), lambda b, ch, i, j: ta.sum(
        X[b, ch, 2 * i + ry, 2 * j + rx], [ry, rx], where=(2 * i + ry < h) & (2 * j + rx < w)), name="S")
    Y = ta.compute((n, c, oh, ow), lambda b, ch, i, j: S[b, ch, i, j] / count(i, j), name="Y")
    # dX[y, x] = H[y // 2, x // 2] / count: one read per input element
    return Workload("holdout_avg_pool_ceil", Y, [X], "dX: N*C*H*W", n * c * h * w)


def glu() -> Workload:
    r, d = 6, 5
    X = ta.placeholder((r, 2 * d), name="X")
    Y = ta.compute((r, d), lambda i, j: X[i, j] * ta.sigmoid(X[i, j + d]), name="Y")
    # dX[:, :D] = H s, dX[:, D:] = H a s (1 - s): one pass over dX
    return Workload("holdout_glu", Y, [X], "dX: 2*R*D", 2 * r * d)


def rms_norm() -> Workload:
    (X,) = _rows("X")
    r, d = X.shape
    g = ta.placeholder((d,), name="g")
    ss = _sumsq(X, "ss")
    Y = ta.compute((r, d), lambda i, j: X[i, j] / ta.sqrt(ss[i] / float(d) + 1e-6) * g[j], name="Y")
    # ms (R*D, R), c = sum H g X (R*D), dX = rs (H g - X c rs^2 / D) (R*D), dg = sum_r H X rs (R*D)
    return Workload("holdout_rms_norm", Y, [X, g], "ms, c, dX, dg: 4*R*D + R", 4 * r * d + r)


def swish() -> Workload:
    X = ta.placeholder((4, 9), name="X")
    Y = ta.compute(X.shape, lambda i, j: X[i, j] * ta.sigmoid(X[i, j]), name="Y")
    # dX = H (s + x s (1 - s))
    return Workload("holdout_swish", Y, [X], "dX: N", 4 * 9)


def batched_matmul_broadcast() -> Workload:
    b, m, k, n = 3, 4, 5, 6
    A, Wt = ta.placeholder((b, m, k), name="A"), ta.placeholder((k, n), name="W")
    r = ta.reduce_axis((0, k), "r")
    Y = ta.compute((b, m, n), lambda p, i, j: ta.sum(A[p, i, r] * Wt[r, j], r), name="Y")
    # dA = H W^T (B*M*N*K), dW = sum over the batch of A^T H (B*M*K*N)
    return Workload("holdout_bmm_broadcast", Y, [A, Wt], "dA, dW: 2*B*M*N*K", 2 * b * m * n * k)


def embedding_bag_sum() -> Workload:
    v, d, b, length = 10, 4, 3, 5
    E, idx = ta.placeholder((v, d), name="E"), ta.placeholder((b, length), "int32", name="idx")
    t = ta.reduce_axis((0, length), "t")
    Y = ta.compute((b, d), lambda i, j: ta.sum(E[idx[i, t], j], t), name="Y")
    # dE: zeros (a fill, no loop body), then one scatter-add per (bag, item, column)
    return Workload("holdout_embedding_bag_sum", Y, [E], "scatter: B*L*D", b * length * d)


def triplet_loss() -> Workload:
    A, P, N = _rows("A", "P", "N", d=5)
    r, d = A.shape
    k, k2 = ta.reduce_axis((0, d), "k"), ta.reduce_axis((0, d), "k2")
    dp = ta.compute((r,), lambda i: ta.sum((A[i, k] - P[i, k]) ** 2, k), name="dp")
    dn = ta.compute((r,), lambda i: ta.sum((A[i, k2] - N[i, k2]) ** 2, k2), name="dn")
    q = ta.reduce_axis((0, r), "q")
    L = ta.compute((), lambda: ta.sum(ta.maximum(dp[q] - dn[q] + 1.0, 0.0), q), name="L")
    # dp, dn (2 R*D, R for the hinge), dA = 2 m (N - P), dP = -2 m (A - P), dN = 2 m (A - N)
    return Workload("holdout_triplet_loss", L, [A, P, N], "dp, dn, dA, dP, dN: 5*R*D + R",
                    5 * r * d + r)


def huber_loss() -> Workload:
    X, T = _rows("X", "T")
    r, d = X.shape
    i, j = ta.reduce_axis((0, r), "i"), ta.reduce_axis((0, d), "j")
    e = ta.compute((r, d), lambda a, c: X[a, c] - T[a, c], name="e")
    L = ta.compute((), lambda: ta.sum(ta.select(ta.abs(e[i, j]) <= 1.0, 0.5 * e[i, j] * e[i, j],
                                                ta.abs(e[i, j]) - 0.5), [i, j]), name="L")
    # dX = H clip(X - T, -1, 1)
    return Workload("holdout_huber_loss", L, [X], "dX: R*D", r * d)


def causal_conv1d() -> Workload:
    b, c, length, f, kk = 2, 3, 12, 4, 3
    X, Wt = ta.placeholder((b, c, length), name="X"), ta.placeholder((f, c, kk), name="W")
    rc, rk = ta.reduce_axis((0, c), "rc"), ta.reduce_axis((0, kk), "rk")
    Y = ta.compute((b, f, length), lambda p, o, t: ta.sum(
        ta.if_then_else(t - rk >= 0, X[p, rc, t - rk], 0.0) * Wt[o, rc, rk], [rc, rk]), name="Y")
    pairs = sum(min(t + 1, kk) for t in range(length))  # (t, k) with t - k inside X
    # dX, dW over the valid (output, tap) pairs
    return Workload("holdout_causal_conv1d", Y, [X, Wt], "dX, dW: 2*B*F*C*pairs", 2 * b * f * c * pairs)


def pixel_shuffle() -> Workload:
    n, c, s, h, w = 2, 2, 2, 3, 4
    X = ta.placeholder((n, c * s * s, h, w), name="X")
    Y = ta.compute((n, c, h * s, w * s),
                   lambda p, ch, y, x: X[p, ch * s * s + y % s * s + x % s, y // s, x // s], name="Y")
    # dX is a permutation of H
    return Workload("holdout_pixel_shuffle", Y, [X], "dX: |X|", n * c * s * s * h * w)


def middle_logsumexp() -> Workload:
    b, n, d = 3, 7, 5
    X = ta.placeholder((b, n, d), name="X")
    k, k2 = ta.reduce_axis((0, n), "k"), ta.reduce_axis((0, n), "k2")
    m = ta.compute((b, d), lambda i, j: ta.max(X[i, k, j], k), name="m")
    s = ta.compute((b, d), lambda i, j: ta.sum(ta.exp(X[i, k2, j] - m[i, j]), k2), name="s")
    Y = ta.compute((b, d), lambda i, j: ta.log(s[i, j]) + m[i, j], name="Y")
    # m, s (forward), dX = H exp(X - m) / s
    return Workload("holdout_logsumexp_middle", Y, [X], "m, s, dX: 3*B*N*D", 3 * b * n * d)


def strided_dilated_conv1d() -> Workload:
    b, c, length, f, kk = 2, 3, 23, 4, 3
    X, Wt = ta.placeholder((b, c, length), name="X"), ta.placeholder((f, c, kk), name="W")
    ot = (length - 2 * (kk - 1) - 1) // 3 + 1
    rc, rk = ta.reduce_axis((0, c), "rc"), ta.reduce_axis((0, kk), "rk")
    Y = ta.compute((b, f, ot), lambda p, o, t: ta.sum(X[p, rc, 3 * t + 2 * rk] * Wt[o, rc, rk], [rc, rk]),
                   name="Y")
    # stride 3, dilation 2, no padding: dX, dW over every (output, channel, tap)
    return Workload("holdout_conv1d_stride3_dilation2", Y, [X, Wt], "dX, dW: 2*B*F*C*OT*K",
                    2 * b * f * c * ot * kk)


def triangular_step() -> Workload:
    r, n = 3, 9
    Bv, L, Dinv, X = (ta.placeholder(s, name=nm) for s, nm in (((r, n), "B"), ((n, n), "L"), ((n,), "Dinv"),
                                                                ((r, n), "X")))
    j = ta.reduce_axis((0, n), "j")
    S = ta.compute((r, n), lambda p, i: ta.sum(L[i, j] * X[p, j], j, where=j < i), name="S")
    Y = ta.compute((r, n), lambda p, i: (Bv[p, i] - S[p, i]) * Dinv[i], name="Y")
    # one step of forward substitution: dX, dL over the strict lower triangle (T pairs per row)
    return Workload("holdout_triangular_step", Y, [L, X], "dX, dL: 2*R*T", r * n * (n - 1))


def banded_matvec() -> Workload:
    r, n, bw = 3, 10, 2
    A, X = ta.placeholder((n, 2 * bw + 1), name="A"), ta.placeholder((r, n), name="X")
    k = ta.reduce_axis((0, 2 * bw + 1), "k")
    Y = ta.compute((r, n), lambda p, i: ta.sum(ta.if_then_else(
        (i + k - bw >= 0) & (i + k - bw < n), A[i, k] * X[p, i + k - bw], 0.0), k), name="Y")
    # dA, dX over the band's (row, offset) pairs inside X
    return Workload("holdout_banded_matvec", Y, [A, X], "dA, dX: 2*R*pairs",
                    2 * r * _pairs(n, n, 2 * bw + 1, 1, bw))


def euclidean_distances() -> Workload:
    n, m, d = 5, 6, 4
    X, Z = ta.placeholder((n, d), name="X"), ta.placeholder((m, d), name="Z")
    k = ta.reduce_axis((0, d), "k")
    S = ta.compute((n, m), lambda i, j: ta.sum((X[i, k] - Z[j, k]) ** 2, k), name="S")
    D = ta.compute((n, m), lambda i, j: ta.sqrt(S[i, j] + 1e-6), name="D")
    # S again (NMD), G = H / D (NM), dX, dZ over (X_i - Z_j) G (2 NMD)
    return Workload("holdout_euclidean_distances", D, [X, Z], "S, G, dX, dZ: 3*N*M*D + N*M",
                    3 * n * m * d + n * m)


def attention_with_additive_mask() -> Workload:
    n, d = 6, 4
    Q, K, V, Mb = (ta.placeholder(s, name=nm) for s, nm in (((n, d), "Q"), ((n, d), "K"), ((n, d), "V"),
                                                            ((n, n), "Mb")))
    r, s1, s2, s3 = (ta.reduce_axis((0, e), nm) for e, nm in ((d, "r"), (n, "s1"), (n, "s2"), (n, "s3")))
    S = ta.compute((n, n), lambda i, j: ta.sum(Q[i, r] * K[j, r], r) * 0.5 + Mb[i, j], name="S")
    mx = ta.compute((n,), lambda i: ta.max(S[i, s1], s1), name="mx")
    E = ta.compute((n, n), lambda i, j: ta.exp(S[i, j] - mx[i]), name="E")
    den = ta.compute((n,), lambda i: ta.sum(E[i, s2], s2), name="den")
    Out = ta.compute((n, d), lambda i, e: ta.sum(E[i, s3] * V[s3, e], s3) / den[i], name="O")
    t = n * n
    # as causal_attention on the whole square (the mask is data)
    return Workload("holdout_attention_additive_mask", Out, [Q, K, V],
                    "S, max, sum, P, dV, dP, r, dS, dQ, dK: 5*T*D + 5*T", 5 * t * d + 5 * t)


def einsum_bias_inner() -> Workload:
    b, i_, j_, k_ = 2, 4, 5, 6
    A, B, c = ta.placeholder((b, i_, j_), name="A"), ta.placeholder((b, j_, k_), name="B"), \
        ta.placeholder((j_,), name="c")
    j = ta.reduce_axis((0, j_), "j")
    Y = ta.compute((b, i_, k_), lambda p, i, q: ta.sum((A[p, i, j] + c[j]) * B[p, j, q], j), name="Y")
    # dA = H B^T (BIJK), dB = (A + c)^T H (BIJK, its side BIJ), dc = sum_{b,i} dA (BIJ)
    return Workload("holdout_einsum_bias_inner", Y, [A, B, c], "dA, dB, dc: 2*B*I*J*K + 2*B*I*J",
                    2 * b * i_ * j_ * k_ + 2 * b * i_ * j_)


def relu_of_max() -> Workload:
    b, n, d = 3, 7, 5
    X = ta.placeholder((b, n, d), name="X")
    k = ta.reduce_axis((0, n), "k")
    M = ta.compute((b, d), lambda p, j: ta.max(X[p, k, j], k), name="M")
    Y = ta.compute((b, d), lambda p, j: ta.maximum(M[p, j], 0.0), name="Y")
    # as a max pool: the max and its tie count (two passes), the lone winner's scatter, the ties'
    # routing (counted as taken)
    return Workload("holdout_relu_of_max", Y, [X], "max, ties, scatter, routing: 3*B*N*D + B*D",
                    3 * b * n * d + b * d)


def holdout_workloads() -> list[Workload]:
    return [middle_variance(), l2_normalize(), cosine_similarity(), grouped_conv(),
            depthwise_separable_conv(), avg_pool_ceil(), glu(), rms_norm(), swish(),
            batched_matmul_broadcast(), embedding_bag_sum(), triplet_loss(), huber_loss(),
            causal_conv1d(), pixel_shuffle(), middle_logsumexp(), strided_dilated_conv1d(),
            triangular_step(), banded_matvec(), euclidean_distances(), attention_with_additive_mask(),
            einsum_bias_inner(), relu_of_max()]
