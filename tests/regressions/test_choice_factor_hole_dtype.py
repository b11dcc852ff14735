"""A select tree whose branches share a costly context around holes of another dtype
(``codegen/passes/choice_factoring.py``).  Two
branches ``tanh(float32(g[...]))`` share ``tanh(cast(.))`` around int32 reads; the tree of
choices over the holes kept the float32 dtype of the tree it was copied from, and ``build``
emitted ``fmul i32`` (an LLVM IR parsing error).  The tree of holes now has the holes' dtype."""

from __future__ import annotations

import numpy as np

import tensorad as ta


def test_choices_over_integer_holes_under_a_shared_tanh_build_and_match_evaluate():
    g = ta.placeholder((5,), "int32", name="g")
    t0 = ta.compute((4, 4), lambda i, j: ta.tanh(ta.cast("float32", g.take(g[j] * -1 + 1, mode="clip"))),
                    name="t0")
    r0, r1 = ta.reduce_axis((0, 2), name="r0"), ta.reduce_axis((0, 3), name="r1")
    t1 = ta.compute((), lambda: ta.prod(ta.if_then_else(
        (2 * r1 - r0) % 5 == 0, ta.cast("float32", g[(r0 + 1) % 5]),
        ta.select((r0 % 2 == 1) & (r1 <= 1), t0[(r0 + -2) % 4, r1 % 4],
                  t0.take((r0 + -2) % 4, g[r0], mode="clip"))),
        axis=[r0, r1], where=(r0 % 2 == 0) & (r1 <= 0)), name="t1")
    kernel = ta.build([t1], [g], num_threads=2, parallel_min_work=0)
    for seed in range(3):
        x = np.random.default_rng(seed).integers(-3, 4, 5).astype(np.int32)
        np.testing.assert_allclose(kernel(x), ta.evaluate([t1], {g: x})[0], rtol=1e-6)
