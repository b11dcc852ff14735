"""``tools/gemm_grid.py``: the grids it times and the products it builds.  The tests check each layout's
kernel against NumPy's float64 product and that the code it times alone writes the same output; they
never time."""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest

import tensorad as ta

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("gemm_grid", os.path.join(ROOT, "tools", "gemm_grid.py"))
gg = sys.modules.setdefault("gemm_grid", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(gg)


def test_grids_cover_the_rows_layouts_and_model_products():
    skinny = gg.shapes("skinny")
    assert {m for m, *_ in skinny} == set(gg.ROWS)
    assert {(m, n, k) for m, n, k, lay in skinny if lay != "nn"} == set(gg.SKINNY)
    models = gg.shapes("models")
    assert {lay for *_, lay in models} == {"nn", "tn", "nt"}
    assert len(models) == 3 * len(set(gg.MODELS))
    with pytest.raises(SystemExit):
        gg.shapes("nonesuch")


@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
def test_each_layout_is_the_product_and_its_code_alone_writes_it(layout, rng):
    m, n, k = 5, 19, 7  # (plain loops: the layouts' reads, not the micro-kernel, are under test here)
    kern, a_shape, b_shape = gg.tensorad_kernel(ta, m, n, k, layout, "llvm", 1)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = (a64.T if layout == "tn" else a64) @ (b64.T if layout == "nt" else b64)
    np.testing.assert_allclose(kern(a, b), want, rtol=1e-5, atol=1e-5)
    run, out = gg.code_alone(kern, [a, b])
    out[...] = 0
    run()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
