"""Derivative forms in the fuzzer's checks: on a third of the seeds the reverse
gradient replaces one tensor's derivative by an ``override`` rule (that tensor's own gradient),
and on a quarter the ``jvp`` check also differentiates with two heads at once (a head of shape
``(2,) + out.shape``).  Both pass on a program, and a wrong rule fails the ``reverse`` check
(the override is the gradient the check tests)."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tensorad as ta  # noqa: E402
from fuzz import checks  # noqa: E402

SOURCE = """import tensorad as ta
DT = 'float64'
x0 = ta.placeholder((3, 4), DT, name='x0')
r0 = ta.reduce_axis((0, 4), name='r0')
t0 = ta.compute((3, 4), lambda i, j: ta.tanh(x0[i, j]) * 2.0 + x0[i, (j + 1) % 4], name='t0')
t1 = ta.compute((3,), lambda i: ta.sum(t0[i, r0] * x0[i, r0], axis=[r0]), name='t1')
INPUTS = [x0]
TENSORS = [t0, t1]
OUT = t1
"""
SEED = 5  # 5 % 3 == 2: an override; 5 % 4 == 1: two heads


def _run(names):
    return checks.run_checks({"source": SOURCE, "source64": SOURCE, "dtype": "float64", "options": {},
                              "data": "smooth", "seed": SEED, "safe": True, "checks": list(names),
                              "all_outputs": False, "triage": False})


def test_override_and_two_heads_pass(monkeypatch):
    seen = []
    real_compare, real_override = checks.compare, checks.Case._override

    def compare(what, *args, **kwargs):
        seen.append(what)
        return real_compare(what, *args, **kwargs)

    def override(self, ns):
        rules = real_override(self, ns)
        seen.extend(t.name for t in rules)
        return rules

    monkeypatch.setattr(checks, "compare", compare)
    monkeypatch.setattr(checks.Case, "_override", override)
    assert _run(["reverse", "jvp"]) == [{"check": c, "status": "ok"} for c in ("reverse", "jvp")]
    assert "t0" in seen  # the overridden tensor
    assert sum("a head with a prefix" in w for w in seen) == 2


def test_a_wrong_override_fails_the_reverse_check(monkeypatch):
    real = checks.Case._override

    def doubled(self, ns):
        (t, rule), = real(self, ns).items()
        return {t: lambda out, x, head: ta.topi.multiply(rule(out, x, head), 2.0)}

    monkeypatch.setattr(checks.Case, "_override", doubled)
    (result,) = _run(["reverse"])
    assert result["status"] == "fail" and "finite differences" in result["message"], result
