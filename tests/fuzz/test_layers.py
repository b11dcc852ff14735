"""The layer generator (fuzz/layers.py): ordinary layers at moderate shapes, each checked
against PyTorch's float64 forward and autograd -- an oracle tensorad did not compute."""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from fuzz.checks import FINITE_DIFFERENCES, run_checks  # noqa: E402
from fuzz.layers import KINDS, generate_layer  # noqa: E402
from fuzz.runner import job_for  # noqa: E402

pytest.importorskip("torch", reason="the reference is PyTorch, an optional extra; make test requires it")


def _kind(prog) -> str:
    return prog.defs[-1].body.render()


def test_every_kind_is_drawn_and_checked_against_torch_not_finite_differences():
    progs = [generate_layer(s) for s in range(300)]
    calls = {"conv2d": "conv2d(", "conv2d_transpose": "conv2d_transpose(", "pool": "pool(",
             "dense": "dense(", "matmul": "matmul(", "batch_norm": "batch_norm(", "layer_norm": "layer_norm(",
             "group_norm": "group_norm(", "softmax": "softmax(", "attention": "attention(",
             "upsampling": "upsampling(", "gelu": "gelu(", "embedding": "embedding(", "rms_norm": "rms_norm(",
             "instance_norm": "instance_norm(", "silu": "silu(", "residual_norm": "layer_norm(X + R"}
    assert set(calls) == set(KINDS)
    for kind, call in calls.items():
        assert any(call in _kind(p) for p in progs), kind
    job = job_for(progs[0], 0)
    assert "torch" in job["checks"] and not {*FINITE_DIFFERENCES, "optimizer"} & set(job["checks"])
    assert generate_layer(7) == generate_layer(7) and generate_layer(7).torch == generate_layer(7).torch


@pytest.mark.parametrize("seed", [0, 3, 9])
def test_layers_agree_with_torch(seed):
    results = run_checks({**job_for(generate_layer(seed), seed, ["forward", "torch"]), "triage": False})
    assert [r["status"] for r in results] == ["ok", "ok"], results


def test_a_wrong_reference_is_a_mismatch():
    """The check can fail: a reference 0.1% off in the forward, or in the gradient only."""
    prog = generate_layer(3)
    for wrong in ("return 1.001 * (", "return 1e-3 * (X - X.detach()).sum() + ("):
        bad = replace(prog, torch=prog.torch.replace("return ", wrong).rstrip() + ")\n")
        (result,) = run_checks({**job_for(bad, 3, ["torch"]), "triage": False})
        assert result["status"] == "fail" and "PyTorch" in result["message"], (wrong, result)


def test_the_split_check_of_a_layer_evaluates_its_optimized_gradient(monkeypatch):
    # a 5x5 convolution: evaluating the unoptimized gradient, which sums over every
    # input element at each point, took over 600 s (a 17 GiB mask); PyTorch's
    # autograd is a layer's oracle, the split check compares residuals
    import tensorad as ta

    asked = []
    real = ta.JacobianRecursive

    def spy(*args, **kwargs):
        asked.append(kwargs.get("optimize", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(ta, "JacobianRecursive", spy)
    results = run_checks({**job_for(generate_layer(3542), 3542, ["split"]), "triage": False})
    assert {r["status"] for r in results} == {"ok"}, results
    assert asked and all(asked)
