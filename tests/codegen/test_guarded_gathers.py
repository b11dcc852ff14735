"""Random programs whose reads are valid only under their guards: no stage may compute a
guarded read where its guard fails.

Each program reads ``x`` through a checked gather index (``mode="raise"``) or a shifted index
(``x[2 i - 3]``) that leaves the tensor wherever its ``if_then_else`` guard excludes it --
negative offsets, ``i*k - c``, ``%``, ``//`` of data -- under a random algebraic shape: products
over sums, nested selects and guards, masks (the ReLU of a gather), reductions of guarded terms
with ``where``.  The forward (also as the optimizer lifts its conditions), the reverse
gradient, the jvp and the Hessian-vector product are built in checked mode (every load and
store tested) and with default options, and must equal ``ta.evaluate`` (the oracle: it raises
where a read it computes leaves its tensor).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorad as ta

N, M = 6, 5  # rows of the program; the length of x
# gather indices k(g, i) that leave [0, M) for some data: guarded by 0 <= k < M
INDICES = [
    lambda gi, i: gi - 2,
    lambda gi, i: 2 * gi - 1,
    lambda gi, i: i * 2 - gi,
    lambda gi, i: gi % 7 - 1,
    lambda gi, i: gi // 2 + i - 3,
]
# shifted reads x[s(i)] of the loop variable itself, out of range at some i
SHIFTS = [lambda i: i - 1, lambda i: 2 * i - 3, lambda i: i * 3 - 7, lambda i: (i + 4) // 2 - 1]
FUNCS = [
    lambda t: t,
    lambda t: t * t,
    lambda t: ta.select(t > 0.0, t * t, 0.0),  # a ReLU-like mask of the read
    lambda t: ta.select(t > 0.0, 0.0, t * 0.5),
    lambda t: ta.exp(t * 0.5),
    lambda t: ta.tanh(t) * t,
]


def _inside(k):
    return (k >= 0) & (k < M)


@st.composite
def _term(draw, x, g, h):
    """A function of the row variable: a guarded read of ``x`` under its exact guard."""
    f = draw(st.sampled_from(FUNCS))
    if draw(st.booleans()):
        idx = draw(st.sampled_from(INDICES))
        return lambda i: ta.if_then_else(_inside(idx(g[i], i)), f(x.take(idx(g[i], i), mode="raise")), 0.0)
    s = draw(st.sampled_from(SHIFTS))
    return lambda i: ta.if_then_else(_inside(s(i)), f(x[s(i)]), 0.0)


@st.composite
def _body(draw, x, g, h):
    t1, t2 = draw(_term(x, g, h)), draw(_term(x, g, h))
    shape = draw(st.sampled_from(["product-of-sum", "select", "nested", "mask", "sum", "where"]))
    if shape == "product-of-sum":
        return lambda i: x[i % M] * (t1(i) + h[i] * t2(i))
    if shape == "select":
        return lambda i: ta.select(x[(i + 1) % M] > 0.0, t1(i), -t2(i))
    if shape == "nested":  # a guard inside a guard, and a product of two guarded terms
        idx = draw(st.sampled_from(INDICES))
        return lambda i: ta.if_then_else(g[i] > 0, t1(i) * t2(i) + h[i],
                                         ta.if_then_else(_inside(idx(g[i], i)), t1(i), 0.0))
    if shape == "mask":  # the gradient of this is a scatter under two masks
        idx = draw(st.sampled_from(INDICES))
        f = draw(st.sampled_from(FUNCS))
        return lambda i: ta.if_then_else(
            _inside(idx(g[i], i)),
            ta.select(x.take(idx(g[i], i), mode="raise") > 0.0,
                      f(x.take(idx(g[i], i), mode="raise")) * (h[i] + t1(i)), 0.0), 0.0)
    r = ta.reduce_axis((0, N), name="r")
    where = None if shape == "sum" else (lambda i: (r + i) % 2 == 0)
    return lambda i: ta.sum(t1(r) * h[i] + t2(r), axis=r,
                            **({} if where is None else {"where": where(i)}))


@st.composite
def programs(draw):
    x = ta.placeholder((M,), "float64", name="x")
    g = ta.placeholder((N,), "int32", name="g")
    h = ta.placeholder((N,), "float64", name="h")
    v = ta.placeholder((M,), "float64", name="v")
    body = draw(_body(x, g, h))
    y = ta.compute((N,), body, name="y")
    r = ta.reduce_axis((0, N), name="l")
    loss = ta.compute((), lambda: ta.sum(y[r] * h[r], axis=r), name="loss")
    lifted = ta.OptimizeAndLiftNonzeronessConditions(y)
    lifted = ta.compute((N,), lambda i: lifted[i] * 1.0, name="lifted")  # (y itself when unchanged)
    outs = [y, lifted, *ta.gradient(loss, [x]), ta.jvp(y, [x], [v]),
            *ta.hessian_vector_product(loss, [x], [v])]
    return outs, [x, g, h, v]


@pytest.mark.slow
@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**16))
def test_guarded_reads_stay_under_their_guards(program, seed):
    outs, ins = program
    rng = np.random.default_rng(seed)
    x, g, h, v = ins
    feed = {x: rng.uniform(-1.5, 1.5, M), g: rng.integers(-4, 8, N).astype("int32"),
            h: rng.uniform(-1, 1, N), v: rng.uniform(-1, 1, M)}
    want = ta.evaluate(outs, feed)
    for opts in ({"checked": True}, {}):
        got = ta.build(outs, ins, **opts)(*[feed[p] for p in ins])
        for t, a, b in zip(outs, got, want):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=f"{t.name} {opts}")
