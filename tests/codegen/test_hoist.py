"""Transcendental subexpressions that depend on fewer axes than their op are computed once per
point of their own axes (codegen/strategies/hoist.py, the ``hoist`` strategy)."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorad.codegen.program import Nest

import tensorad as ta

RNG = np.random.default_rng(11)


def _nests(lowered):
    return [s for s in lowered.program.steps if isinstance(s, Nest)]


def test_log_softmax_over_channels_takes_one_log_per_pixel():
    # Y[n, c, y, x] = X - m[n, y, x] - log(s[n, y, x]): the log once per (n, y, x), not per channel
    N, C, H, W = 2, 21, 8, 16
    X = ta.placeholder((N, C, H, W), "float32", "X")
    Y = ta.topi.nn.log_softmax(X, axis=1)
    lowered = ta.lower([Y], [X])
    logs = [n for n in _nests(lowered) if "log(" in str(n)]
    assert len(logs) == 1 and logs[0].work == N * H * W, [str(n) for n in logs]
    # the max and the sum of exps over the channels read whole rows of W pixels into strips
    # (their reads cost the same either way; walking the channels, 16 KB apart, would not vectorize),
    # the sum's pass over a row after the max's, in one nest (codegen/loops/nest_groups._strip_chain)
    (both,) = [n for n in _nests(lowered) if " over " in n.note]
    assert both.note.count(" over k") == 2 and "fused over" in both.note, both.note
    x = RNG.uniform(-3, 3, (N, C, H, W))
    want = x - x.max(1, keepdims=True) - np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True))
    np.testing.assert_allclose(ta.build([Y], [X])(x.astype(np.float32)), want, rtol=1e-5, atol=1e-5)


def test_a_guarded_subexpression_stays_where_its_guard_is():
    # exp(V[j - 1]) depends on j only, but at j = 0 its index is out of range: only the guard
    # keeps it in, so computing it for every j would read V[-1].  (A guarded expression that
    # itself depends on j only is taken whole, guard and all.)
    X = ta.placeholder((40, 33), "float32", "X")
    V = ta.placeholder((33,), "float32", "V")
    Y = ta.compute((40, 33), lambda i, j: X[i, j] * ta.if_then_else((j >= 1) & (i < 30), ta.exp(V[j - 1]),
                                                                        0.0), "Y")
    lowered = ta.lower([Y], [X, V])
    assert len(_nests(lowered)) == 1, str(lowered)
    x, v = RNG.uniform(-1, 1, (40, 33)), RNG.uniform(-1, 1, 33)
    want = x * np.concatenate([[0.0], np.exp(v[:-1])]) * (np.arange(40) < 30)[:, None]
    got = ta.build([Y], [X, V], checked=True)(x.astype(np.float32), v.astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-6)


@settings(max_examples=25, deadline=None)
@given(shape=st.tuples(*[st.integers(1, 9)] * 3), keep=st.sampled_from(
    [s for k in (1, 2) for s in itertools.combinations(range(3), k) if 2 in s]),
       fn=st.sampled_from(["exp", "log", "sqrt", "tanh"]), threads=st.sampled_from([1, 2]))
def test_hoisted_values_equal_the_reference(shape, keep, fn, threads):
    """Random 3-axis ops ``X[a, b, c] * f(S[kept axes]) + f(S[kept axes]) ** 2`` built equal
    NumPy's, whichever axes the subexpression keeps (the innermost always)."""
    X = ta.placeholder(shape, "float64", "X")
    S = ta.placeholder(tuple(shape[k] for k in keep), "float64", "S")
    f = getattr(ta, fn)

    def body(*ax):
        inv = f(S[tuple(ax[k] for k in keep)] + 2.0)
        return X[ax] * inv + inv * inv

    Y = ta.compute(shape, body, "Y")
    x, s = RNG.uniform(-1, 1, shape), RNG.uniform(-1, 1, S.shape)
    inv = getattr(np, fn)(s + 2.0).reshape([shape[k] if k in keep else 1 for k in range(3)])
    got = ta.build([Y], [X, S], num_threads=threads, parallel_min_work=0)(x, s)
    # (a contracted multiply-add rounds once: where the two terms cancel, the error is relative
    # to the terms, not to their difference -- an rtol on the result flaked)
    scale = np.abs(x * inv) + inv * inv
    np.testing.assert_array_less(np.abs(got - (x * inv + inv * inv)), 1e-12 * scale + 1e-300)
    # whether it pays is the cost model's call; a temporary, when made, has the kept axes' points
    kept = int(np.prod(S.shape))
    for nest in _nests(ta.lower([Y], [X, S]))[:-1]:
        assert nest.work == kept, nest


def test_finding_what_to_hoist_walks_a_deep_body_once(monkeypatch):
    # a long gradient's inlined chain is one deep body: the descent asked each node it passed
    # whether its subtree held a reduction or a heavy function and which axes it used, walking
    # the subtree again at each level (quadratic: 3 levels of 300 walked ~140,000 nodes)
    import tensorad.codegen.strategies.hoist as hoist

    from tensorad.ir.rewrite import free_vars, walk
    from tensorad.ir.tensor import Tensor

    walked = [0]

    def counted(root):
        nodes = list(walk(root))
        walked[0] += len(nodes)
        return iter(nodes)

    def free(root):
        counted(root)
        return free_vars(root)

    monkeypatch.setattr(hoist, "walk", counted)
    monkeypatch.setattr(hoist, "free_vars", free)
    X = ta.placeholder((4, 8), "float64", "X")
    V = ta.placeholder((8,), "float64", "V")

    def body(i, j):
        e = X[i, j] * ta.exp(V[j])
        for _ in range(300):
            e = ta.tanh(e) + e * 0.5
        return e

    Y = ta.compute((4, 8), body, "Y")
    size = len(list(walk(Y.op.body[0])))
    temps, rest = hoist.hoist_invariants(Y.op, Y.op.body[0])
    assert [str(t.body[0]) for t in temps] == ["exp(V(j.h))"], [str(t.body[0]) for t in temps]
    assert walked[0] <= 3 * size, (walked[0], size)
    # the op reads the temporary where it read exp(V[j]): its values are the reference's
    x, v = RNG.uniform(-1, 1, (4, 8)), RNG.uniform(-1, 1, 8)
    want = x * np.exp(v)
    for _ in range(300):
        want = np.tanh(want) + want * 0.5
    got = ta.evaluate(Tensor(rest, 0), {X: x, V: v})
    np.testing.assert_allclose(got, want, rtol=1e-12)
