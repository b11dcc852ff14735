"""Minimal programs from the differential fuzzer (fuzz/) whose defects were fixed here.

Each test states the program the fuzzer shrank to, and checks it against an oracle written in
the test (NumPy loops).
"""

from __future__ import annotations

import numpy as np

import tensorad as ta
from tensorad.ir.expr import var
from tensorad.poly.domain import IndexSet


def test_gradient_whose_window_has_a_quasi_affine_lower_bound(rng):
    """Defining the gradient crashed in ``IndexSet.lower_bounds`` (isl: ``isl_pw_aff_max_val
    failed: expecting integer affine expression``): the extent of a candidate window
    ``v - lo`` with a floor division in ``lo`` is now maximized over a set."""
    x1 = ta.placeholder((1,), "float64", name="x1")
    t1 = ta.compute((3, 3), lambda i0, i1: x1[0], name="t1")
    t3 = ta.compute((7, 2), lambda i0, i1: ta.if_then_else(
        (2 * i0 - i1) % 5 == 0, 0.0, ta.if_then_else(i0 + 1 < 3, t1[(-1 - i0 * 2) % 3, i0 + 1], -1.0)),
        name="t3")
    H = ta.placeholder((7, 2), "float64", name="H")
    (g,) = ta.gradient(t3, [x1], H)
    h = rng.standard_normal((7, 2))
    want = sum(h[i0, i1] for i0 in range(7) for i1 in range(2) if (2 * i0 - i1) % 5 != 0 and i0 + 1 < 3)
    np.testing.assert_allclose(ta.evaluate([g], {x1: np.ones(1), H: h})[0], [want], rtol=1e-12)
    np.testing.assert_allclose(ta.build([g], [x1, H])(np.ones(1), h), [want], rtol=1e-12)


def test_solving_for_a_variable_of_an_empty_set():
    """``IndexSet.solve`` raised ``ValueError: a piecewise function without pieces``."""
    v0, v1 = var("v0", 0, 3), var("v1", 0, 3)
    assert IndexSet.from_conditions([v0, v1], [v0 < v0]).solve(v0) is None
