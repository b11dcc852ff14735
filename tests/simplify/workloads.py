"""The workloads of the optimizer's bar, each with its hand-written gradient's work.

Every workload builds a forward computation with ``ta.topi`` (small shapes that do not divide
strides and windows evenly), a head ``H`` and the inputs to differentiate, and states the work
of the hand-written gradient formula -- innermost loop-body executions, counted the way
``ta.lower(...).work`` counts them -- next to the formula itself.
"""

from __future__ import annotations

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
    winner = n * c * oh * ow * k * k
    return Workload(f"max_pool(k={k},s={stride},p={pad})", Y, [X],
                    "argmax per window N*C*OH*OW*k^2 + gather N*C*Ph*Pw", winner + gather)


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
    return Workload(f"max_pool_1x1(s={stride})", wl.output, wl.inputs, wl.formula, wl.hand_work)


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


def gap_workloads() -> list[Workload]:
    return [min_middle_axis(), gram(), causal_attention_where(), softmax_channels(),
            avg_pool_excluding_padding(), log_softmax_nll_onehot(), max_pool_1x1(1), max_pool_1x1(2),
            _prefix("sum"), _prefix("max"), _prefix("prod")]
