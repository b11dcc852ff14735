"""The gradient of a split (LSTM gates, fused QKV) stays one matrix product per weight.

The adjoint of ``g`` in ``i, f, gg, o = split(g, 4, axis=1)`` is a sum of four pieces, each
nonzero on its own quarter of the columns.  Inlined into the sums that read it
(``Wx.grad = sum_i g.grad[i, o] X[i, k]``), the optimizer split each sum into one product per
piece: four small products per gradient, each with a padded operand and a full-size
temporary, then a pass adding them.  The adjoint is now kept as one tensor
(``simplify/sums/tiling.py``), so each gradient is one product, as written by hand:
``dG = concat(di, df, dgg, do)``, ``X.grad = dG Wx``, ``Wx.grad = dG^T X``, ``b.grad = colsum(dG)``.

Oracles: NumPy's float64 formulas of the backward (written here), the work counted by hand.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta
from tensorad import topi


def _lstm(X, Hh, C, Wx, Wh, B):
    g = topi.add(topi.add(topi.nn.dense(X, Wx), topi.nn.dense(Hh, Wh)), B)
    i, f, gg, o = topi.split(g, 4, axis=1)
    c2 = topi.add(topi.multiply(topi.sigmoid(f), C), topi.multiply(topi.sigmoid(i), topi.tanh(gg)))
    return topi.multiply(topi.sigmoid(o), topi.tanh(c2))


def _lstm_function(n, m, h, dtype):
    shapes = {"X": (n, m), "Hh": (n, h), "C": (n, h), "Wx": (4 * h, m), "Wh": (4 * h, h),
              "B": (4 * h,)}
    p = {k: ta.placeholder(s, dtype, name=k) for k, s in shapes.items()}
    ins = list(p.values())
    return ta.function(_lstm(**p), ins, wrt=ins, num_threads=1), shapes


def _sums(lowered) -> int:
    """The reductions the loop program runs (a fused nest names each of its members)."""
    return sum(line.count("sum over") for line in str(lowered).splitlines()
               if line.lstrip().startswith("# nest"))


def test_lstm_cell_backward_is_one_product_per_gradient():
    n, m, h = 16, 24, 20
    fn, shapes = _lstm_function(n, m, h, "float32")
    low = fn.lower_backward()
    # X.grad, Hh.grad, Wx.grad, Wh.grad: one product each; B.grad: one column sum
    assert _sums(low) == 5, str(low)
    # no temporary the size of a weight (a per-piece partial gradient)
    big = {shapes["Wx"], shapes["Wh"]}
    assert not [t for t in low.temporaries if t[1] in big], low.temporaries
    g = 4 * h
    products = 2 * n * g * m + 2 * n * g * h   # dG Wx, dG^T X, dG Wh, dG^T Hh
    # dc, the four gate gradients, dG assembled from them, dC: 10 n h; b.grad: n g
    assert low.work == products + n * g + 10 * n * h


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_lstm_cell_backward_values_match_numpy_float64(rng):
    n, m, h = 5, 6, 7
    fn, shapes = _lstm_function(n, m, h, "float64")
    d = {k: rng.uniform(-1, 1, s) for k, s in shapes.items()}
    dh = rng.uniform(-1, 1, (n, h))
    g = d["X"] @ d["Wx"].T + d["Hh"] @ d["Wh"].T + d["B"]
    si, sf, tg, so = _sigmoid(g[:, :h]), _sigmoid(g[:, h:2 * h]), np.tanh(g[:, 2 * h:3 * h]), \
        _sigmoid(g[:, 3 * h:])
    c2 = sf * d["C"] + si * tg
    tc = np.tanh(c2)
    dc = dh * so * (1 - tc ** 2)
    dG = np.concatenate([dc * tg * si * (1 - si), dc * d["C"] * sf * (1 - sf),
                         dc * si * (1 - tg ** 2), dh * tc * so * (1 - so)], axis=1)
    want = {"X": dG @ d["Wx"], "Hh": dG @ d["Wh"], "C": dc * sf, "Wx": dG.T @ d["X"],
            "Wh": dG.T @ d["Hh"], "B": dG.sum(0)}
    args = [d[k] for k in shapes]
    y, res = fn.forward(*args)
    np.testing.assert_allclose(y, so * tc, rtol=1e-12, atol=1e-12)
    got = fn.backward(res, dh)
    for name, value in zip(shapes, got):
        np.testing.assert_allclose(value, want[name], rtol=1e-10, atol=1e-12, err_msg=name)


def _qkv(n, d, consumer):
    X = ta.placeholder((n, d), "float64", name="X")
    W = ta.placeholder((3 * d, d), "float64", name="W")
    q, k, v = topi.split(topi.nn.dense(X, W), 3, axis=-1)
    Y = consumer(q, k, v)
    head = ta.placeholder(Y.shape, "float64", name="head")
    return X, W, head, ta.gradient(Y, [X, W], head=head)


def test_fused_qkv_projection_gradient_is_one_product_per_gradient():
    n, d = 12, 16
    X, W, head, grads = _qkv(n, d, lambda q, k, v: topi.add(topi.multiply(q, topi.sigmoid(k)), v))
    low = ta.lower(grads, [X, W, head])
    # the forward's product (recomputed: no residuals here), X.grad and W.grad
    assert _sums(low) == 3, str(low)
    assert not [t for t in low.temporaries if t[1] in {(3 * d, d)}], low.temporaries
    # the forward's q and k columns (v's values are not needed), sigmoid(k), dk, dQKV
    # assembled (dq and dv inlined into it), then dQKV W and dQKV^T X
    assert low.work == n * 2 * d * d + n * d + n * d + 3 * n * d + 2 * n * 3 * d * d


def test_fused_qkv_attention_gradient_matches_numpy_float64(rng):
    n, d = 7, 5

    def attention(q, k, v):
        return topi.matmul(topi.nn.softmax(topi.nn.dense(q, k), axis=-1), v)

    X, W, head, grads = _qkv(n, d, attention)
    x, w, dy = rng.uniform(-1, 1, (n, d)), rng.uniform(-1, 1, (3 * d, d)), rng.uniform(-1, 1, (n, d))
    low = ta.lower(grads, [X, W, head])
    assert not [t for t in low.temporaries if t[1] in {(3 * d, d)}], low.temporaries
    gx, gw = ta.build(grads, [X, W, head])(x, w, dy)
    qkv = x @ w.T
    q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
    s = q @ k.T
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dp = dy @ v.T
    ds = p * (dp - (dp * p).sum(1, keepdims=True))
    dqkv = np.concatenate([ds @ k, ds.T @ q, p.T @ dy], axis=1)
    np.testing.assert_allclose(gx, dqkv @ w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gw, dqkv.T @ x, rtol=1e-10, atol=1e-12)


def test_pieces_that_leave_zeros_are_still_split(rng):
    """Two of four gates read: the adjoint is zero on half the columns, and each gradient
    sums over the nonzero half only (materializing it would add the zeros' work)."""
    n, m, h = 8, 12, 10
    X = ta.placeholder((n, m), "float64", name="X")
    W = ta.placeholder((4 * h, m), "float64", name="W")
    i, f, _, _ = topi.split(topi.nn.dense(X, W), 4, axis=1)
    Y = topi.multiply(topi.sigmoid(i), f)
    head = ta.placeholder(Y.shape, "float64", name="head")
    grads = ta.gradient(Y, [X, W], head=head)
    low = ta.lower(grads, [X, W, head])
    assert low.work <= n * 4 * h * m + 2 * (n * 2 * h * m) + 8 * n * h + 4 * h * m, str(low)
    x, w, dy = rng.uniform(-1, 1, (n, m)), rng.uniform(-1, 1, (4 * h, m)), rng.uniform(-1, 1, (n, h))
    gx, gw = ta.build(grads, [X, W, head])(x, w, dy)
    g = x @ w.T
    si = _sigmoid(g[:, :h])
    dG = np.concatenate([dy * g[:, h:2 * h] * si * (1 - si), dy * si, np.zeros((n, 2 * h))], axis=1)
    np.testing.assert_allclose(gx, dG @ w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gw, dG.T @ x, rtol=1e-10, atol=1e-12)


def _tiles(fcompute) -> bool:
    from tensorad.simplify.sums.tiling import tiles_box

    A = ta.placeholder((6, 8), "float32", name="A")
    B = ta.placeholder((6, 8), "float32", name="B")
    T = ta.compute((6, 8), lambda i, j: fcompute(A, B, i, j), name="T")
    return tiles_box(T.op.axes, T.op.body[0])


def test_which_sums_of_pieces_tile_the_box():
    zero = ta.const(0.0)
    ite = ta.if_then_else
    # slices of the columns, as a split's adjoint: tiled
    assert _tiles(lambda A, B, i, j: ite(j < 3, A[i, j], zero) + ite(j >= 3, B[i, j], zero))
    assert _tiles(lambda A, B, i, j: ite((j < 3) & (i < 2), A[i, j], zero)
                  + ite((j >= 3) & (i < 2), B[i, j], zero) + ite(i >= 2, A[i, j] * B[i, j], zero))
    # overlapping pieces, a zero column left, one term, a term everywhere: not
    assert not _tiles(lambda A, B, i, j: ite(j < 4, A[i, j], zero) + ite(j >= 3, B[i, j], zero))
    assert not _tiles(lambda A, B, i, j: ite(j < 3, A[i, j], zero) + ite(j >= 4, B[i, j], zero))
    assert not _tiles(lambda A, B, i, j: ite(j < 3, A[i, j], zero))
    assert not _tiles(lambda A, B, i, j: ite(j < 3, A[i, j], zero) + B[i, j])
    # a diagonal and the rest: a sum over the diagonal eliminates its variable, so not kept
    assert not _tiles(lambda A, B, i, j: ite(i == j, A[i, j], zero) + ite(i != j, B[i, j], zero))
