"""The LLVM value table: every op emitted and compared with NumPy at random points.

One kernel per dtype computes every op of ``llvm_expr``'s value table on arrays that
hypothesis fills with exact zeros, negative values, zero exponents, infinities and NaN; the
oracle is a NumPy formula per output, written here.  A coverage trace (the table's rules
wrapped in counters while the kernel is emitted) fails when an op of the table was never
emitted.  Strict IEEE mode (``fastmath=False``): fast-math contracts are checked elsewhere.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorad.codegen.llvm import expr as llvm_expr

import tensorad as ta
from tensorad.ir import Op

N = 24
SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, -2.5, 0.5, 3.0, 1e-3, np.inf, -np.inf, np.nan]
FINITE = [0.0, 1.0, -1.0, 2.0, -2.5, 0.5, 3.0, 7.75, -6.5]
INTS = [0, 1, -1, 2, -3, 5, 7, -8]


def _programs(dtype: str):
    """Placeholders and ``{name: (tensor, oracle)}`` with one output per op of the table."""
    A = ta.placeholder((N,), dtype, name="A")
    B = ta.placeholder((N,), dtype, name="B")
    C = ta.placeholder((N,), dtype, name="C")  # finite: float -> int casts
    K = ta.placeholder((N,), "int32", name="K")
    J = ta.placeholder((N,), "int32", name="J")

    def f(name, fn, oracle):
        return name, (ta.compute((N,), fn, name=name), oracle)

    one, zero = ta.const(1.0, dtype), ta.const(0.0, dtype)
    out = dict([
        f("add", lambda p: A[p] + B[p], lambda a, b, c, i, j: a + b),
        f("sub", lambda p: A[p] - B[p], lambda a, b, c, i, j: a - b),
        f("mul", lambda p: A[p] * B[p], lambda a, b, c, i, j: a * b),
        f("div", lambda p: A[p] / B[p], lambda a, b, c, i, j: a / b),
        f("pow", lambda p: ta.power(A[p], B[p]), lambda a, b, c, i, j: np.power(a, b)),
        f("fmax", lambda p: ta.maximum(A[p], B[p]), lambda a, b, c, i, j: np.maximum(a, b)),
        f("fmin", lambda p: ta.minimum(A[p], B[p]), lambda a, b, c, i, j: np.minimum(a, b)),
        f("ffloordiv", lambda p: A[p] // C[p], lambda a, b, c, i, j: np.floor_divide(a, c)),  # NumPy's
        f("fmod", lambda p: A[p] % C[p], lambda a, b, c, i, j: np.mod(a, c)),
        f("neg", lambda p: -A[p], lambda a, b, c, i, j: -a),
        f("exp", lambda p: ta.exp(A[p]), lambda a, b, c, i, j: np.exp(a)),
        f("log", lambda p: ta.log(A[p]), lambda a, b, c, i, j: np.log(a)),
        f("sqrt", lambda p: ta.sqrt(A[p]), lambda a, b, c, i, j: np.sqrt(a)),
        f("tanh", lambda p: ta.tanh(A[p]), lambda a, b, c, i, j: np.tanh(a)),
        f("sigmoid", lambda p: ta.sigmoid(C[p]), lambda a, b, c, i, j: 1 / (1 + np.exp(-c))),
        f("abs", lambda p: ta.abs(A[p]), lambda a, b, c, i, j: np.abs(a)),
        f("sin", lambda p: ta.sin(C[p]), lambda a, b, c, i, j: np.sin(c)),
        f("cos", lambda p: ta.cos(C[p]), lambda a, b, c, i, j: np.cos(c)),
        f("erf", lambda p: ta.erf(A[p]), lambda a, b, c, i, j: np.vectorize(math.erf)(a)),
        f("lt", lambda p: ta.select(A[p] < B[p], one, zero), lambda a, b, c, i, j: 1.0 * (a < b)),
        f("le", lambda p: ta.select(A[p] <= B[p], one, zero), lambda a, b, c, i, j: 1.0 * (a <= b)),
        f("gt", lambda p: ta.select(A[p] > B[p], one, zero), lambda a, b, c, i, j: 1.0 * (a > b)),
        f("ge", lambda p: ta.select(A[p] >= B[p], one, zero), lambda a, b, c, i, j: 1.0 * (a >= b)),
        f("eq", lambda p: ta.select(A[p] == B[p], one, zero), lambda a, b, c, i, j: 1.0 * (a == b)),
        f("ne", lambda p: ta.select(A[p] != B[p], one, zero), lambda a, b, c, i, j: 1.0 * (a != b)),
        f("logic", lambda p: ta.cast(dtype, ((A[p] < B[p]) & ~(K[p] > J[p])) | (C[p] == 0.0)),
          lambda a, b, c, i, j: 1.0 * (((a < b) & ~(i > j)) | (c == 0))),
        f("ite", lambda p: ta.if_then_else(K[p] > 0, A[(p + 1) % N], B[p]),
          lambda a, b, c, i, j: np.where(i > 0, np.roll(a, -1), b)),
        f("index_value", lambda p: ta.cast(dtype, p * 3 - 7) * C[p],
          lambda a, b, c, i, j: (np.arange(N) * 3 - 7) * c),
        f("to_int_and_back", lambda p: ta.cast(dtype, ta.cast("int32", C[p])),
          lambda a, b, c, i, j: np.trunc(c)),
        f("bool_cast", lambda p: ta.cast(dtype, ta.cast("bool", C[p])), lambda a, b, c, i, j: 1.0 * (c != 0)),
        f("other_float", lambda p: ta.cast(dtype, ta.cast("float64" if dtype == "float32" else "float32",
                                                          C[p])), lambda a, b, c, i, j: c),
        f("int_ops", lambda p: ta.cast(dtype, (K[p] + J[p]) * 3 - K[p] * J[p] + ta.abs(-J[p])),
          lambda a, b, c, i, j: 1.0 * ((i + j) * 3 - i * j + np.abs(j))),
        f("int_div", lambda p: ta.cast(dtype, K[p] // J[p] + (K[p] % J[p]) * 10),
          lambda a, b, c, i, j: 1.0 * np.where(j == 0, 0, _floordiv(i, j) + _mod(i, j) * 10)),
        f("int_div_const", lambda p: ta.cast(dtype, K[p] // 3 + (K[p] % 4) * 10 + (K[p] // -2)),
          lambda a, b, c, i, j: 1.0 * (i // 3 + (i % 4) * 10 + i // -2)),
        f("int_minmax", lambda p: ta.cast(dtype, ta.maximum(K[p], J[p]) - ta.minimum(K[p], J[p]) * 2),
          lambda a, b, c, i, j: 1.0 * (np.maximum(i, j) - np.minimum(i, j) * 2)),
        # gathers: K's values (negative and past N) clipped and wrapped, as np.take does
        f("gather", lambda p: A.take(K[p] * 5, mode="clip") + C.take(J[p] * 7 - 3, mode="wrap"),
          lambda a, b, c, i, j: np.take(a, i * 5, mode="clip") + np.take(c, j * 7 - 3, mode="wrap")),
    ])
    return [A, B, C, K, J], out


def _floordiv(i, j):
    with np.errstate(all="ignore"):
        return np.where(j == 0, 0, i // np.where(j == 0, 1, j))


def _mod(i, j):
    with np.errstate(all="ignore"):
        return np.where(j == 0, 0, i % np.where(j == 0, 1, j))


def _arrays(values):
    return st.lists(st.sampled_from(values), min_size=N, max_size=N).map(np.array)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_value_rule_matches_numpy_at_random_points(dtype, monkeypatch):
    trace: Counter = Counter()
    table = llvm_expr._value_rules

    def traced(em):
        rules = table(em)

        def wrap(op, fn):
            def run(*args):
                trace[op] += 1
                return fn(*args)
            return run
        return {op: wrap(op, fn) for op, fn in rules.items()}

    monkeypatch.setattr(llvm_expr, "_value_rules", traced)
    inputs, programs = _programs(dtype)
    names = list(programs)
    kernel = ta.build([programs[n][0] for n in names], inputs, fastmath=False, cache=False,
                      num_threads=1, name=f"values_{dtype}")
    monkeypatch.undo()
    missing = [op for op in table_ops() if trace[op] == 0]
    assert missing == [], f"value rules never emitted: {missing}"
    rtol = 1e-12 if dtype == "float64" else 2e-6

    @settings(max_examples=60, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(_arrays(SPECIAL), _arrays(SPECIAL), _arrays(FINITE), _arrays(INTS), _arrays(INTS))
    def check(a, b, c, i, j):
        a, b, c = a.astype(dtype), b.astype(dtype), c.astype(dtype)
        i, j = i.astype("int32"), j.astype("int32")
        got = kernel(a, b, c, i, j)
        for name, g in zip(names, got):
            with np.errstate(all="ignore"):
                want = np.asarray(programs[name][1](a, b, c, i, j)).astype(dtype)
            np.testing.assert_allclose(g, want, rtol=rtol, atol=0, err_msg=name)

    check()


def table_ops() -> list[Op]:
    """The ops the value table has entries for (every op but the loop-level ones)."""
    return [op for op in Op if op not in (Op.REDUCE, Op.IF_THEN_ELSE)]
