"""The cheap-gradient check (``fuzz/cheap.py``): a gradient within four forwards plus a read of
the inputs and the head passes; one past it fails naming the program and the counts, unless
the allowance list names the program; an unrolled reduction is counted term by term."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tensorad as ta  # noqa: E402
from fuzz import cheap  # noqa: E402
from fuzz.checks import run_checks  # noqa: E402

DENSE = """import tensorad as ta
DT = 'float64'
x0 = ta.placeholder((6, 5), DT, name='x0')
w0 = ta.placeholder((4, 5), DT, name='w0')
t0 = ta.topi.nn.dense(x0, w0)
INPUTS = [x0, w0]
TENSORS = [t0]
OUT = t0
"""

# a custom combiner whose components combine with each other (an online softmax's running max and
# rescaled sum): its derivative is a Jacobian over the row per output, quadratic in the row's
# length (an allowed class)
ONLINE = """import tensorad as ta
DT = 'float64'
def _combine(x, y):
    m = ta.maximum(x[0], y[0])
    return m, x[1] * ta.exp(x[0] - m) + y[1] * ta.exp(y[0] - m)
ONLINE = ta.comm_reducer(_combine, lambda a, b: (ta.min_value(a), ta.const(0, b)), name="online")
x0 = ta.placeholder((4, 24), DT, name='x0')
r0 = ta.reduce_axis((0, 24), name='r0')
t0, t1 = ta.compute((4,), lambda i: ONLINE((x0[i, r0], x0[i, r0] * x0[i, r0]), axis=[r0]), name='t0')
INPUTS = [x0]
TENSORS = [t1]
OUT = t1
"""


def _job(source: str, seed: int) -> dict:
    return {"source": source, "source64": source, "dtype": "float64", "options": {}, "data": "unit",
            "seed": seed, "safe": True, "checks": ["cheap_gradient"], "all_outputs": True,
            "calling": "plain", "triage": False}


def test_a_dense_gradient_is_cheap():
    (result,) = run_checks(_job(DENSE, 7))
    assert result == {"check": "cheap_gradient", "status": "ok"}


def test_a_violation_fails_naming_the_program_unless_allowed(monkeypatch):
    (result,) = run_checks(_job(ONLINE, 10**9))
    assert result["status"] == "fail"
    message = result["message"]
    assert message.startswith(f"fuzz-{10**9}: gradient work ") and "x the forward" in message
    monkeypatch.setitem(cheap.ALLOWED, f"fuzz-{10**9}", "custom combiner")
    (result,) = run_checks(_job(ONLINE, 10**9))
    assert result["status"] == "ok"


def test_an_unrolled_convolution_counts_every_tap():
    """The stencil strategy runs a small convolution's 27 taps as one body execution; the
    invariant counts them as the plain loops do (2 x 4 x 9 x 7 outputs, 27 taps each)."""
    X, W = ta.placeholder((2, 3, 9, 7), "float32", "X"), ta.placeholder((4, 3, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, 1, 1)
    target = cheap.PINNED_TARGET
    assert ta.lower([Y], [X, W], target=target).work < 2 * 4 * 9 * 7 * 27
    assert cheap.plain_work([Y], [X, W], target=target) == 2 * 4 * 9 * 7 * 27
    assert cheap.gradient_cost(Y, [X, W], target=target).holds
