"""The fuzzer's ``split`` check: ``ta.function``'s forward and backward built with different
options, the backward run on the forward's residuals.  It passes on a program whose backward
reads saved reductions (a max's winner and a sum), under each checkpoint policy, and it fails
when the residuals it is given are not the forward's (the check can fail)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tensorad.training.function as vjp  # noqa: E402
from fuzz.checks import SPLIT_POLICIES, run_checks, split_options, split_policy  # noqa: E402
from fuzz.options import TARGETS  # noqa: E402

SOURCE = """import tensorad as ta
DT = 'float64'
x0 = ta.placeholder((3, 4), DT, name='x0')
r0 = ta.reduce_axis((0, 4), name='r0')
r1 = ta.reduce_axis((0, 4), name='r1')
t0 = ta.compute((3,), lambda i: ta.max(ta.exp(x0[i, r0]) * x0[i, r0], axis=[r0]), name='t0')
t1 = ta.compute((3,), lambda i: ta.sum(ta.sin(x0[i, r1]) * t0[i], axis=[r1]), name='t1')
INPUTS = [x0]
TENSORS = [t0, t1]
OUT = t1
"""


def _job(seed: int, options: dict) -> dict:
    return {"source": SOURCE, "source64": SOURCE, "dtype": "float64", "options": options,
            "data": "smooth", "seed": seed, "safe": True, "checks": ["split"], "all_outputs": False,
            "triage": False}


@pytest.mark.parametrize("seed", range(len(SPLIT_POLICIES) + 1))  # one per named policy, a function
def test_split_check_passes_under_each_policy(seed):
    assert callable(split_policy(seed)) == (seed == len(SPLIT_POLICIES))
    (result,) = run_checks(_job(seed, {"fastmath": True}))
    assert result == {"check": "split", "status": "ok"}, result


def test_backward_options_differ_from_the_forward_options():
    for seed in range(20):
        for fwd in ({}, {"fastmath": False, "target": TARGETS[2]}):
            back = split_options(fwd, seed)
            assert back["fastmath"] != fwd.get("fastmath", True)
            assert back["target"] != fwd.get("target", TARGETS[0])
            assert split_options(fwd, seed) == back  # deterministic per seed


def test_split_check_fails_on_residuals_that_are_not_the_forward_ones(monkeypatch):
    real = vjp.Function.forward

    def tampered(self, *arrays):
        out, residuals = real(self, *arrays)
        assert residuals, "the default policy saves the reductions"
        return out, tuple(np.asarray(r) * 1.5 if np.asarray(r).dtype.kind == "f" else r for r in residuals)

    monkeypatch.setattr(vjp.Function, "forward", tampered)
    (result,) = run_checks(_job(0, {}))
    assert result["status"] == "fail" and "backward built with" in result["message"], result
