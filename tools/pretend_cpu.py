"""A pytest plugin that runs the suite as if on another x86 CPU that this one can emulate:
``make test-as CPU=znver3`` (``PYTHONPATH=tools pytest -p pretend_cpu``, with
``TENSORAD_PRETEND_CPU=name,l2_kib``).

The host target becomes LLVM's CPU ``name`` with the host's features minus AVX-512, AMX and the
other Intel-only extensions (so an AMD EPYC Zen 3, ``znver3,512``, whose L2 is 512 KiB), and the
cache sizes the cost model blocks for are that CPU's.  The code it generates runs here (AVX2 and FMA
are a subset of this host's), so every test runs: a test that builds for an AVX-512 target and runs
the kernel fails as it would on that CPU.  Child processes a test starts see the real host."""

from __future__ import annotations

import os

import llvmlite.binding as llvm

_DROPPED = ("avx512", "amx", "avxvnni", "avxifma", "avxneconvert", "evex512", "serialize", "tsxldtrk",
            "waitpkg", "uintr", "enqcmd", "cldemote", "movdiri", "movdir64b", "ptwrite", "hreset", "kl",
            "widekl")


def pytest_configure(config) -> None:
    name, _, l2 = os.environ.get("TENSORAD_PRETEND_CPU", "znver3,512").partition(",")
    real = llvm.get_host_cpu_features

    def features():
        found = real()
        for k in list(found):
            if k.startswith(_DROPPED):
                found[k] = False
        return found

    llvm.get_host_cpu_name = lambda: name
    llvm.get_host_cpu_features = features
    from tensorad.codegen import target

    kib = int(l2 or 512) * 1024
    target.host_caches = lambda: (32 * 1024, kib, 32 * 1024 * 1024)
