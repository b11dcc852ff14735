"""``ta.value_and_grad`` of a loss over a size variable runs at its arrays' sizes.

``ta.function`` binds a symbolic program's sizes before differentiating it; ``ta.value_and_grad``
is its one-call form and binds them the same way.  Differentiating the unbound loss instead meets
a choice on the size (is the sum over the rows a sum over one row?) and raises
``SizeDecisionError``.  Oracle: NumPy formulas written here.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta


def test_value_and_grad_of_a_loss_over_a_size_variable_at_several_sizes():
    n = ta.size_var("n")
    x = ta.placeholder((n, 5), "float64", name="x")
    w = ta.placeholder((5,), "float64", name="w")
    r, c = ta.reduce_axis((0, n), name="r"), ta.reduce_axis((0, 5), name="c")
    loss = ta.compute((), lambda: ta.sum(ta.tanh(x[r, c] * w[c]), axis=[r, c]), name="loss")
    step = ta.value_and_grad(loss, [w])
    rng = np.random.default_rng(0)
    for rows in (1, 3, 40):
        xv, wv = rng.standard_normal((rows, 5)), rng.standard_normal(5)
        value, (gw,) = step(xv, wv)
        np.testing.assert_allclose(value, np.tanh(xv * wv).sum(), rtol=1e-12)
        np.testing.assert_allclose(gw, (xv / np.cosh(xv * wv) ** 2).sum(0), rtol=1e-12)
