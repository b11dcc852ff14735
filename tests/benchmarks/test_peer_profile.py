"""``tools/peer_profile.py``: what the peers run for a workload.  These tests count what it lists -- the
PyTorch operators of the MLP classifier's forward and the computations XLA compiled it into -- never
its times."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

pytest.importorskip("torch", reason="an optional extra; make test requires it")
pytest.importorskip("jax", reason="an optional extra; make test requires it")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("peer_profile", os.path.join(ROOT, "tools", "peer_profile.py"))
pp = sys.modules.setdefault("peer_profile", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(pp)


def test_peers_of_the_mlp_classifier():
    pp.sys_torch.setup(1)
    pp.sys_jax.setup(1)
    w = pp.workloads.BY_NAME["mlp_classifier"]
    torch_lines = pp.torch_shares(w, "forward", calls=2, top=50)
    # three dense layers: one addmm each per call
    assert any("aten::addmm  x3" in line for line in torch_lines)
    shares = [float(line.split("%")[0]) for line in torch_lines]
    assert sum(shares) <= 100.0 + 0.005 * len(shares) and shares == sorted(shares, reverse=True)  # (rounded)
    fused = pp.xla_fusions(w)
    # every layer's product has a computation of its own shape
    for shape in ("f32[128,512]", "f32[128,256]", "f32[128,10]"):
        assert any(shape in line for line in fused)
