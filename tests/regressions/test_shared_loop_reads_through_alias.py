"""A wrong Jacobian with default options.

Consecutive elementwise members of a fused nest share their inner loops when each reads the
earlier ones only at its own point (:func:`tensorad.codegen.loops.fused_nest.shared_positions`).  The
Jacobian of ``t1[i0, i1, i2] = tanh(3) / (|T0[i2 - 3]| + 1)`` with ``T0 = x0 - mean(x0)``
computes ``subtract.grad`` through a hoisting plan -- a rewritten op that writes the original's
tensor -- and ``x0.grad`` reads that tensor at ``[.., i2, i2 - 3]``, another point of the
shared ``j`` loop, not yet written there: 525 of 2,800 elements were garbage.  The check
compared the read's op with the members' own ops; it now follows the plan's aliases, as the
grouping does (``group._members``).  Oracle: the Jacobian written out in NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


def _jacobian_numpy(x: np.ndarray) -> np.ndarray:
    n = x.size
    t = x - x.mean()
    out = np.zeros((5, 5, 16, n))
    for i2 in range(3, 3 + n):
        m = i2 - 3
        slope = -np.tanh(3.0) * np.sign(t[m]) / (abs(t[m]) + 1.0) ** 2  # d/dT0[m]
        out[:, :, i2, :] = slope * (np.eye(n)[m] - 1.0 / n)
    return out


@pytest.mark.parametrize("opts", [{}, {"fastmath": False, "vector_width": 16}, {"num_threads": 1}])
def test_member_reading_an_aliased_member_elsewhere_keeps_its_loops(opts):
    x0 = ta.placeholder((7,), "float64", name="x0")
    T0 = ta.topi.subtract(x0, ta.topi.mean(x0, axis=0, keepdims=True))
    t1 = ta.compute((5, 5, 16), lambda i0, i1, i2: ta.tanh(ta.const(3.0, "float64")) / (
        ta.abs(ta.if_then_else((i2 - 3 >= 0) & (i2 - 3 < 7), T0[i2 - 3], -1.0)) + 1.0), name="t1")
    (J,) = ta.JacobianRecursive(t1, [x0])
    x = np.random.default_rng(458345).uniform(-1, 1, 7)
    np.testing.assert_allclose(ta.build([J], [x0], **opts)(x), _jacobian_numpy(x), rtol=1e-12, atol=1e-12)
