"""isl's AST builder runs under an operation budget in a context of its own (one per thread)
(``codegen/loops/isl_ast._ast``); reading the finished AST counts operations in that context too.
The gradient of a product reduction under a ``where`` with ``%``, built
with two threads and the micro-kernel, spent the budget while its AST was read -- isl handed back
a NULL integer and ``build`` raised ``TypeError`` from islpy.  The budget now ends with the build."""

from __future__ import annotations

import numpy as np

import tensorad as ta

MYPROD = ta.comm_reducer(lambda x, y: x * y, lambda t: ta.const(1, t), name="myprod")


def test_gradient_whose_ast_is_read_after_the_budget_builds_and_is_right():
    x0 = ta.placeholder((2, 4), "float64", name="x0")
    r1 = ta.reduce_axis((-1, 4), name="r1")
    t2 = ta.compute((4,), lambda i: MYPROD(ta.sqrt(ta.abs(ta.abs(x0[1 - i % 2, (i + 1) % 4])) + 0.25),
                                           axis=[r1], where=~((i % 2 == 0) & (r1 <= 0))), name="t2")
    (g,) = ta.gradient(t2, [x0])
    kernel = ta.build([g], [x0], num_threads=2, parallel_min_work=0, fastmath=False, microkernel=True,
                      tile=(1, 16, 1, 4))
    x = np.random.default_rng(0).uniform(-1, 1, (2, 4))
    want = np.zeros((4, 2, 4))  # without a head: the Jacobian dt2[i] / dx0[a, b]
    for i in range(4):  # t2[i] = v ** c: c factors (5 for odd i, 3 for even: r1 in 1..3)
        a, b, c = 1 - i % 2, (i + 1) % 4, 5 if i % 2 else 3
        v = np.sqrt(abs(x[a, b]) + 0.25)
        want[i, a, b] = c * v ** (c - 1) * np.sign(x[a, b]) / (2 * v)
    np.testing.assert_allclose(kernel(x), want, rtol=1e-12)
