"""An operand that sums read through sparse windows stays inline.

``Y[i] = sum over (w, r) where (r + s) % 3 == w of A[i + w, r] exp(B[i + w, r])`` reads each point of the
operand ``A exp(B)`` two thirds of a time: its variables ``i, w, r`` span twice the operand's box, but the
``where`` keeps one ``w`` per ``r``.  The operand's expansion was judged from the variables' ranges alone,
so the operand was computed once as a tensor over its whole box (36 points) on top of the sums; a
product's gradient, whose four operands were each read at half of their points, did twice the forward's
work for it.  The expansion is now counted by isl where the ``where`` holds.  Oracles: a hand count of
the work and a NumPy formula."""

from __future__ import annotations

import numpy as np

import tensorad as ta
from fuzz.cheap import pinned

TARGET = pinned("llvm -mcpu=skylake-avx512")


def _program():
    A = ta.placeholder((6, 6), "float64", "A")
    B = ta.placeholder((6, 6), "float64", "B")

    def out(name, shift):
        w, r = ta.reduce_axis((0, 3), "w"), ta.reduce_axis((0, 6), "r")
        return ta.compute((4,), lambda i: ta.sum(A[i + w, r] * ta.exp(B[i + w, r]), axis=[w, r],
                                                 where=(r + shift) % 3 == w), name=name)

    return A, B, out("Y", 0), out("Z", 1)


def test_the_operand_is_not_materialized():
    A, B, Y, Z = _program()
    # two outputs of 4 points, each a sum of 6 terms (one w per r); no operand tensor of 6 x 6
    assert ta.lower([Y, Z], [A, B], target=TARGET).work == 2 * 4 * 6


def test_values():
    A, B, Y, Z = _program()
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((6, 6)), rng.standard_normal((6, 6))
    f = a * np.exp(b)
    want = [[sum(f[i + (r + s) % 3, r] for r in range(6)) for i in range(4)] for s in (0, 1)]
    got = ta.build([Y, Z], [A, B])(a, b)
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-13)
