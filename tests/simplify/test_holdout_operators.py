"""A holdout of operators written as a user writes them, with ``ta.compute`` and reductions, each beside the
work of an expert's backward: transposed, dilated and strided-transposed convolutions, im2col, circular
convolution, a segment sum and a segment max through ids, a one-hot pick, a codebook lookup by argmin and a
value read at an argmax, cumulative sums along a middle axis, log-sum-exp over two axes, L1 distances, a soft
argmax, attention with a relative-position bias, a ceil-mode max pool, a lower-triangular product, strided
slices concatenated, reflect and edge padding, a chain of three matrices summed in one reduction, instance
norm, a covariance, multi-class hinge, KL to a softmax, label-smoothed and contrastive cross-entropy, a mean
over data-given lengths, a sliding max padded with the identity; a gather along an axis (``take_along_axis``),
a strided permutation through ``%``, a roll by a data-given shift, a sequence reversed inside its data-given
length, space-to-depth, max-unpooling through the pool's indices, a masked mean, a segment mean, top-1 routing
(a mixture-of-experts gate), a banded matrix product, a causal log-sum-exp of outer products, a channel
shuffle, a batched trace, a Kronecker product, a temporal shift and a local response norm.

Each gradient's work, counted term by term on a pinned target (``fuzz.cheap``: a convolution's unrolled
taps count one each, as the hand formulas do), is at most 1.25x the expert's count and within the
cheap-gradient bound ``4 * forward + inputs + head``; its values match float64 central differences.  An
expert's count: a pass over ``n`` elements is ``n``; recomputing what the forward computed counts; a zero
fill has no loop body.  Max-like reductions count as the work families' max pool does (the winner and its
tie count, the scatter of the head, the routing of ties over each window's points)."""

from __future__ import annotations

import numpy as np
import pytest
from holdouts import F, Op, assert_within_the_bar
from holdouts import p as _p
from holdouts import r as _r

import tensorad as ta


def _pairs(size, out, window, stride, pad, dilation=1):
    """#{(o, k): 0 <= o*stride + k*dilation - pad < size}."""
    return sum(1 for o in range(out) for k in range(window) if 0 <= o * stride + k * dilation - pad < size)


def transposed_conv1d():
    b, c, o, n, k = 2, 3, 4, 7, 3
    X, W = _p((b, c, n), "X"), _p((c, o, k), "W")
    rc, rk = _r(c, "rc"), _r(k, "rk")
    Y = ta.compute((b, o, 2 * (n - 1) + k), lambda p, f, t: ta.sum(ta.if_then_else(
        ((t - rk) % 2 == 0) & (t - rk >= 0) & (t - rk < 2 * n), X[p, rc, (t - rk) // 2] * W[rc, f, rk],
        0.0), [rc, rk]), name="Y")
    # stride 2: each (input point, tap) feeds one output; dX, dW one multiply-add per pair each
    return Op(Y, [X, W], "dX, dW: 2*B*C*O*N*K", 2 * b * c * o * n * k)


def transposed_conv2d_stride2_pad1():
    c, f, h, w, k, s, p = 2, 3, 4, 3, 3, 2, 1
    X, W = _p((1, c, h, w), "X"), _p((c, f, k, k), "W")
    oh, ow = (h - 1) * s - 2 * p + k, (w - 1) * s - 2 * p + k
    rc, ry, rx = _r(c, "rc"), _r(k, "ry"), _r(k, "rx")

    def hit(o, r, size):
        return ((o + p - r) % s == 0) & (o + p - r >= 0) & (o + p - r < s * size)

    Y = ta.compute((1, f, oh, ow), lambda b, q, i, j: ta.sum(ta.if_then_else(
        hit(i, ry, h) & hit(j, rx, w), X[b, rc, (i + p - ry) // s, (j + p - rx) // s] * W[rc, q, ry, rx],
        0.0), [rc, ry, rx]), name="Y")
    ph = sum(1 for y in range(h) for r in range(k) if 0 <= y * s + r - p < oh)
    pw = sum(1 for x in range(w) for r in range(k) if 0 <= x * s + r - p < ow)
    return Op(Y, [X, W], "dX, dW over the (input, tap) pairs landing in Y: 2*C*F*Ph*Pw", 2 * c * f * ph * pw)


def dilated_padded_conv2d():
    c, h, w, f, k, d, p = 2, 7, 6, 3, 3, 2, 2
    X, W = _p((1, c, h, w), "X"), _p((f, c, k, k), "W")
    rc, ry, rx = _r(c, "rc"), _r(k, "ry"), _r(k, "rx")
    Y = ta.compute((1, f, h, w), lambda b, o, i, j: ta.sum(ta.if_then_else(
        (i + d * ry - p >= 0) & (i + d * ry - p < h) & (j + d * rx - p >= 0) & (j + d * rx - p < w),
        X[b, rc, i + d * ry - p, j + d * rx - p], 0.0) * W[o, rc, ry, rx], [rc, ry, rx]), name="Y")
    ph, pw = _pairs(h, h, k, 1, p, d), _pairs(w, w, k, 1, p, d)
    return Op(Y, [X, W], "dX, dW over the valid (output, tap) pairs: 2*F*C*Ph*Pw", 2 * f * c * ph * pw)


def im2col():
    b, c, h, w, k = 2, 2, 5, 6, 3
    X = _p((b, c, h, w), "X")
    oh, ow = h - k + 1, w - k + 1
    U = ta.compute((b, c * k * k, oh * ow),
                   lambda p, r, q: X[p, r // (k * k), q // ow + r // k % k, q % ow + r % k], name="U")
    return Op(U, [X], "dX: one add per element of U", b * c * k * k * oh * ow)


def circular_conv1d():
    b, n, k = 2, 10, 3
    X, W = _p((b, n), "X"), _p((k,), "W")
    rk = _r(k, "rk")
    Y = ta.compute((b, n), lambda p, t: ta.sum(X[p, (t - rk + n) % n] * W[rk], rk), name="Y")
    return Op(Y, [X, W], "dX, dW: 2*B*N*K", 2 * b * n * k)


def segment_sum_by_ids():
    n, d, s = 8, 3, 4
    X, seg = _p((n, d), "X"), _p((n,), "seg", "int32")
    k = _r(n, "k")
    Y = ta.compute((s, d), lambda q, j: ta.sum(X[k, j], k, where=seg[k] == q), name="Y")
    return Op(Y, [X], "dX[k] = H[seg[k]]: N*D", n * d, {seg: (0, s)})


def segment_max_by_ids():
    n, d, s = 8, 3, 4
    X, seg = _p((n, d), "X"), _p((n,), "seg", "int32")
    k = _r(n, "k")
    Y = ta.compute((s, d), lambda q, j: ta.max(X[k, j], k, where=seg[k] == q), name="Y")
    # each term combined into its segment's winner and tie count, the head scattered to the winners, the ties
    return Op(Y, [X], "winners with tie counts N*D, scatter S*D, routing N*D", 2 * n * d + s * d,
              {seg: (0, s)})


def one_hot_pick():
    n, c = 5, 7
    X, t = _p((n, c), "X"), _p((n,), "t", "int32")
    q = _r(c, "q")
    Y = ta.compute((n,), lambda i: ta.sum(ta.select(q == t[i], X[i, q], 0.0), q), name="Y")
    return Op(Y, [X], "dX = 0; dX[i, t[i]] = H[i]: N", n, {t: (0, c)})


def codebook_by_argmin():
    n, m, d = 5, 4, 3
    X, E = _p((n, d), "X"), _p((m, d), "E")
    r, c = _r(d, "r"), _r(m, "c")
    D = ta.compute((n, m), lambda i, q: ta.sum((X[i, r] - E[q, r]) ** 2, r), name="D")
    argmin = ta.comm_reducer(
        lambda x, y: (ta.select(x[0] <= y[0], x[0], y[0]), ta.select(x[0] <= y[0], x[1], y[1])),
        lambda a, b: (ta.max_value(a), ta.const(-1, b)), name="argmin")
    _, best = ta.compute((n,), lambda i: argmin((D[i, c], c), c), name="best")
    Y = ta.compute((n, d), lambda i, j: E[best[i], j], name="Y")
    return Op(Y, [E], "distances N*M*D, argmin N*M, scatter of H N*D", n * m * d + n * m + n * d)


def value_at_argmax():
    n, m = 5, 6
    S, V = _p((n, m), "S"), _p((n, m), "V")
    argmax = ta.comm_reducer(
        lambda x, y: (ta.select(x[0] >= y[0], x[0], y[0]), ta.select(x[0] >= y[0], x[1], y[1])),
        lambda a, b: (ta.min_value(a), ta.const(-1, b)), name="argmax")
    k = _r(m, "k")
    _, at = ta.compute((n,), lambda i: argmax((S[i, k], k), k), name="at")
    Y = ta.compute((n,), lambda i: V[i, at[i]] * 2.0, name="Y")
    return Op(Y, [V], "argmax N*M, dV = 0 and one store per row N", n * m + n)


def cumsum_middle_axis():
    b, t, d = 2, 8, 5
    X = _p((b, t, d), "X")
    k = _r(t, "k")
    Y = ta.compute((b, t, d), lambda p, i, j: ta.sum(X[p, k, j], k, where=k <= i), name="Y")
    return Op(Y, [X], "dX: the suffix scan of H along T: B*T*D", b * t * d)


def logsumexp_two_axes():
    b, n, m = 3, 4, 5
    X = _p((b, n, m), "X")
    i1, j1, i2, j2 = _r(n, "i1"), _r(m, "j1"), _r(n, "i2"), _r(m, "j2")
    M = ta.compute((b,), lambda p: ta.max(X[p, i1, j1], [i1, j1]), name="M")
    S = ta.compute((b,), lambda p: ta.sum(ta.exp(X[p, i2, j2] - M[p]), [i2, j2]), name="S")
    Y = ta.compute((b,), lambda p: ta.log(S[p]) + M[p], name="Y")
    return Op(Y, [X], "M, S, dX = H exp(X - M) / S: 3*B*N*M", 3 * b * n * m)


def l1_distances():
    n, m, d = 5, 4, 3
    X, Z = _p((n, d), "X"), _p((m, d), "Z")
    k = _r(d, "k")
    D = ta.compute((n, m), lambda i, j: ta.sum(ta.abs(X[i, k] - Z[j, k]), k), name="D")
    return Op(D, [X, Z], "dX = sum_j H sign(X - Z), dZ alike: 2*N*M*D", 2 * n * m * d)


def soft_argmax():
    b, n = 3, 7
    X = _p((b, n), "X")
    k1, k2, k3 = _r(n, "k1"), _r(n, "k2"), _r(n, "k3")
    m = ta.compute((b,), lambda p: ta.max(X[p, k1], k1), name="m")
    z = ta.compute((b,), lambda p: ta.sum(ta.exp(X[p, k2] - m[p]), k2), name="z")
    Y = ta.compute((b,), lambda p: ta.sum(ta.exp(X[p, k3] - m[p]) * ta.cast(F, k3), k3) / z[p], name="Y")
    return Op(Y, [X], "m, z, the expected index y, dX = H P (k - y): 4*B*N", 4 * b * n)


def attention_relative_bias():
    n, d = 5, 3
    Q, K, V, rb = _p((n, d), "Q"), _p((n, d), "K"), _p((n, d), "V"), _p((2 * n - 1,), "rb")
    r, s1, s2, s3 = _r(d, "r"), _r(n, "s1"), _r(n, "s2"), _r(n, "s3")
    S = ta.compute((n, n), lambda i, j: ta.sum(Q[i, r] * K[j, r], r) + rb[i - j + n - 1], name="S")
    mx = ta.compute((n,), lambda i: ta.max(S[i, s1], s1), name="mx")
    E = ta.compute((n, n), lambda i, j: ta.exp(S[i, j] - mx[i]), name="E")
    den = ta.compute((n,), lambda i: ta.sum(E[i, s2], s2), name="den")
    Out = ta.compute((n, d), lambda i, e: ta.sum(E[i, s3] * V[s3, e], s3) / den[i], name="O")
    t = n * n
    # attention on the square (S, max, sum, P, dV, dP, r, dS, dQ, dK), then drb: sums of dS's diagonals
    return Op(Out, [Q, K, V, rb], "attention 5*T*D + 5*T, drb T", 5 * t * d + 6 * t)


def max_pool_ceil_mode():
    c, h, w = 2, 7, 5
    X = _p((c, h, w), "X")
    oh, ow = (h + 1) // 2, (w + 1) // 2
    ry, rx = _r(2, "ry"), _r(2, "rx")
    Y = ta.compute((c, oh, ow), lambda q, i, j: ta.max(X[q, 2 * i + ry, 2 * j + rx], [ry, rx],
                                                       where=(2 * i + ry < h) & (2 * j + rx < w)), name="Y")
    pairs, windows = c * h * w, c * oh * ow  # (2x2 windows of stride 2 hold each point once)
    return Op(Y, [X], "max and ties 2*pairs, scatter windows, routing pairs", 3 * pairs + windows)


def lower_triangular_product():
    n, p = 6, 4
    L, B = _p((n, n), "L"), _p((n, p), "B")
    j = _r(n, "j")
    Y = ta.compute((n, p), lambda i, q: ta.sum(L[i, j] * B[j, q], j, where=j <= i), name="Y")
    t = n * (n + 1) // 2
    return Op(Y, [L, B], "dL = H B^T, dB = L^T H on the triangle: 2*T*P", 2 * t * p)


def strided_concat():
    X, Z = _p((4, 9), "X"), _p((4, 7), "Z")
    a, b = 5, 2  # X[:, ::2] and Z[:, 1::3]
    Y = ta.compute((4, a + b), lambda i, j: ta.if_then_else(j < a, X[i, 2 * j], Z[i, 3 * (j - a) + 1]),
                   name="Y")
    return Op(Y, [X, Z], "dX, dZ: one store per head element", 4 * (a + b))


def reflect_pad():
    n, m, p = 6, 5, 2
    X = _p((3, n, m), "X")

    def reflect(i, size):
        return ta.if_then_else(i < 0, -i, ta.if_then_else(i >= size, 2 * (size - 1) - i, i))

    Y = ta.compute((3, n + 2 * p, m + 2 * p), lambda b, i, j: X[b, reflect(i - p, n), reflect(j - p, m)],
                   name="Y")
    return Op(Y, [X], "dX: one add per element of Y", 3 * (n + 2 * p) * (m + 2 * p))


def edge_pad():
    n, m, p = 6, 5, 2
    X = _p((3, n, m), "X")
    def edge(i, size):
        return ta.minimum(ta.maximum(i, 0), size - 1)

    Y = ta.compute((3, n + 2 * p, m + 2 * p), lambda b, i, j: X[b, edge(i - p, n), edge(j - p, m)], name="Y")
    return Op(Y, [X], "dX: one add per element of Y", 3 * (n + 2 * p) * (m + 2 * p))


def chain_of_three():
    i_, j_, k_, l_ = 4, 5, 6, 3
    A, B, C = _p((i_, j_), "A"), _p((j_, k_), "B"), _p((k_, l_), "C")
    j, k = _r(j_, "j"), _r(k_, "k")
    Y = ta.compute((i_, l_), lambda i, q: ta.sum(A[i, j] * B[j, k] * C[k, q], [j, k]), name="Y")
    # U = A^T H (IJL), BC (JKL), dA = H (BC)^T (IJL), dB = U C^T (JKL), dC = B^T U (JKL)
    return Op(Y, [A, B, C], "U, BC, dA, dB, dC: 2*I*J*L + 3*J*K*L", 2 * i_ * j_ * l_ + 3 * j_ * k_ * l_)


def instance_norm():
    n, c, hw = 2, 3, 10
    X = _p((n, c, hw), "X")
    k1, k2 = _r(hw, "k1"), _r(hw, "k2")
    mu = ta.compute((n, c), lambda a, b: ta.sum(X[a, b, k1], k1) / float(hw), name="mu")
    var = ta.compute((n, c), lambda a, b: ta.sum((X[a, b, k2] - mu[a, b]) ** 2, k2) / float(hw), name="var")
    Y = ta.compute((n, c, hw), lambda a, b, q: (X[a, b, q] - mu[a, b]) / ta.sqrt(var[a, b] + 1e-5), name="Y")
    e = n * c * hw
    return Op(Y, [X], "mean, var, sum H, sum H xhat, dX: 5*E + N*C", 5 * e + n * c)


def covariance():
    b, d = 6, 4
    X = _p((b, d), "X")
    k, k2 = _r(b, "k"), _r(b, "k2")
    mu = ta.compute((d,), lambda i: ta.sum(X[k, i], k) / float(b), name="mu")
    C = ta.compute((d, d), lambda i, j: ta.sum((X[k2, i] - mu[i]) * (X[k2, j] - mu[j]), k2) / float(b),
                   name="C")
    # the mean's adjoint vanishes (centred rows sum to zero); (H + H^T) summed once
    return Op(C, [X], "mu, H + H^T, dX = (X - mu)(H + H^T)/B: B*D + D*D + B*D*D", b * d + d * d + b * d * d)


def multiclass_hinge():
    n, c = 5, 6
    X, t = _p((n, c), "X"), _p((n,), "t", "int32")
    i, q = _r(n, "i"), _r(c, "q")
    L = ta.compute((), lambda: ta.sum(ta.maximum(1.0 + X[i, q] - X[i, t[i]], 0.0), [i, q], where=q != t[i]),
                   name="L")
    return Op(L, [X], "margins and their count per row, dX: 2*N*C", 2 * n * c, {t: (0, c)})


def kl_to_softmax():
    n, c = 4, 6
    Pr, Z = _p((n, c), "Pr"), _p((n, c), "Z")
    q1, q2, i, q = _r(c, "q1"), _r(c, "q2"), _r(n, "i"), _r(c, "q")
    m = ta.compute((n,), lambda a: ta.max(Z[a, q1], q1), name="m")
    lse = ta.compute((n,), lambda a: ta.log(ta.sum(ta.exp(Z[a, q2] - m[a]), q2)) + m[a], name="lse")
    L = ta.compute((), lambda: ta.sum(Pr[i, q] * (ta.log(Pr[i, q]) - (Z[i, q] - lse[i])), [i, q]), name="L")
    return Op(L, [Pr, Z], "m, se, sum P, dZ = H (softmax sum P - P), dP: 5*N*C", 5 * n * c)


def label_smoothed_cross_entropy():
    n, c, eps = 4, 6, 0.1
    Z, t = _p((n, c), "Z"), _p((n,), "t", "int32")
    q1, q2, i, q = _r(c, "q1"), _r(c, "q2"), _r(n, "i"), _r(c, "q")
    m = ta.compute((n,), lambda a: ta.max(Z[a, q1], q1), name="m")
    lse = ta.compute((n,), lambda a: ta.log(ta.sum(ta.exp(Z[a, q2] - m[a]), q2)) + m[a], name="lse")
    L = ta.compute((), lambda: ta.sum((lse[i] - Z[i, q]) * ta.select(q == t[i], 1.0 - eps + eps / c, eps / c),
                                      [i, q]), name="L")
    # the targets' weights sum to one per row: no pass sums them
    return Op(L, [Z], "m, se, dZ = H (softmax - target): 3*N*C", 3 * n * c, {t: (0, c)})


def contrastive_cross_entropy():
    n, d = 5, 3
    X, Z = _p((n, d), "X"), _p((n, d), "Z")
    r, q1, q2, i = _r(d, "r"), _r(n, "q1"), _r(n, "q2"), _r(n, "i")
    S = ta.compute((n, n), lambda a, b: ta.sum(X[a, r] * Z[b, r], r), name="S")
    m = ta.compute((n,), lambda a: ta.max(S[a, q1], q1), name="m")
    lse = ta.compute((n,), lambda a: ta.log(ta.sum(ta.exp(S[a, q2] - m[a]), q2)) + m[a], name="lse")
    L = ta.compute((), lambda: ta.sum(lse[i] - S[i, i], i), name="L")
    t = n * n
    return Op(L, [X, Z], "S, m, se, dS = softmax - I, dX = dS Z, dZ = dS^T X: 3*T*D + 3*T", 3 * t * d + 3 * t)


def mean_over_lengths():
    b, t, d = 3, 6, 4
    X, n = _p((b, t, d), "X"), _p((b,), "n", "int32")
    k = _r(t, "k")
    Y = ta.compute((b, d), lambda p, j: ta.sum(X[p, k, j], k, where=k < n[p]) / ta.cast(F, n[p]), name="Y")
    return Op(Y, [X], "dX = H / n inside each length, written once: B*T*D", b * t * d, {n: (1, t + 1)})


def sliding_max_padded_with_the_identity():
    b, n, k = 4, 9, 3
    X = _p((b, n), "X")
    rk = _r(k, "rk")
    Y = ta.compute((b, n), lambda p, i: ta.max(ta.if_then_else(
        (i + rk - 1 >= 0) & (i + rk - 1 < n), X[p, i + rk - 1], float("-inf")), rk), name="Y")
    pairs, windows = b * _pairs(n, n, k, 1, 1), b * n
    return Op(Y, [X], "max and ties 2*pairs, scatter windows, routing pairs", 3 * pairs + windows)


def take_along_axis():
    b, n, m = 3, 7, 5
    X, idx = _p((b, n), "X"), _p((b, m), "idx", "int32")
    Y = ta.compute((b, m), lambda p, i: X[p, idx[p, i]] * 2.0, name="Y")
    return Op(Y, [X], "dX = 0; dX[p, idx[p, i]] += 2 H[p, i]: B*M", b * m, {idx: (0, n)})


def strided_permutation():
    b, n = 3, 9
    X = _p((b, n), "X")
    Y = ta.compute((b, n), lambda p, i: X[p, (2 * i + 1) % n], name="Y")
    return Op(Y, [X], "dX = H at the inverse permutation: B*N", b * n)


def roll_by_data():
    b, n = 3, 8
    X, s = _p((b, n), "X"), _p((b,), "s", "int32")
    Y = ta.compute((b, n), lambda p, i: X[p, (i + s[p]) % n], name="Y")
    return Op(Y, [X], "dX[p, j] = H[p, (j - s[p]) mod N]: B*N", b * n, {s: (0, n)})


def reverse_by_length():
    b, t, d = 3, 6, 4
    X, n = _p((b, t, d), "X"), _p((b,), "n", "int32")
    Y = ta.compute((b, t, d), lambda p, i, e: ta.if_then_else(i < n[p], X[p, n[p] - 1 - i, e], X[p, i, e]),
                   name="Y")
    return Op(Y, [X], "dX = H reversed inside each length, as it is past it: B*T*D", b * t * d,
              {n: (1, t + 1)})


def space_to_depth():
    c, h, w, r = 2, 4, 6, 2
    X = _p((1, c, h, w), "X")
    Y = ta.compute((1, c * r * r, h // r, w // r),
                   lambda b, q, i, j: X[b, q // (r * r), i * r + q // r % r, j * r + q % r], name="Y")
    return Op(Y, [X], "dX: one store per element: C*H*W", c * h * w)


def max_unpool():
    c, h, w = 2, 3, 4
    X, at = _p((c, h, w), "X"), _p((c, h, w), "at", "int32")  # (the window point each value came from)
    Y = ta.compute((c, 2 * h, 2 * w), lambda q, i, j: ta.select(
        at[q, i // 2, j // 2] == (i % 2) * 2 + j % 2, X[q, i // 2, j // 2], 0.0), name="Y")
    return Op(Y, [X], "dX = H read at each index's point: C*H*W", c * h * w, {at: (0, 4)})


def masked_mean():
    b, n = 4, 7
    X, mask = _p((b, n), "X"), _p((b, n), "mask", "int32")
    k1, k2 = _r(n, "k1"), _r(n, "k2")
    count = ta.compute((b,), lambda p: ta.sum(ta.cast(F, mask[p, k1]), k1), name="count")
    Y = ta.compute((b,), lambda p: ta.sum(X[p, k2], k2, where=mask[p, k2] != 0) / ta.maximum(count[p], 1.0),
                   name="Y")
    return Op(Y, [X], "count, dX = H / count where the mask holds: 2*B*N", 2 * b * n, {mask: (0, 2)})


def segment_mean_by_ids():
    n, d, s = 64, 3, 8
    X, seg = _p((n, d), "X"), _p((n,), "seg", "int32")
    k1, k2 = _r(n, "k1"), _r(n, "k2")
    count = ta.compute((s,), lambda q: ta.sum(ta.select(seg[k1] == q, 1.0, 0.0), k1), name="count")
    Y = ta.compute((s, d), lambda q, j: ta.sum(X[k2, j], k2, where=seg[k2] == q) / ta.maximum(count[q], 1.0),
                   name="Y")
    return Op(Y, [X], "counts scattered N, dX = H[seg[k]] / count: N + N*D", n + n * d, {seg: (0, s)})


def top1_routing():
    t, e, d, o = 4, 3, 5, 2
    X, G, W = _p((t, d), "X"), _p((t, e), "G"), _p((e, d, o), "W")
    k1, k2, r = _r(e, "k1"), _r(e, "k2"), _r(d, "r")
    argmax = ta.comm_reducer(
        lambda x, y: (ta.select(x[0] >= y[0], x[0], y[0]), ta.select(x[0] >= y[0], x[1], y[1])),
        lambda a, b: (ta.min_value(a), ta.const(-1, b)), name="argmax")
    top, best = ta.compute((t,), lambda i: argmax((G[i, k1], k1), k1), name="best")
    z = ta.compute((t,), lambda i: ta.sum(ta.exp(G[i, k2] - top[i]), k2), name="z")
    # the top expert's output scaled by its gate, softmax(G)[best] = 1 / z
    Y = ta.compute((t, o), lambda i, q: ta.sum(X[i, r] * W[best[i], r, q], r) / z[i], name="Y")
    return Op(Y, [X, G, W], "argmax, z, dG: 3*T*E; the expert's output again, dX, dW: 3*T*D*O; H.Y: T*O",
              3 * t * e + 3 * t * d * o + t * o)


def banded_product():
    n, m, w = 7, 3, 1
    A, B = _p((n, n), "A"), _p((n, m), "B")
    k = _r(n, "k")
    Y = ta.compute((n, m), lambda i, q: ta.sum(A[i, k] * B[k, q], k, where=(k - i <= w) & (i - k <= w)),
                   name="Y")
    band = sum(1 for i in range(n) for c in range(n) if abs(i - c) <= w)
    return Op(Y, [A, B], "dA = H B^T, dB = A^T H on the band: 2*Band*M", 2 * band * m)


def causal_outer_logsumexp():
    n = 6
    Q, K = _p((n,), "Q"), _p((n,), "K")
    j1, j2 = _r(n, "j1"), _r(n, "j2")
    mx = ta.compute((n,), lambda i: ta.max(Q[i] * K[j1], j1, where=j1 <= i), name="mx")
    Y = ta.compute((n,), lambda i: ta.log(ta.sum(ta.exp(Q[i] * K[j2] - mx[i]), j2, where=j2 <= i)) + mx[i],
                   name="Y")
    t = n * (n + 1) // 2
    return Op(Y, [Q, K], "max, sum, dQ = sum H P K, dK = sum H P Q on the triangle: 4*T", 4 * t)


def channel_shuffle():
    b, g, c, hw = 2, 3, 4, 5
    X = _p((b, g * c, hw), "X")
    Y = ta.compute((b, g * c, hw), lambda p, q, i: X[p, (q % g) * c + q // g, i], name="Y")
    return Op(Y, [X], "dX: one store per element: B*G*C*HW", b * g * c * hw)


def batched_trace():
    b, n = 3, 5
    X = _p((b, n, n), "X")
    k = _r(n, "k")
    Y = ta.compute((b,), lambda p: ta.sum(X[p, k, k], k), name="Y")
    return Op(Y, [X], "dX = H on the diagonals (0 elsewhere): B*N", b * n)


def kronecker():
    A, B = _p((2, 3), "A"), _p((4, 2), "B")
    Y = ta.compute((8, 6), lambda i, j: A[i // 4, j // 2] * B[i % 4, j % 2], name="Y")
    return Op(Y, [A, B], "dA = sum H B, dB = sum H A: one multiply-add per element of Y each: 2*48", 2 * 48)


def temporal_shift():
    b, t, c = 2, 5, 6
    X = _p((b, t, c), "X")  # (channels 0-1 from the step before, 2-3 from the step after, zero-padded)
    Y = ta.compute((b, t, c), lambda p, i, q: ta.if_then_else(
        q < 2, ta.if_then_else(i >= 1, X[p, i - 1, q], 0.0),
        ta.if_then_else(q < 4, ta.if_then_else(i < t - 1, X[p, i + 1, q], 0.0), X[p, i, q])), name="Y")
    return Op(Y, [X], "dX: one store per element a head reaches: B*(T*C - 4)", b * (t * c - 4))


def local_response_norm():
    b, c, hw, s = 2, 6, 3, 2
    X = _p((b, c, hw), "X")
    r = _r(2 * s + 1, "r")
    sq = ta.compute((b, c, hw), lambda p, q, i: ta.sum(ta.if_then_else(
        (q + r - s >= 0) & (q + r - s < c), X[p, q + r - s, i] * X[p, q + r - s, i], 0.0), r), name="sq")
    Y = ta.compute((b, c, hw), lambda p, q, i: X[p, q, i] / (1.0 + 0.1 * sq[p, q, i]), name="Y")
    pairs, e = b * hw * _pairs(c, c, 2 * s + 1, 1, s), b * c * hw
    return Op(Y, [X], "window sums again, their head, dX over the windows and direct: 2*Pairs + 2*E",
              2 * pairs + 2 * e)


HOLDOUT = {f.__name__: f for f in (
    transposed_conv1d, transposed_conv2d_stride2_pad1, dilated_padded_conv2d, im2col, circular_conv1d,
    segment_sum_by_ids, segment_max_by_ids, one_hot_pick, codebook_by_argmin, value_at_argmax,
    cumsum_middle_axis,
    logsumexp_two_axes, l1_distances, soft_argmax, attention_relative_bias, max_pool_ceil_mode,
    lower_triangular_product, strided_concat, reflect_pad, edge_pad, chain_of_three, instance_norm,
    covariance, multiclass_hinge, kl_to_softmax, label_smoothed_cross_entropy, contrastive_cross_entropy,
    mean_over_lengths, sliding_max_padded_with_the_identity, take_along_axis, strided_permutation,
    roll_by_data, reverse_by_length, space_to_depth, max_unpool, masked_mean, segment_mean_by_ids,
    top1_routing, banded_product, causal_outer_logsumexp, channel_shuffle, batched_trace, kronecker,
    temporal_shift, local_response_norm)}


@pytest.mark.slow  # (the work bar: make test; make test-fast checks the values)
@pytest.mark.parametrize("name", sorted(HOLDOUT))
def test_holdout_operator_gradient_is_within_the_bar_and_the_cheap_gradient_bound(name):
    op = HOLDOUT[name]()
    assert_within_the_bar(name, op)


@pytest.mark.parametrize("name", sorted(HOLDOUT))
def test_holdout_operator_gradient_matches_central_differences(name):
    op = HOLDOUT[name]()
    rng = np.random.default_rng(0)
    feed = {t: rng.integers(lo, hi, t.shape).astype(np.int32) for t, (lo, hi) in op.ints.items()}
    feed |= {t: (lambda p: p / p.sum(-1, keepdims=True))(rng.uniform(0.1, 1.0, t.shape))
             for t in op.inputs if t.name == "Pr"}  # (KL's P: a distribution per row)
    assert ta.gradcheck(op.output, op.inputs, feed=feed)
