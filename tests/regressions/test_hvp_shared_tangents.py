"""The HVP of ``prod(cos(select(...)))`` compiled slowly.

``hessian_vector_product`` took the jvp of each input's gradient separately, so every tensor
the gradients share (the forward values' tangents, the product's zero count and nonzero
product) got one tangent tensor per input: an HVP of 23 compute ops had 5 of them
duplicates, and 22 loop nests to optimize, lower and compile.  Now the jvps of all gradients
are one pass with shared tangents (18 ops, 17 nests, about 20% less CPU to
check; this test's HVP: work 432 -> 336).  Counted, never timed; the values are checked
against central finite differences of the gradient (float64).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

import tensorad as ta
from tensorad.ir.rewrite import tensor_graph

F = "float64"


def _program():
    X = ta.placeholder((4, 5), F, name="X")
    W = ta.placeholder((5, 3), F, name="W")
    k = ta.reduce_axis((0, 5), name="k")
    T = ta.compute((4, 3), lambda i, j: ta.tanh(ta.sum(X[i, k] * W[k, j], axis=k)), name="T")
    j = ta.reduce_axis((0, 3), name="j")
    P = ta.compute((4,), lambda i: ta.prod(ta.cos(ta.select(T[i, j] > 0.0, T[i, j] * 2.0, T[i, j])), axis=j),
                   name="P")
    r = ta.reduce_axis((0, 4), name="r")
    L = ta.compute((), lambda: ta.sum(P[r], axis=r), name="L")
    return X, W, L


def test_hvp_makes_each_shared_tangent_once_and_is_right():
    X, W, L = _program()
    U = ta.placeholder((4, 5), F, name="U")
    V = ta.placeholder((5, 3), F, name="V")
    hv = ta.hessian_vector_product(L, [X, W], [U, V])
    ops = {t.op for t in tensor_graph(list(hv))}
    counts = Counter(op.name for op in ops)
    assert counts["T.jvp"] == 1, counts  # the tangent of the shared forward value, once
    dup = {name: n for name, n in counts.items() if n > 1}
    assert not dup, dup

    rng = np.random.default_rng(0)
    x, w = rng.uniform(-1, 1, (4, 5)), rng.uniform(-1, 1, (5, 3))
    u, v = rng.uniform(-1, 1, (4, 5)), rng.uniform(-1, 1, (5, 3))
    got = ta.build(list(hv), [X, W, U, V])(x, w, u, v)
    grad = ta.build(ta.gradient(L, [X, W]), [X, W], fastmath=False)
    eps = 1e-5
    plus, minus = grad(x + eps * u, w + eps * v), grad(x - eps * u, w - eps * v)
    for g, a, b in zip(got, plus, minus):
        np.testing.assert_allclose(g, (a - b) / (2 * eps), rtol=1e-6, atol=1e-8)

