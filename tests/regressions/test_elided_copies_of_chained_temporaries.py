"""Copy elision left a moved output reading an elided temporary.

``ta.function`` saves ``exp(x0 / 2)`` and ``(|exp(x0 / 2)| + 0.5) ** 1.5`` for a min's winner
test, as outputs ``exp.tie`` and ``power.tie`` that copy the temporaries ``exp`` and ``power``.
``codegen/passes/copy_elision.py`` makes each copying output compute its temporary -- ``power.tie`` took
``power``'s body, which reads ``exp`` -- and rerouted the reads of the elided temporaries in
every body but the moved ones: ``power.tie`` still read ``exp``, which no longer had a buffer,
and the forward's build raised ``KeyError`` (default options; passes with ``fuse=False``; seen
on an AMD EPYC with AVX-512, check ``split``).  The moved bodies are
rerouted too.  Oracles: NumPy formulas for the forward and the gradient, and ``fuse=False``.
"""

import numpy as np
import pytest

import tensorad as ta


def _program():
    x0 = ta.placeholder((), "float64", name="x0")
    U1 = ta.topi.exp(ta.topi.multiply(x0, 0.5))
    U2 = ta.topi.power(ta.topi.add(ta.topi.abs(U1), 0.5), 1.5)
    r0 = ta.reduce_axis((1, 3), name="r0")
    pick = ta.select(U2[()] < ta.cast("float64", r0 + -3), U2[()], U1[()])
    t3 = ta.compute((1, 3), lambda i0, i1: ta.min(pick, axis=[r0]), name="t3")
    return x0, t3


@pytest.mark.parametrize("fuse", [True, False])
def test_the_saved_values_build_and_the_gradient_is_right(fuse):
    x0, t3 = _program()
    f = ta.function(t3, [x0], wrt=[x0], fuse=fuse)
    x = np.float64(0.3)
    y, residuals = f.forward(x)
    u1 = np.exp(x / 2)
    np.testing.assert_allclose(y, np.full((1, 3), u1))  # U2 > 0 > r0 - 3: the min picks U1
    h = np.array([[1.0, 2.0, -0.5]])
    (gx,) = f.backward(residuals, h)
    np.testing.assert_allclose(gx, h.sum() * u1 / 2)
