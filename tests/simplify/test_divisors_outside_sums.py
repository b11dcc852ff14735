"""A divisor that does not change along a sum is divided once per sum, not once per point.

``sum_j H * (X - mu) / s`` is ``[sum_j H * (X - mu)] / s``: the optimizer moves invariant
factors, divisors and signs out of an adjoint sum, and does not move a divisor back in.  A
layer norm written with ``ta.compute`` (``(X - mu) / sqrt(var + eps)``) then gets the
passes and loops of ``ta.topi``'s, whose ``rstd`` is a product.
"""

import numpy as np
import pytest

import tensorad as ta
from tensorad.ir.expr import Op
from tensorad.ir.rewrite import free_vars, tensor_graph

F = "float64"


def _hand_layer_norm(r: int = 6, d: int = 40):
    X = ta.placeholder((r, d), F, name="X")
    g, b = ta.placeholder((d,), F, name="g"), ta.placeholder((d,), F, name="b")
    k1, k2 = ta.reduce_axis((0, d), "k1"), ta.reduce_axis((0, d), "k2")
    mu = ta.compute((r,), lambda i: ta.sum(X[i, k1], k1) / float(d), name="mu")
    var = ta.compute((r,), lambda i: ta.sum((X[i, k2] - mu[i]) ** 2, k2) / float(d), name="var")
    Y = ta.compute((r, d), lambda i, j: (X[i, j] - mu[i]) / ta.sqrt(var[i] + 1e-5) * g[j] + b[j], name="Y")
    return X, g, b, Y


def _spine(e):
    """The product's factors, divisors and negations of a sum's source, from the outside."""
    yield e
    if e.op in (Op.MUL, Op.NEG, Op.DIV):
        for f in (e.src if e.op is Op.MUL else e.src[:1]):
            yield from _spine(f)


def _invariant_divisions(grads) -> list:
    """Divisions on a sum source's product spine by a divisor free of the summed axes: each
    could be one division after the sum."""
    found = []
    for t in tensor_graph(grads):
        if t.is_placeholder or not t.op.is_reduction:
            continue
        red = t.op.body[0]
        axes = set(red.arg.axes)
        for n in _spine(red.src[1]):
            if n.op is Op.DIV and not any(v in axes for v in free_vars(n.src[1])):
                found.append((t.name, n))
    return found


def test_a_hand_written_layer_norm_divides_once_a_row():
    X, g, b, Y = _hand_layer_norm()
    H = ta.placeholder(Y.shape, F, name="H")
    grads = ta.JacobianRecursive(Y, [X, g, b], H)
    # the sum over rows (gamma's gradient) divides by each row's deviation: that divisor changes
    assert [name for name, _ in _invariant_divisions(grads)] == []
    rng = np.random.default_rng(0)
    x, gg, bb, h = (rng.normal(size=s) for s in (X.shape, g.shape, b.shape, H.shape))
    mu = x.mean(axis=1, keepdims=True)
    s = np.sqrt(x.var(axis=1, keepdims=True) + 1e-5)
    xhat = (x - mu) / s
    dxhat = h * gg
    mean = dict(axis=1, keepdims=True)
    want_x = (dxhat - dxhat.mean(**mean) - xhat * (dxhat * xhat).mean(**mean)) / s
    got = ta.build(grads, [X, g, b, H])(x, gg, bb, h)
    np.testing.assert_allclose(got[0], want_x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1], (h * xhat).sum(axis=0), rtol=1e-10)
    np.testing.assert_allclose(got[2], h.sum(axis=0), rtol=1e-10)


def test_the_softmax_gradient_sums_before_it_divides():
    X = ta.placeholder((5, 9), F, name="X")
    Y = ta.topi.nn.softmax(X)
    H = ta.placeholder(Y.shape, F, name="H")
    grads = ta.JacobianRecursive(Y, [X], H)
    assert _invariant_divisions(grads) == []
    rng = np.random.default_rng(1)
    x, h = rng.normal(size=X.shape), rng.normal(size=H.shape)
    p = np.exp(x - x.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    want = p * (h - (h * p).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(ta.build(grads, [X, H])(x, h), want, rtol=1e-10, atol=1e-14)


def _hand_batch_norm(n: int = 4, c: int = 3, h: int = 5, w: int = 6):
    X = ta.placeholder((n, c, h, w), F, name="X")
    g, b = ta.placeholder((c,), F, name="g"), ta.placeholder((c,), F, name="b")
    a = [ta.reduce_axis((0, s), f"a{k}") for k, s in enumerate((n, h, w))]
    r = [ta.reduce_axis((0, s), f"r{k}") for k, s in enumerate((n, h, w))]
    count = float(n * h * w)
    mu = ta.compute((c,), lambda q: ta.sum(X[a[0], q, a[1], a[2]], a) / count, name="mu")
    var = ta.compute((c,), lambda q: ta.sum((X[r[0], q, r[1], r[2]] - mu[q]) ** 2, r) / count, name="var")
    Y = ta.compute(X.shape, lambda i, q, y, x: (X[i, q, y, x] - mu[q]) / ta.sqrt(var[q] + 1e-5) * g[q] + b[q],
                   name="Y")
    return X, g, b, Y


@pytest.mark.parametrize("hand, topi", [
    (_hand_layer_norm, lambda X, g, b: ta.topi.nn.layer_norm(X, g, b)),
    (_hand_batch_norm, lambda X, g, b: ta.topi.nn.batch_norm(X, g, b))])
def test_a_hand_written_norm_does_no_more_work_than_topis(hand, topi):
    X, g, b, Y = hand()
    work = []
    for out in (Y, topi(X, g, b)):
        H = ta.placeholder(out.shape, F, name="H")
        grads = ta.JacobianRecursive(out, [X, g, b], H)
        work.append(ta.lower(grads, [X, g, b, H], target="llvm -mcpu=skylake-avx512").work)
    assert work[0] <= work[1]  # (topi's rstd is a nest of its own; the hand mean's / count is inlined)
