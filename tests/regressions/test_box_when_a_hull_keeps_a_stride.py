"""``build`` raised ``IslAstError`` ("isl built loops that do not
scan the statements' domains: an internal error") on the Jacobian of a gather through three
floor/modulo indices (``ta.gradient`` without a head). The optimizer's domain holds a ``mod 30``
condition and the equality ``10 d = 50 - 5 a - 2 b - 15 c``; the loops merge ``a`` and ``b``
into one (``16 a + b``). isl's loops over the exact domain missed points, and so did those over
its division-free hull: the hull keeps the equality, a stride of its own. The last way out now
scans each statement's bounding box with the exact domain tested inside
(:func:`tensorad.codegen.loops.ast_check.guarded_hulls`). Oracle: the Jacobian written in NumPy from
the index formulas."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


@pytest.mark.parametrize("threads", [1, 2])
def test_jacobian_of_a_triple_floor_modulo_gather_builds_and_is_right(threads):
    x0 = ta.placeholder((16, 2, 3), "float64", name="x0")
    t1 = ta.compute((4,), lambda i: x0[(i + -3) // 3 % 16, (2 - i) % 2, (i + 2) % 3], name="t1")
    (g,) = ta.gradient(t1, [x0])  # (no head: the Jacobian, optimized)
    J = ta.Jacobian(t1, x0, optimize=False)
    x = np.random.default_rng(0).uniform(-1, 1, (16, 2, 3))
    jac = np.zeros((4, 16, 2, 3))
    for i in range(4):  # Python's // and % floor, as the language's do
        jac[i, (i - 3) // 3 % 16, (2 - i) % 2, (i + 2) % 3] = 1.0
    for tensors in ([g], [J], [g, J]):
        got = ta.build(tensors, [x0], num_threads=threads)(x)
        for value in (got if isinstance(got, (list, tuple)) else [got]):
            np.testing.assert_array_equal(value, jac)
