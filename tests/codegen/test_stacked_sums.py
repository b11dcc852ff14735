"""Several products summed over the same reduction axes, stacked into one product over one more axis
(``codegen/passes/stacked_sums.py``).

Oracles: NumPy formulas written here in float64 (the products, a recurrent network's
backpropagation through time); the structure is read from ``ta.lower``'s text (the products a
program calls), the stores counted by ``.work``."""

import numpy as np
import pytest

import tensorad as ta

RNG = np.random.default_rng(3)
T, B, M, N = 5, 6, 24, 40
HASWELL = "llvm -mcpu=haswell"


def _sides(m: int = M, n: int = N):
    hs = [ta.placeholder((B, m), "float32", f"h{t}") for t in range(T)]
    gs = [ta.placeholder((B, n), "float32", f"g{t}") for t in range(T)]
    args = [RNG.uniform(-1, 1, x.shape).astype("float32") for x in hs + gs]
    return hs, gs, args


def _want(args):
    hs, gs = (np.asarray(a, "float64") for a in (args[:T], args[T:]))
    return sum(h.T @ np.tanh(g) for h, g in zip(hs, gs))


def _one_sum(low) -> bool:
    """Whether the program computes one sum, over the stacked axis and the batch."""
    return low.text.count("(sum over") == 1 and "(sum over s, r" in low.text


def test_elementwise_sum_of_sums_is_one_product():
    hs, gs, args = _sides()
    terms = []
    for t in range(T):
        r = ta.reduce_axis((0, B), "r")
        terms.append(ta.compute((M, N), lambda i, j, t=t, r=r: ta.sum(hs[t][r, i] * ta.tanh(gs[t][r, j]),
                                                                      axis=r)))
    total = terms[0]
    for x in terms[1:]:
        total = total + x
    low = ta.lower([total], hs + gs, target=HASWELL)
    assert _one_sum(low)
    assert low.work == M * N * T * B + T * B * (M + N)  # the product, and the copies of its sides
    got = ta.build([total], hs + gs)(*args)
    np.testing.assert_allclose(got, _want(args), rtol=1e-5, atol=1e-5)


def test_sum_of_several_terms_is_one_product():
    hs, gs, args = _sides()
    r = ta.reduce_axis((0, B), "r")

    def body(i, j):
        value = hs[0][r, i] * ta.tanh(gs[0][r, j])
        for t in range(1, T):
            value = value + hs[t][r, i] * ta.tanh(gs[t][r, j])
        return ta.sum(value, axis=r)
    total = ta.compute((M, N), body, name="total")
    low = ta.lower([total], hs + gs, target=HASWELL)
    assert _one_sum(low)
    got = ta.build([total], hs + gs)(*args)
    np.testing.assert_allclose(got, _want(args), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shared, n", [(True, N), (False, 2)])
def test_not_stacked(shared, n):
    """A side every term shares is factored out instead; a product of two columns is cheaper than
    copying its sides."""
    hs, gs, args = _sides(n=n)
    r = ta.reduce_axis((0, B), "r")
    left = (lambda t: hs[0]) if shared else (lambda t: hs[t])

    def body(i, j):
        value = left(0)[r, i] * gs[0][r, j]
        for t in range(1, T):
            value = value + left(t)[r, i] * gs[t][r, j]
        return ta.sum(value, axis=r)
    total = ta.compute((M, n), body, name="total")
    low = ta.lower([total], hs + gs, target=HASWELL)
    assert "stack" not in low.text
    hs64, gs64 = (np.asarray(a, "float64") for a in (args[:T], args[T:]))
    want = sum((hs64[0] if shared else h).T @ g for h, g in zip(hs64, gs64))
    np.testing.assert_allclose(ta.build([total], hs + gs)(*args), want, rtol=1e-5, atol=1e-5)


def test_recurrent_weight_gradients_match_float64_bptt():
    """An Elman network's weight gradients (one product per step) as one product each."""
    steps, batch, inputs, hidden = 4, 8, 24, 32
    X = ta.placeholder((steps, batch, inputs), "float32", "X")
    Wx = ta.placeholder((hidden, inputs), "float32", "Wx")
    Wh = ta.placeholder((hidden, hidden), "float32", "Wh")
    h = ta.topi.tanh(ta.topi.nn.dense(X[0], Wx))
    for t in range(1, steps):
        h = ta.topi.tanh(ta.topi.nn.dense(X[t], Wx) + ta.topi.nn.dense(h, Wh))
    loss = ta.topi.sum(h)
    grads = [ta.Jacobian(loss, w) for w in (Wx, Wh)]
    low = ta.lower(grads, [X, Wx, Wh], target=HASWELL)
    assert low.text.count("(sum over s, i") == 2  # one product per weight, over steps and batch
    xs, wx, wh = (RNG.uniform(-0.5, 0.5, t.shape) for t in (X, Wx, Wh))
    got = ta.build(grads, [X, Wx, Wh])(*(a.astype("float32") for a in (xs, wx, wh)))
    hs = [np.tanh(xs[0] @ wx.T)]
    for t in range(1, steps):
        hs.append(np.tanh(xs[t] @ wx.T + hs[-1] @ wh.T))
    dwx, dwh, dh = np.zeros_like(wx), np.zeros_like(wh), np.ones_like(hs[-1])
    for t in range(steps - 1, -1, -1):
        dz = dh * (1 - hs[t] ** 2)
        dwx += dz.T @ xs[t]
        if t:
            dwh += dz.T @ hs[t - 1]
        dh = dz @ wh
    np.testing.assert_allclose(got[0], dwx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], dwh, rtol=1e-4, atol=1e-5)


def test_products_sharing_a_side_are_one_product():
    """An unrolled layer's input products ``X[t] W^T`` (one per step, ``W`` shared) are one product over
    the steps; a recurrence's products (each reads the previous one's result) are not."""
    steps, batch, inputs, hidden = 4, 8, 24, 32
    X = ta.placeholder((steps, batch, inputs), "float32", "X")
    W = ta.placeholder((hidden, inputs), "float32", "W")
    U = ta.placeholder((hidden, hidden), "float32", "U")
    h = ta.topi.tanh(ta.topi.nn.dense(X[0], W))
    for t in range(1, steps):
        h = ta.topi.tanh(ta.topi.nn.dense(X[t], W) + ta.topi.nn.dense(h, U))
    low = ta.lower([h], [X, W, U], target=HASWELL)
    assert low.text.count("allocate dense.stacked:") == 1 and low.text.count("allocate dense") == 2
    # the one product of X W^T, the stacked X, each step's h U^T and the first step's tanh
    assert low.work == steps * batch * hidden * inputs + steps * batch * inputs \
        + (steps - 1) * batch * hidden * hidden + batch * hidden
    xs, w, u = (RNG.uniform(-0.5, 0.5, t.shape) for t in (X, W, U))
    want = np.tanh(xs[0] @ w.T)
    for t in range(1, steps):
        want = np.tanh(xs[t] @ w.T + want @ u.T)
    got = ta.build([h], [X, W, U])(*(a.astype("float32") for a in (xs, w, u)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
