"""Fixtures for the autodiff tests: reverse-mode gradients against central finite differences.

``check_reverse(output, inputs, head=..., data=...)`` feeds every placeholder random float64
data (``data`` may fix some), evaluates ``jacobian_recursive`` (without the optimizer: the raw
head-product form must be correct on its own) and compares it with ``numeric_grad`` of
``ta.evaluate`` of the forward program.  It returns the analytic arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.autodiff import jacobian_recursive
from tensorad.ir.rewrite import placeholders


def _check(output, inputs, numeric_grad, rng, head="random", data=None, override=None,
           atol=1e-7, rtol=1e-6):
    data = dict(data or {})
    for p in placeholders([output] + list(inputs)):
        if p not in data:
            data[p] = rng.uniform(-1.0, 1.0, size=p.shape)
    if head == "random":
        head = ta.placeholder(output.shape, output.dtype, name="H")
    if head is not None and head not in data:
        data[head] = rng.uniform(-1.0, 1.0, size=head.shape)
    grads = jacobian_recursive(output, inputs, head=head, override=override)
    for g, x in zip(grads, inputs):
        assert g.dtype == x.dtype
    analytic = ta.evaluate(grads, data)

    def forward(*arrays):
        return ta.evaluate(output, {**data, **dict(zip(inputs, arrays))})

    numeric = numeric_grad(forward, [data[x] for x in inputs],
                           head=None if head is None else data[head])
    for a, n, x in zip(analytic, numeric, inputs):
        assert a.shape == n.shape, (x.name, a.shape, n.shape)
        np.testing.assert_allclose(a, n, atol=atol, rtol=rtol, err_msg=f"gradient by {x.name}")
    return analytic


@pytest.fixture
def check_reverse(numeric_grad, rng):
    def run(output, inputs, **kw):
        return _check(output, inputs, numeric_grad, rng, **kw)
    return run
