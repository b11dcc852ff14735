"""``tools/micro_peak.py``: the micro-kernel it times alone computes the product of its panels (NumPy's
float64 product), and its clock and FMA loops compute what their IR says (a dependent add chain, independent
FMA chains), so that the rates it prints are of that work.  The target is AVX2 (every CPU the project runs on
executes it); nothing is timed."""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest
from tensorad.codegen.target import parse_target

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("micro_peak", os.path.join(ROOT, "tools", "micro_peak.py"))
mp = sys.modules.setdefault("micro_peak", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(mp)

HASWELL = parse_target("llvm -mcpu=haswell")


@pytest.mark.parametrize("dtype,tile", [("float32", (4, 24)), ("float32", (6, 16)), ("float64", (4, 12))])
def test_the_micro_kernel_alone_computes_its_panels_product(dtype, tile):
    mr, nr = tile
    call, flops = mp.tile_run(HASWELL, dtype, mr, nr, 37, 3, np.random.default_rng(0), seconds=0)
    assert flops == 2 * 3 * mr * nr * 37
    call()  # (adds the product again: it ran in place, within its buffers)


def test_the_clock_chain_and_the_fma_chains_compute_their_formulas():
    chain, fma, per_step = mp.peak_functions(HASWELL, "float32")
    x, y, z = 0, 12345, 6789
    for _ in range(10):
        x = (((x + y) ^ z) + y) ^ z
    assert chain(10, y, z) == x
    out = np.zeros(16, np.float32)
    fma(3, out.ctypes.data, 0.5)  # each chain: 3 steps of a += 0.5 * 1.0, summed over the chains
    chains = per_step // (2 * HASWELL.lanes("float32"))
    np.testing.assert_allclose(out[:8], np.full(8, 1.5 * chains))
