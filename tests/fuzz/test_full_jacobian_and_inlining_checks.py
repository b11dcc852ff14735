"""The fuzzer's checks of full Jacobians (``ta.Jacobian``, ``ta.gradient`` without a head) against
finite differences, and ``ta.InlineNonReductions`` in the optimizer check -- each passes on a
right answer and fails on a wrong one."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tensorad as ta  # noqa: E402
from fuzz import checks  # noqa: E402

PROGRAM = """import tensorad as ta
DT = 'float64'
x0 = ta.placeholder((3,), DT, name='x0')
t0 = ta.compute((3,), lambda i: ta.tanh(x0[i]) * 2.0, name='t0')
r0 = ta.reduce_axis((0, 3), name='r0')
t1 = ta.compute((2,), lambda i: ta.sum(t0[r0] * x0[(r0 + i) % 3], axis=r0), name='t1')
INPUTS = [x0]
TENSORS = [t0, t1]
OUT = t1
"""


def _run(check: str) -> dict:
    job = {"source": PROGRAM, "source64": PROGRAM, "dtype": "float64", "options": {}, "data": "smooth",
           "seed": 4, "safe": True, "checks": [check], "all_outputs": True, "triage": False}
    (result,) = checks.run_checks(job)
    return result


def test_the_jacobian_check_compares_every_element(monkeypatch):
    assert _run("jacobian") == {"check": "jacobian", "status": "ok"}
    real = ta.Jacobian

    def off(out, x, optimize=True):  # one element wrong
        J = real(out, x, optimize)
        return ta.compute(J.shape, lambda i, j: J[i, j] + ta.select((i == 1) & (j == 2), 1e-3, 0.0), name="J")

    monkeypatch.setattr(ta, "Jacobian", off)
    result = _run("jacobian")
    assert result["status"] == "fail" and "Jacobian(optimize=True) wrt x0" in result["message"], result


def test_the_optimizer_check_compares_inlined_tensors(monkeypatch):
    assert _run("optimizer") == {"check": "optimizer", "status": "ok"}
    real = ta.InlineNonReductions
    monkeypatch.setattr(ta, "InlineNonReductions", lambda t, ts: real(t, ts) * 1.001 if ts else t)
    result = _run("optimizer")
    assert result["status"] == "fail" and "inlined" in result["message"], result
