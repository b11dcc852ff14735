"""simplify/sums/factor.py checked at random points: sums whose sources mix factors free of the
reduction variable (``u[i]``), factors that use it (``A[i, k]``, ``w[k]``), centred factors
(``A[i, k] - m[i]`` with ``m`` the row mean, whose sum is zero), constants and box or
triangular domains.  The optimized tensors (factored, shared through one optimizer context
and folded back when unshared) must equal the reference evaluator's values of the originals,
with zeros and negative values among the data; and the rewrite must actually fire."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples
from tensorad.simplify import Optimizer
from tensorad.simplify.sums.factor import factor_sum, terms

import tensorad as ta
from tensorad.ir.expr import var

N = 5
A = ta.placeholder((N, N), name="A")
u = ta.placeholder((N,), name="u")
w = ta.placeholder((N,), name="w")
_k = ta.reduce_axis((0, N), "k")
M = ta.compute((N,), lambda i: ta.sum(A[i, _k], _k) * (1.0 / N), name="m")  # the row mean

FACTORS = ["A", "u", "w", "centred", "const", "u+1", "Aw"]


def _factor(kind: str, i, k):
    return {"A": lambda: A[i, k], "u": lambda: u[i], "w": lambda: w[k],
            "centred": lambda: A[i, k] - M[i], "const": lambda: ta.const(-1.5),
            "u+1": lambda: u[i] + 1.0, "Aw": lambda: A[i, k] * w[k] + u[i]}[kind]()


def _source(spec, i, k):
    total = None
    for sign, kinds in spec:
        t = None
        for kind in kinds:
            f = _factor(kind, i, k)
            t = f if t is None else t * f
        t = t if sign > 0 else -t
        total = t if total is None else total + t
    return total


term = st.tuples(st.sampled_from([1, -1]), st.lists(st.sampled_from(FACTORS), min_size=1, max_size=3))
program = st.lists(st.lists(term, min_size=1, max_size=4), min_size=1, max_size=3)


def _tensors(specs, triangle: bool):
    def one(n, spec):
        k = ta.reduce_axis((0, N), "k")
        return ta.compute((N,), lambda i: ta.sum(_source(spec, i, k), k,
                                                 where=(k <= i) if triangle else None), name=f"Y{n}")

    return [one(n, spec) for n, spec in enumerate(specs)]


def _feed(rng):
    def draw(shape):
        x = rng.standard_normal(shape).astype(np.float32)
        x[rng.random(shape) < 0.3] = 0.0  # zeros among the data
        return x
    return {A: draw((N, N)), u: draw((N,)), w: draw((N,))}


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program, st.booleans(), st.integers(0, 2**31 - 1))
def test_factored_sums_keep_their_values(specs, triangle, seed):
    ys = _tensors(specs, triangle)
    opt = Optimizer()
    got = opt.finish([opt(y) for y in ys])
    feed = _feed(np.random.default_rng(seed))
    for g, want in zip(ta.evaluate(got, feed), ta.evaluate(ys, feed)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)


def test_the_rewrites_fire():
    """Each case of factor_sum happens on these sums (a check that the random test exercises
    the rule, not only the optimizer around it)."""
    i, k = var("i", 0, N), ta.reduce_axis((0, N), "k")
    made = Counter()

    def make(ax, body, alone, nested):
        made["nested" if nested else "alone" if alone else "remainder"] += 1
        return ta.compute(tuple(a.hi for a in ax), lambda *idx: ta.const(0.0), name="T")[tuple(ax)]

    def nothing(ax, body):
        return None

    def red(src, where=None):
        return ta.sum(src, k, where=where)

    # an invariant factor moves out of a lone bracket
    assert factor_sum([i], red(u[i] * A[i, k]), nothing, make) is not None and made["alone"] == 1
    # a sum of constants over a box is a count; what is left is one remainder
    out = factor_sum([i], red(A[i, k] * w[k] + u[i] + A[i, k] * A[k, i]), nothing, make)
    assert out is not None and made["remainder"] == 1
    # sum_k (A[i, k] - m[i]) is provably zero, so only the other bracket is left
    out = factor_sum([i], red((A[i, k] - M[i]) * u[i] + w[k] * u[i]), nothing, make)
    assert out is not None
    # nothing to gain: a lone bracket with a constant factor is left alone
    assert factor_sum([i], red(A[i, k] * 2.0), nothing, make) is None
    # H * (X - mean) keeps its centred factor whole (no catastrophic cancellation)
    (coef, factors), = terms(A[i, k] * (A[i, k] - M[i]) * u[i], frozenset([k]))
    assert any(f.op.name == "SUB" for f in factors)
