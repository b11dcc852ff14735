"""A fill fused into a nest that nest sharing renamed from another (``codegen/loops/fills.fuse_fill``
on a :class:`codegen.loops.shared_nests.RenamedNest`).  The Jacobian of a
masked sum of ``tanh`` with two threads copied the renamed nest with ``dataclasses.replace``,
which kept its class but not its source, and ``build`` raised ``AttributeError`` (``'NoneType'
object has no attribute 'body'``).  The fused nest is a plain nest of its own body now."""

from __future__ import annotations

import numpy as np

import tensorad as ta

MYSUM = ta.comm_reducer(lambda x, y: y + x, lambda t: ta.const(0, t), name="mysum")


def test_jacobian_whose_fill_joins_a_renamed_nest_builds_and_matches_evaluate():
    x0 = ta.placeholder((3, 4), "float64", name="x0")
    L0 = ta.topi.add(x0, x0 * 0.5)
    r0 = ta.reduce_axis((0, 2), name="r0")
    r1 = ta.reduce_axis((1, 18), name="r1")

    def body(i0, i1, i2):
        a = ta.if_then_else((i2 - 2 >= 0) & (i2 - 2 < 3), L0[i2 - 2, r0], 0.0)
        col = ta.cast("int32", ta.cast("int64", i0) * 3 % 4)
        b = ta.if_then_else((r1 - 2 >= 0) & (r1 - 2 < 3), x0[r1 - 2, col], -1.0)
        return MYSUM(ta.tanh(a ** 2 + b), axis=[r0, r1], where=~((r1 + i0) % 3 == 1))

    t0 = ta.compute((3, 2, 16), body, name="t0")
    (jac,) = ta.gradient(t0, [x0])
    kernel = ta.build([jac], [x0], parallel_min_work=0, opt_level=2, microkernel=True)
    x = np.random.default_rng(0).uniform(-1, 1, (3, 4))
    want = ta.evaluate([jac], {x0: x})[0]
    np.testing.assert_allclose(kernel(x), want, rtol=1e-12, atol=1e-14)
