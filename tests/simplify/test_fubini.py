"""Zero-proofs over nested sums: Fubini's exchange and names that no sum captures.

``sum_n sum_{q >= n} f(q, n)`` and ``sum_q sum_{n <= q} f(q, n)`` are one sum over a
triangle; the prover flattens nested sums into one domain and sums its variables innermost
first (:meth:`tensorad.simplify.zeros.polynomial._Builder._domain_sum`), so both orders meet, and a
softmax's row sums cancel through the keys' sum of attention.  The oracles are NumPy formulas
and a brute-force evaluation of the prover's own polynomial at random data.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import tensorad.simplify.zeros.polynomial as polynomial
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples
from tensorad.simplify.zeros.polynomial import provably_zero

import tensorad as ta
from tensorad.ir import Op
from tensorad.ir.rewrite import walk
from tensorad.ir.tensor import ComputeOp

_ARITH = {Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b,
          Op.DIV: lambda a, b: a / b, Op.LT: lambda a, b: a < b, Op.LE: lambda a, b: a <= b,
          Op.GT: lambda a, b: a > b, Op.GE: lambda a, b: a >= b, Op.EQ: lambda a, b: a == b,
          Op.AND: lambda a, b: a and b}


def _value(e, env: dict, data: dict) -> float:
    """``e`` by brute force: every sum over every point of its box (the test's own oracle)."""
    if e.op is Op.VAR:
        return env[e]
    if e.op is Op.CONST:
        return e.arg
    if e.op in _ARITH:
        return _ARITH[e.op](*(_value(s, env, data) for s in e.src))
    if e.op is Op.NEG:
        return -_value(e.src[0], env, data)
    if e.op is Op.EXP:
        return math.exp(_value(e.src[0], env, data))
    if e.op is Op.IF_THEN_ELSE:
        c, a, b = e.src
        return _value(a, env, data) if _value(c, env, data) else _value(b, env, data)
    if e.op is Op.READ:
        idx = tuple(int(_value(i, env, data)) for i in e.src)
        t = e.arg
        if not isinstance(t.op, ComputeOp):
            return float(data[t][idx])
        return _value(t.op.body[0], env | dict(zip(t.op.axes, idx)), data)
    if e.op is Op.REDUCE:
        total = 0.0
        for point in itertools.product(*(range(a.lo, a.hi) for a in e.arg.axes)):
            inner = env | dict(zip(e.arg.axes, point))
            if _value(e.src[0], inner, data):
                total += _value(e.src[1], inner, data)
        return total
    raise AssertionError(e.op)


def _poly_value(poly, data: dict) -> float:
    return sum(float(c) * math.prod(_value(x, {}, data) ** p for x, p in m) for m, c in poly.items())


_CONDS = {  # (q, n) -> a triangle or band of the square
    "q >= n + c": lambda q, n, c: q >= n + c, "q <= n + c": lambda q, n, c: q <= n + c,
    "q + n <= c": lambda q, n, c: q + n <= c + 2, "n <= q": lambda q, n, c: n <= q,
}


@settings(max_examples=examples(30), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 4), st.sampled_from(sorted(_CONDS)), st.integers(-1, 1), st.integers(0, 2**16))
def test_nested_sums_in_either_order_are_one_sum(size, cond_name, c, seed):
    cond = _CONDS[cond_name]
    A = ta.placeholder((size, size), "float64", "A")
    B = ta.placeholder((size,), "float64", "B")
    q1, n2 = ta.reduce_axis((0, size), "q"), ta.reduce_axis((0, size), "n")
    # sum_{(q, n) in the domain} A[q, n] B[q] B[n]^2: its inner sum over q, or over n
    by_n = ta.compute((size,), lambda n: ta.sum(A[q1, n] * B[q1] * B[n], q1, where=cond(q1, n, c)))
    by_q = ta.compute((size,), lambda q: ta.sum(A[q, n2] * B[n2] * B[n2], n2, where=cond(q, n2, c)))
    n, q = ta.reduce_axis((0, size), "n"), ta.reduce_axis((0, size), "q")
    outer_n, outer_q = ta.sum(by_n[n] * B[n], n), ta.sum(by_q[q] * B[q], q)
    assert provably_zero(outer_n - outer_q)  # (before: the two orders were two atoms)
    # the exchange is an identity: the prover's polynomial, every sum by brute force, is the
    # NumPy formula at random data
    rng = np.random.default_rng(seed)
    data = {A: rng.standard_normal((size, size)), B: rng.standard_normal(size)}
    qq, nn = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    want = np.sum(np.where(cond(qq, nn, c), data[A] * data[B][:, None] * data[B][None, :] ** 2, 0.0))
    poly = polynomial._Builder().poly(outer_n)
    np.testing.assert_allclose(_poly_value(poly, data), want, rtol=1e-12, atol=1e-12)


def test_a_softmax_row_sum_cancels_through_the_keys_sum():
    # attention's key gradient summed over the keys: sum_n sum_{q >= n} g(q) e(q, n) / S(q)^2
    # is sum_q g(q) S(q) / S(q)^2 once n is summed first -- the Transformer block's last proof
    size = 4
    X = ta.placeholder((size, size), "float64", "X")
    g = ta.placeholder((size,), "float64", "g")
    s = ta.reduce_axis((0, size), "s")
    E = ta.compute((size, size), lambda i, j: ta.if_then_else(j <= i, ta.exp(X[i, j]), 0.0), name="E")
    S = ta.compute((size,), lambda i: ta.sum(E[i, s], s, where=s <= i), name="S")
    k = ta.reduce_axis((0, size), "k")
    D = ta.compute((size,), lambda j: ta.sum(g[k] * E[k, j] / (S[k] * S[k]), k, where=j <= k), name="D")
    n, q = ta.reduce_axis((0, size), "n"), ta.reduce_axis((0, size), "q")
    assert provably_zero(ta.sum(D[n], n) - ta.sum(g[q] / S[q], q))
    assert not provably_zero(ta.sum(D[n], n) - ta.sum(g[q] * S[q], q))


def test_a_sum_inside_never_captures_a_name():
    # sum_a A[a] / S[a] with S[a] = sum_{s <= a} G[a, s], and with S3[a] = sum_{s >= a} G[s, a]:
    # renaming a to the inner sum's own positional name made both brackets one atom
    # [sum_{x <= x} G[x, x]], so their difference was "provably zero"
    size = 4
    A = ta.placeholder((size,), "float64", "A")
    G = ta.placeholder((size, size), "float64", "G")
    s, s2, r = (ta.reduce_axis((0, size), v) for v in "s2r")
    S = ta.compute((size,), lambda a: ta.sum(G[a, s], s, where=s <= a), name="S")
    S3 = ta.compute((size,), lambda a: ta.sum(G[s2, a], s2, where=a <= s2), name="S3")
    a, gg = np.random.default_rng(0).uniform(1, 2, size), np.random.default_rng(1).uniform(1, 2, (size, size))
    value = sum(a[i] / gg[i, : i + 1].sum() - a[i] / gg[i:, i].sum() for i in range(size))
    assert abs(value) > 0.1
    assert not provably_zero(ta.sum(A[r] / S[r] - A[r] / S3[r], r))


def test_the_transformer_blocks_b1_gradient_drops_the_keys_term():
    # b1's gradient is sum over tokens of the three projections' input gradients;
    # the keys' one sums to zero over the tokens (softmax's shift invariance through QK^T):
    # the proof closes (the Transformer block's one full proof) and its term goes
    from benchmarks import sys_tensorad, workloads

    w = workloads.BY_NAME["transformer_block"]
    ints = w.params.get("ints", {})
    p = {k: ta.placeholder(s, "int32" if k in ints else "float32", k)
         for k, s in w.input_shapes(tiny=True).items()}
    Y = sys_tensorad.topi_forward(w.kind, p, w.params)
    (db1,) = ta.JacobianRecursive(Y, [p["b1"]], ta.placeholder(Y.shape, name="H"))
    body = db1.op.body[0]
    assert body.op is Op.REDUCE
    assert sum(n.op is Op.READ for n in walk(body.src[1])) == 2  # (3 before: Q's, K's and V's)
