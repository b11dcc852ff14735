"""Two gradients optimized over their sizes lowered to more work, bound at a size, than the program
written at that size.

* Causal attention over a batch ``b`` and a length ``L``: the softmax's backward sums over the keys
  ``s <= q``; at ``L = 1`` that sum has one point, which the optimizer, at a static length, replaces by
  its term (read inline), while the bound program kept it as a sum stored on its own (one more step per
  row).  Binding now spells a derivative's sum over one point as its term.
* A max's gradient whose landing row is a gather index ``(i + 3 * winner) % 2`` of an input of ``n``
  rows: a static program's guard keeps what the gather says of the row (below 2), so its gradient runs
  two rows and zeroes the rest; over ``n`` the guard gave up on any program with a size, and the gradient
  ran every row.  isl now projects the gather out with the sizes as parameters."""

import numpy as np

import tensorad as ta


def _attention(b, L):
    Q, K, V = (ta.placeholder((b, L, 8), name=c) for c in "QKV")
    Y = ta.topi.nn.scaled_dot_product_attention(Q, K, V, causal=True)
    H = ta.placeholder(Y.shape, name="H")
    return list(ta.JacobianRecursive(ta.topi.sum(Y * H), [Q, K, V])), [Q, K, V, H]


def test_causal_attention_at_one_token_runs_the_static_programs_work():
    symbolic = ta.lower(*_attention(ta.size_var("b"), ta.size_var("L")))
    for b, L in ((1, 1), (3, 1), (2, 3)):
        assert symbolic.work_at(b=b, L=L) == ta.lower(*_attention(b, L)).work, f"b={b}, L={L}"
    grads, inputs = _attention(ta.size_var("b"), ta.size_var("L"))
    rng = np.random.default_rng(0)
    feed = [rng.standard_normal((3, 1, 8)).astype(np.float32) for _ in inputs]
    q, k, v, h = (a.astype(np.float64) for a in feed)
    # (one token: the attention's output is V, so dV = H and dQ = dK = 0)
    got = ta.evaluate(grads, dict(zip(inputs, feed)))
    for g, want in zip(got, (np.zeros_like(q), np.zeros_like(k), h)):
        np.testing.assert_allclose(g, want, atol=1e-6)


def _landing(n):
    X = ta.placeholder((n, 1), name="X")
    r = ta.reduce_axis((0, 3), name="r")
    Y = ta.compute((5, 16), lambda i, j: ta.max(ta.power(ta.abs(ta.if_then_else(
        (j - 1 >= 0) & (j - 1 < 1), X[(r * 3 + i) % 2, j - 1], 0.0)) + 0.5, 1.5), axis=[r], where=r < j)
        * 0.5 + X[(j + -1) % 2, 0], name="Y")
    H = ta.placeholder(Y.shape, name="H")
    return [Y, *ta.JacobianRecursive(Y, [X], H)], [X, H]


def test_gradient_through_a_gathered_row_runs_the_rows_it_lands_on():
    symbolic = ta.lower(*_landing(ta.size_var("n", min=2)))
    for n in (2, 5, 9):
        assert symbolic.work_at(n=n) == ta.lower(*_landing(n)).work, f"n={n}"
    outs, ins = _landing(ta.size_var("n", min=2))
    rng = np.random.default_rng(1)
    x, h = rng.standard_normal((5, 1)).astype(np.float32), rng.standard_normal((5, 16)).astype(np.float32)
    got = ta.build(outs, ins)(x, h)
    static_outs, static_ins = _landing(5)
    want = ta.evaluate(static_outs, dict(zip(static_ins, (x, h))))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert not got[1][2:].any()  # (rows 2 and past: no gathered index lands there)
