"""A third holdout: operators of PyTorch and NumPy written with ``ta.compute`` and reductions the way a user
ports them, none of them tuned for: ``index_add`` onto a base, embedding bags by mean and by max, a strided
dilated ``unfold``, a cumulative product along a middle axis, a reversed cumulative sum, ``logcumsumexp``, a
shift by a data-given signed offset, a masked softmax, a sort-free top-1 that keeps the row's maximum, a
bilinear upsample with fixed weights, weight normalization, windowed local attention, PReLU, binary
cross-entropy with logits, a soft Dice loss, adaptive average pooling, a nearest resize by a fractional
scale, ``diag_embed``, a bilinear form, a global max pool, squeeze-and-excitation, ``repeat_interleave``, a
gather at data-given 2-D points, a style (Gram) loss, a cross product, ``tril``, a reversed cumulative
minimum, min-max normalization and a softmin with a temperature.

Each gradient's work, counted term by term on a pinned target (``fuzz.cheap``), is at most 1.25x the work of
the expert's backward written beside the operator, and within the cheap-gradient bound; its values match
float64 central differences, and the compiled gradient matches ``ta.evaluate``'s.  An expert's count: a pass
over ``n`` elements is ``n``, recomputing what the forward computed counts, a zero fill has no loop body, and
a max counts as the work families' max pool does (the winner and its tie count, the scatter of the head, the
routing of ties over each window's points); a max finds its winner with the tie count in one pass.
A separable operator's expert runs it one axis at a time."""

from __future__ import annotations

import numpy as np
import pytest
from holdouts import F, Op, assert_within_the_bar
from holdouts import p as _p
from holdouts import r as _r

import tensorad as ta
from tensorad.ir import placeholders


def index_add():
    q_, n, d = 4, 7, 3
    A, X, idx = _p((q_, d), "A"), _p((n, d), "X"), _p((n,), "idx", "int32")
    k = _r(n, "k")
    S = ta.compute((q_, d), lambda q, j: ta.sum(X[k, j], k, where=idx[k] == q), name="S")
    Y = ta.compute((q_, d), lambda q, j: A[q, j] + 2.0 * S[q, j], name="Y")  # A.index_add(0, idx, X, alpha=2)
    return Op(Y, [A, X], "dA = H: Q*D; dX[k] = 2 H[idx[k]]: N*D", q_ * d + n * d, {idx: (0, q_)})


def embedding_bag_mean():
    v, d, b, t = 9, 4, 3, 5
    E, idx = _p((v, d), "E"), _p((b, t), "idx", "int32")
    r = _r(t, "r")
    Y = ta.compute((b, d), lambda p, j: ta.sum(E[idx[p, r], j], r) / float(t), name="Y")
    return Op(Y, [E], "dE = 0; dE[idx[p, r]] += H[p] / T: B*T*D", b * t * d, {idx: (0, v)})


def embedding_bag_max():
    v, d, b, t = 9, 4, 3, 5
    E, idx = _p((v, d), "E"), _p((b, t), "idx", "int32")
    r = _r(t, "r")
    Y = ta.compute((b, d), lambda p, j: ta.max(E[idx[p, r], j], r), name="Y")
    pairs, windows = b * t * d, b * d
    return Op(Y, [E], "max with its tie count pairs, scatter windows, routing pairs", 2 * pairs + windows,
              {idx: (0, v)})


def unfold_strided_dilated():
    b, c, n, k, s, dil = 2, 3, 13, 3, 2, 2
    X = _p((b, c, n), "X")
    length = (n - dil * (k - 1) - 1) // s + 1
    U = ta.compute((b, c * k, length), lambda p, q, o: X[p, q // k, o * s + (q % k) * dil], name="U")
    return Op(U, [X], "dX: one add per element of U", b * c * k * length)


def cumprod_middle_axis():
    b, t, d = 2, 7, 3
    X = _p((b, t, d), "X")
    k = _r(t, "k")
    Y = ta.compute((b, t, d), lambda p, i, j: ta.prod(X[p, k, j], k, where=k <= i), name="Y")
    # exclusive products by a scan, the recurrence s[k] = H[k] + X[k + 1] s[k + 1], dX = P s: safe at 0
    return Op(Y, [X], "exclusive scan, reverse recurrence, dX: 3*B*T*D", 3 * b * t * d, positive=(X,))


def reversed_cumsum():
    b, n = 3, 9
    X = _p((b, n), "X")
    k = _r(n, "k")
    Y = ta.compute((b, n), lambda p, i: ta.sum(X[p, k], k, where=k >= i), name="Y")  # flip(cumsum(flip(X)))
    return Op(Y, [X], "dX: the prefix scan of H: B*N", b * n)


def logcumsumexp():
    b, n = 3, 8
    X = _p((b, n), "X")
    k = _r(n, "k")
    Y = ta.compute((b, n), lambda p, i: ta.log(ta.sum(ta.exp(X[p, k]), k, where=k <= i)), name="Y")
    # S by a prefix scan, the suffix scan of H / S, dX = exp(X) times it
    return Op(Y, [X], "scan S, suffix scan of H/S, dX: 3*B*N", 3 * b * n)


def shift_by_signed_offset():
    b, n = 3, 8
    X, off = _p((b, n), "X"), _p((b,), "off", "int32")
    Y = ta.compute((b, n), lambda p, i: ta.if_then_else((i - off[p] >= 0) & (i - off[p] < n),
                                                        X[p, i - off[p]], 0.0), name="Y")
    return Op(Y, [X], "dX[p, j] = H[p, j + off[p]] where in range: B*N", b * n, {off: (-3, 4)})


def masked_softmax():
    n, c = 4, 7
    X, mask = _p((n, c), "X"), _p((n, c), "mask", "int32")
    q1, q2 = _r(c, "q1"), _r(c, "q2")
    m = ta.compute((n,), lambda i: ta.max(ta.if_then_else(mask[i, q1] != 0, X[i, q1], float("-inf")), q1),
                   name="m")
    s = ta.compute((n,), lambda i: ta.sum(ta.exp(X[i, q2] - m[i]), q2, where=mask[i, q2] != 0), name="s")
    Y = ta.compute((n, c), lambda i, j: ta.if_then_else(mask[i, j] != 0, ta.exp(X[i, j] - m[i]) / s[i], 0.0),
                   name="Y")
    return Op(Y, [X], "m, s, r = sum H P, dX = P (H - r): 4*N*C", 4 * n * c, {mask: (0, 2)})


def keep_row_max():
    n, c = 4, 7
    X = _p((n, c), "X")
    q = _r(c, "q")
    M = ta.compute((n,), lambda i: ta.max(X[i, q], q), name="M")
    Y = ta.compute((n, c), lambda i, j: ta.select(X[i, j] >= M[i], X[i, j], 0.0), name="Y")
    return Op(Y, [X], "M, dX = H where X is the maximum: 2*N*C", 2 * n * c)


def bilinear_upsample2x():
    c, h, w = 2, 4, 5
    X = _p((c, h, w), "X")
    ty, tx = _r(2, "ty"), _r(2, "tx")

    def src(o, tap, size):  # (align_corners=False: the two rows at (o + 0.5) / 2 - 0.5, clamped)
        return ta.minimum(ta.maximum(o // 2 + (o % 2) + tap - 1, 0), size - 1)

    def weight(o, tap):  # 0.25 on the far row, 0.75 on the near one
        return ta.select((o % 2 == 0) == (tap == 0), 0.25, 0.75)

    Y = ta.compute((c, 2 * h, 2 * w), lambda q, i, j: ta.sum(
        weight(i, ty) * weight(j, tx) * X[q, src(i, ty, h), src(j, tx, w)], [ty, tx]), name="Y")
    # separable: the columns' two taps, then the rows' two taps
    return Op(Y, [X], "dX = Uy^T (H Ux): 2*C*OH*OW + 2*C*OH*W", 2 * c * 4 * h * w + 2 * c * 2 * h * w)


def weight_norm():
    o, i_ = 5, 6
    V, g = _p((o, i_), "V"), _p((o,), "g")
    k = _r(i_, "k")
    nrm = ta.compute((o,), lambda a: ta.sqrt(ta.sum(V[a, k] * V[a, k], k)), name="nrm")
    Wt = ta.compute((o, i_), lambda a, b: g[a] * V[a, b] / nrm[a], name="W")
    return Op(Wt, [V, g], "norm, s = sum H V (dg from it), dV: 3*O*I", 3 * o * i_)


def local_attention_window():
    n, d, w = 8, 3, 2
    Q, K, V = _p((n, d), "Q"), _p((n, d), "K"), _p((n, d), "V")
    r, s1, s2, s3 = _r(d, "r"), _r(n, "s1"), _r(n, "s2"), _r(n, "s3")

    def near(i, j):
        return (j - i <= w) & (i - j <= w)

    S = ta.compute((n, n), lambda i, j: ta.sum(Q[i, r] * K[j, r], r), name="S")
    mx = ta.compute((n,), lambda i: ta.max(S[i, s1], s1, where=near(i, s1)), name="mx")
    den = ta.compute((n,), lambda i: ta.sum(ta.exp(S[i, s2] - mx[i]), s2, where=near(i, s2)), name="den")
    Out = ta.compute((n, d), lambda i, e: ta.sum(ta.exp(S[i, s3] - mx[i]) * V[s3, e], s3, where=near(i, s3))
                     / den[i], name="O")
    t = sum(1 for i in range(n) for j in range(n) if abs(i - j) <= w)
    return Op(Out, [Q, K, V], "attention on the band: 5*T*D + 5*T", 5 * t * d + 5 * t)


def prelu():
    b, c, hw = 2, 3, 5
    X, a = _p((b, c, hw), "X"), _p((c,), "a")
    Y = ta.compute((b, c, hw), lambda p, q, i: ta.select(X[p, q, i] > 0.0, X[p, q, i], a[q] * X[p, q, i]),
                   name="Y")
    e = b * c * hw
    return Op(Y, [X, a], "dX, da = sum H X where X <= 0: 2*E", 2 * e)


def bce_with_logits():
    n, c = 4, 5
    X, T = _p((n, c), "X"), _p((n, c), "T")
    i, q = _r(n, "i"), _r(c, "q")
    L = ta.compute((), lambda: ta.sum(ta.maximum(X[i, q], 0.0) - X[i, q] * T[i, q]
                                      + ta.log(1.0 + ta.exp(-ta.abs(X[i, q]))), [i, q]) / float(n * c),
                   name="L")
    return Op(L, [X, T], "dX = H (sigmoid(X) - T) / E, dT = -H X / E: 2*E", 2 * n * c)


def soft_dice_loss():
    n = 12
    X, T = _p((n,), "X"), _p((n,), "T")
    k1, k2 = _r(n, "k1"), _r(n, "k2")
    inter = ta.compute((), lambda: ta.sum(ta.sigmoid(X[k1]) * T[k1], k1), name="inter")
    tot = ta.compute((), lambda: ta.sum(ta.sigmoid(X[k2]) + T[k2], k2), name="tot")
    L = ta.compute((), lambda: 1.0 - 2.0 * inter[()] / (tot[()] + 1.0), name="L")
    return Op(L, [X], "inter, tot, dX = sigma'(X) (a T + b): 3*N", 3 * n)


def adaptive_avg_pool():
    c, n, o = 3, 10, 4
    X = _p((c, n), "X")
    k = _r(n, "k")

    def start(i):
        return (i * n) // o

    def end(i):
        return ((i + 1) * n + o - 1) // o

    Y = ta.compute((c, o), lambda q, i: ta.sum(X[q, k], k, where=(k >= start(i)) & (k < end(i)))
                   / ta.cast(F, end(i) - start(i)), name="Y")
    pairs = c * sum((((i + 1) * n + o - 1) // o) - (i * n) // o for i in range(o))
    return Op(Y, [X], "dX: H / size over each window's points: pairs", pairs)


def nearest_resize():
    c, n, o = 2, 5, 8
    X = _p((c, n), "X")
    Y = ta.compute((c, o), lambda q, i: X[q, (i * n) // o], name="Y")
    return Op(Y, [X], "dX: one add per element of Y", c * o)


def diag_embed():
    b, n = 3, 5
    X = _p((b, n), "X")
    Y = ta.compute((b, n, n), lambda p, i, j: ta.select(i == j, X[p, i], 0.0), name="Y")
    return Op(Y, [X], "dX = H's diagonals: B*N", b * n)


def bilinear_form():
    b, m, n = 3, 4, 5
    X, A, Z = _p((b, m), "X"), _p((m, n), "A"), _p((b, n), "Z")
    i, j = _r(m, "i"), _r(n, "j")
    Y = ta.compute((b,), lambda p: ta.sum(X[p, i] * A[i, j] * Z[p, j], [i, j]), name="Y")
    # u = A z (dX = H u), dZ = A^T (H x), dA = sum_b (H x) z^T
    return Op(Y, [X, A, Z], "u = A z, dZ, dA: 3*B*M*N", 3 * b * m * n)


def global_max_pool():
    c, h, w = 3, 4, 5
    X = _p((c, h, w), "X")
    ry, rx = _r(h, "ry"), _r(w, "rx")
    Y = ta.compute((c,), lambda q: ta.max(X[q, ry, rx], [ry, rx]), name="Y")
    pairs, windows = c * h * w, c
    return Op(Y, [X], "max with its tie count pairs, scatter windows, routing pairs", 2 * pairs + windows)


def squeeze_excite():
    c, hw = 4, 6
    X, Wt = _p((c, hw), "X"), _p((c, c), "W")
    k, r = _r(hw, "k"), _r(c, "r")
    s = ta.compute((c,), lambda q: ta.sum(X[q, k], k) / float(hw), name="s")
    g = ta.compute((c,), lambda q: ta.sigmoid(ta.sum(Wt[q, r] * s[r], r)), name="g")
    Y = ta.compute((c, hw), lambda q, i: X[q, i] * g[q], name="Y")
    return Op(Y, [X, Wt], "s, z = W s, dg = sum H X, dW, ds = W^T dz, dX: 3*C*HW + 3*C*C",
              3 * c * hw + 3 * c * c)


def repeat_interleave():
    b, n, rep = 2, 5, 3
    X = _p((b, n), "X")
    Y = ta.compute((b, n * rep), lambda p, i: X[p, i // rep], name="Y")
    return Op(Y, [X], "dX: one add per element of Y", b * n * rep)


def gather_points_2d():
    b, h, w, n = 2, 4, 5, 6
    X, iy, ix = _p((b, h, w), "X"), _p((b, n), "iy", "int32"), _p((b, n), "ix", "int32")
    Y = ta.compute((b, n), lambda p, t: X[p, iy[p, t], ix[p, t]] * 3.0, name="Y")
    return Op(Y, [X], "dX = 0; dX[p, iy, ix] += 3 H: B*N", b * n, {iy: (0, h), ix: (0, w)})


def style_gram_loss():
    c, n = 4, 6
    Fm, T = _p((c, n), "F"), _p((c, c), "T")
    k, a, b = _r(n, "k"), _r(c, "a"), _r(c, "b")
    G = ta.compute((c, c), lambda i, j: ta.sum(Fm[i, k] * Fm[j, k], k) / float(n), name="G")
    L = ta.compute((), lambda: ta.sum((G[a, b] - T[a, b]) ** 2, [a, b]), name="L")
    # G, E = G - T summed with its transpose once, dF = (E + E^T) F: C*C*N twice, C*C
    return Op(L, [Fm], "G, dF = (E + E^T) F / N: 2*C*C*N + C*C", 2 * c * c * n + c * c)


def cross_product():
    b = 4
    A, B = _p((b, 3), "A"), _p((b, 3), "B")
    Y = ta.compute((b, 3), lambda p, i: A[p, (i + 1) % 3] * B[p, (i + 2) % 3]
                   - A[p, (i + 2) % 3] * B[p, (i + 1) % 3], name="Y")
    return Op(Y, [A, B], "dA = B x H, dB = H x A: one pass over each: 2*B*3", 2 * b * 3)


def tril_mask():
    b, n = 2, 6
    X = _p((b, n, n), "X")
    Y = ta.compute((b, n, n), lambda p, i, j: ta.select(j <= i, X[p, i, j], 0.0), name="Y")
    t = n * (n + 1) // 2
    return Op(Y, [X], "dX = H on the triangle (0 elsewhere): B*T", b * t)


def suffix_min():
    b, n = 3, 9
    X = _p((b, n), "X")
    k = _r(n, "k")
    Y = ta.compute((b, n), lambda p, i: ta.min(X[p, k], k, where=k >= i), name="Y")  # flip(cummin(flip(X)))
    return Op(Y, [X], "winner scan, shares' prefix scan, routing: 3*B*N", 3 * b * n)


def minmax_normalize():
    n, c = 4, 7
    X = _p((n, c), "X")
    q1, q2 = _r(c, "q1"), _r(c, "q2")
    mx = ta.compute((n,), lambda i: ta.max(X[i, q1], q1), name="mx")
    mn = ta.compute((n,), lambda i: ta.min(X[i, q2], q2), name="mn")
    Y = ta.compute((n, c), lambda i, j: (X[i, j] - mn[i]) / (mx[i] - mn[i]), name="Y")
    # max and min with their tie counts, sum H and sum H (X - mn), dX with both routings
    return Op(Y, [X], "winners 2*N*C, two sums 2*N*C, dX and two routings 3*N*C: 7*N*C", 7 * n * c)


def softmin_temperature():
    n, c, t = 4, 7, 0.5
    X = _p((n, c), "X")
    q1, q2 = _r(c, "q1"), _r(c, "q2")
    m = ta.compute((n,), lambda i: ta.min(X[i, q1], q1), name="m")
    s = ta.compute((n,), lambda i: ta.sum(ta.exp((m[i] - X[i, q2]) / t), q2), name="s")
    Y = ta.compute((n, c), lambda i, j: ta.exp((m[i] - X[i, j]) / t) / s[i], name="Y")
    return Op(Y, [X], "m, s, r = sum H P, dX = -P (H - r) / t: 4*N*C", 4 * n * c)


HOLDOUT = {f.__name__: f for f in (
    index_add, embedding_bag_mean, embedding_bag_max, unfold_strided_dilated, cumprod_middle_axis,
    reversed_cumsum, logcumsumexp, shift_by_signed_offset, masked_softmax, keep_row_max, bilinear_upsample2x,
    weight_norm, local_attention_window, prelu, bce_with_logits, soft_dice_loss, adaptive_avg_pool,
    nearest_resize, diag_embed, bilinear_form, global_max_pool, squeeze_excite, repeat_interleave,
    gather_points_2d, style_gram_loss, cross_product, tril_mask, suffix_min, minmax_normalize,
    softmin_temperature)}


def _feed(op: Op, rng) -> dict:
    feed = {t: rng.integers(lo, hi, t.shape).astype(np.int32) for t, (lo, hi) in op.ints.items()}
    return feed | {t: rng.uniform(0.5, 1.5, t.shape) for t in op.positive}


@pytest.mark.slow  # (the work bar: make test; make test-fast checks the values)
@pytest.mark.parametrize("name", sorted(HOLDOUT))
def test_torch_op_gradient_is_within_the_bar_and_the_cheap_gradient_bound(name):
    op = HOLDOUT[name]()
    assert_within_the_bar(name, op)


@pytest.mark.parametrize("name", sorted(HOLDOUT))
def test_torch_op_gradient_matches_central_differences(name):
    op = HOLDOUT[name]()
    assert ta.gradcheck(op.output, op.inputs, feed=_feed(op, np.random.default_rng(0)))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOLDOUT))
def test_torch_op_compiled_gradient_matches_the_evaluator(name):
    op = HOLDOUT[name]()
    H = ta.placeholder(op.output.shape, F, "H")
    grads = list(ta.JacobianRecursive(op.output, op.inputs, H))
    args = placeholders([op.output]) + [H]
    rng = np.random.default_rng(1)
    feed = _feed(op, rng)
    values = [feed[t] if t in feed else rng.uniform(-1.0, 1.0, t.shape) for t in args]
    got = ta.build(grads, args)(*values)
    got = got if isinstance(got, (list, tuple)) else [got]
    for g, x in zip(grads, got):
        want = ta.evaluate(g, dict(zip(args, values)))
        np.testing.assert_allclose(x, want, rtol=1e-9, atol=1e-12, err_msg=f"{name}: {g.name}")
