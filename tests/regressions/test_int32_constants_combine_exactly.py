"""The optimized Jacobian of a gather whose index multiplies by
``2**30`` lost one of its three ones in the compiled kernel (``evaluate`` was right).  The loops
split ``i`` into digits (its ``% 2`` test), and isl fixed them at ``i = 2``, so the store there
tested ``2 == (1073741824 * ((2 * 1) + 0)) % 3`` -- int32 constants only, which the value
emitter multiplied in ``i32``: ``2**31`` wrapped to ``-2**31``, whose residue is 1.  ``i`` is
index arithmetic, exact (64 bits) in ``evaluate`` and in kernels; int32 constants alone are
data-like and wrap (a folded ``int32(-9) - int32(2147483647)``, ``test_int32_data_fold_wraps.py``).
So the value isl fixes a loop variable to is one ``int64`` constant, like the ``i64`` counter it
stands for (``codegen/loops/isl_ast._loop_value``).  Oracle: the Jacobian written in NumPy from the
index formulas (Python integers)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _program():
    x0 = ta.placeholder((16, 7, 3), "float64", name="x0")
    t0 = ta.compute((3,), lambda i: ta.if_then_else(
        i % 2 == 0, x0[i, (i * 100003 + 3) % 7, (i * 1073741824 + -3) % 3],
        x0[(i * 1073741825 + -3) % 16, i + 2, 2 - i % 3]), name="t0")
    return x0, t0


def _want() -> np.ndarray:
    jac = np.zeros((3, 16, 7, 3))
    for i in range(3):
        at = (i, (i * 100003 + 3) % 7, (i * 1073741824 - 3) % 3) if i % 2 == 0 else \
            ((i * 1073741825 - 3) % 16, i + 2, 2 - i % 3)
        jac[(i,) + at] = 1.0
    return jac


@pytest.mark.parametrize("optimize", [True, False])
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_jacobian_through_indices_past_int32(optimize, target):
    x0, t0 = _program()
    J = ta.Jacobian(t0, x0, optimize=optimize)
    x = np.random.default_rng(0).uniform(-1, 1, (16, 7, 3))
    np.testing.assert_array_equal(ta.build([J], [x0], target=target)(x), _want())
    np.testing.assert_array_equal(ta.evaluate([J], {x0: x})[0], _want())

