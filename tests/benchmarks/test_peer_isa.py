"""The benchmark holds the peers to tensorad's target's instruction set (``--peer-isa match``)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from benchmarks.threads import peer_isa_env, thread_env, with_peer_isa  # noqa: E402


def test_a_narrower_target_caps_every_peer_library():
    cap = peer_isa_env(256, True, 512)
    assert cap["ONEDNN_MAX_CPU_ISA"] == "AVX2" and cap["ATEN_CPU_CAPABILITY"] == "avx2"
    assert cap["MKL_ENABLE_INSTRUCTIONS"] == "AVX2" and cap["OPENBLAS_CORETYPE"] == "Haswell"
    assert cap["XLA_FLAGS"] == "--xla_cpu_max_isa=AVX2"
    assert peer_isa_env(256, False, 512)["ONEDNN_MAX_CPU_ISA"] == "AVX"
    assert peer_isa_env(128, False, 256)["ONEDNN_MAX_CPU_ISA"] == "SSE41"


def test_a_target_as_wide_as_the_host_caps_nothing():
    assert peer_isa_env(512, True, 512) == {}
    assert peer_isa_env(256, True, 256) == {}


def test_the_cap_joins_the_thread_flags_of_xla():
    base = thread_env(1, {"XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2 --foo"})
    env = with_peer_isa(base, peer_isa_env(256, True, 512))
    flags = env["XLA_FLAGS"].split()
    assert "--xla_cpu_multi_thread_eigen=false" in flags and "--foo" in flags
    assert [f for f in flags if f.startswith("--xla_cpu_max_isa")] == ["--xla_cpu_max_isa=AVX2"]
    assert env["OMP_NUM_THREADS"] == "1" and env["ONEDNN_MAX_CPU_ISA"] == "AVX2"


def test_pytorch_obeys_the_cap():
    """The variable the cap sets is one PyTorch reads: its dispatch reports AVX2 under it."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = with_peer_isa(dict(os.environ), peer_isa_env(256, True, 512))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() in ("AVX2", "DEFAULT")  # DEFAULT: a CPU without AVX2 at all
