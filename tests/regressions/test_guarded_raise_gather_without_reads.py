"""A guarded gather of constants raised where its guard fails.

``if_then_else(g, cast(k0.take(k0[i] * 3 - 1, mode='raise')), 0)`` with ``k0`` an index-only
tensor the lowering inlines: the branch is arithmetic on constants, reads no memory, and the
emitter kept lazy only the branches that read memory -- so it became a ``select``, its gather
test ran at every point, and the kernel raised ``IndexError`` (index 11 of an axis of 1) where
``g`` is false everywhere and ``ta.evaluate`` gives values (default options, on an AMD
EPYC with AVX-512, in the checks reverse, split, jacobian: the forward of the program's output
alone).  A branch that tests a gather index at run time now stays behind
its condition.  Oracles: ``ta.evaluate`` and NumPy; and where the guard holds, the same
``IndexError`` from both.
"""

import numpy as np
import pytest

import tensorad as ta


def _program(always_false: bool):
    X = ta.placeholder((9, 7), "float64", "X")
    K = ta.compute((1,), lambda i: ta.cast("int32", i * -1 - 4) * ta.cast("int32", i * 0 - 1), name="K")
    at = K[0] * 3 + -1  # 11: outside K's one element

    def guard(i):
        keep = (at >= 0) & (at < 1)
        return ((i + 3 >= 0) & (i + 3 < 1) & keep) if always_false else (i == 0)

    Y = ta.compute((9, 7), lambda i, j: X[i, j] + ta.if_then_else(
        guard(i), ta.cast("float64", K.take(at, mode="raise")), 0.0), name="Y")
    return X, Y


@pytest.mark.parametrize("options", [{}, {"fastmath": False}, {"num_threads": 1}, {"opt_level": 0}])
def test_a_guard_that_never_holds_keeps_the_gather_from_running(options):
    X, Y = _program(always_false=True)
    x = np.random.default_rng(0).standard_normal((9, 7))
    got = ta.build([Y], [X], **options)(x)
    np.testing.assert_array_equal(got, x)
    np.testing.assert_array_equal(ta.evaluate(Y, {X: x}), x)


def test_a_guard_that_holds_still_raises():
    X, Y = _program(always_false=False)
    x = np.zeros((9, 7))
    with pytest.raises(IndexError, match="gather index out of range"):
        ta.evaluate(Y, {X: x})
    with pytest.raises(IndexError, match="gather index out of range"):
        ta.build([Y], [X])(x)
