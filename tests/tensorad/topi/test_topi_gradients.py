"""ta.gradient of every topi op against central finite differences (float64) of ta.evaluate.

Each case builds the op on float64 placeholders; the oracle perturbs the inputs and re-runs the
forward with ta.evaluate, so it shares nothing with autodiff.  Shapes are tiny on purpose.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

topi, nn = ta.topi, ta.topi.nn

# name: (input shapes, forward builder, input domain)  -- "pos" keeps inputs in [0.5, 1.5]
CASES = {
    "dense": ([(2, 3), (4, 3)], lambda X, W: nn.dense(X, W), None),
    "dense_bias": ([(2, 3), (4, 3), (4,)], lambda X, W, B: nn.dense(X, W, B), None),
    "conv2d": ([(1, 2, 4, 4), (2, 2, 3, 3)], lambda X, W: nn.conv2d(X, W, 1, 0), None),
    "conv2d_stride_pad": ([(1, 1, 5, 4), (2, 1, 3, 2)], lambda X, W: nn.conv2d(X, W, (2, 1), 1), None),
    "conv2d_dilation": ([(1, 1, 5, 5), (1, 1, 2, 2)], lambda X, W: nn.conv2d(X, W, 1, [1, 0, 0, 1], 2),
                        None),
    "avg_pool": ([(1, 2, 4, 4)], lambda X: nn.pool(X, 2, 2, 0, "avg"), None),
    "avg_pool_pad": ([(1, 1, 5, 4)], lambda X: nn.pool(X, 3, 2, [1, 1, 1, 0], "avg"), None),
    "avg_pool_valid_count": ([(1, 1, 5, 4)],
                             lambda X: nn.pool(X, 3, 2, [1, 1, 1, 0], "avg", count_include_pad=False),
                             None),
    "max_pool": ([(1, 2, 4, 4)], lambda X: nn.pool(X, 2, 2, 0, "max"), None),
    "max_pool_pad_overlap": ([(1, 1, 5, 5)], lambda X: nn.pool(X, 3, 2, 1, "max"), None),
    "softmax": ([(2, 4)], lambda X: nn.softmax(X), None),
    "softmax_axis0": ([(3, 2)], lambda X: nn.softmax(X, axis=0), None),
    "log_softmax": ([(2, 4)], lambda X: nn.log_softmax(X), None),
    "flatten": ([(2, 2, 3, 2)], lambda X: nn.flatten(X), None),
    "relu": ([(3, 4)], lambda X: nn.relu(X), None),
    "pad": ([(2, 3)], lambda X: nn.pad(X, (1, 0), (0, 2), 0.5), None),
    "exp": ([(2, 3)], topi.exp, None),
    "log": ([(2, 3)], topi.log, "pos"),
    "sqrt": ([(2, 3)], topi.sqrt, "pos"),
    "sigmoid": ([(2, 3)], topi.sigmoid, None),
    "tanh": ([(2, 3)], topi.tanh, None),
    "negative": ([(2, 3)], topi.negative, None),
    "sum_all": ([(2, 3)], lambda X: topi.sum(X), None),
    "sum_axis_keepdims": ([(2, 3, 2)], lambda X: topi.sum(X, axis=(0, -1), keepdims=True), None),
    "max_axis": ([(3, 4)], lambda X: topi.max(X, axis=1), None),
    "min_all": ([(2, 3)], lambda X: topi.min(X), None),
    "prod_axis": ([(3, 3)], lambda X: topi.prod(X, axis=0), "pos"),
    "add_broadcast": ([(2, 1, 3), (4, 1)], topi.add, None),
    "subtract_broadcast": ([(3,), (2, 3)], topi.subtract, None),
    "multiply_broadcast": ([(2, 3), (2, 1)], topi.multiply, None),
    "divide_broadcast": ([(2, 3), (3,)], topi.divide, "pos"),
    "scalar_ops": ([(2, 3)], lambda X: 2.0 - X * 3 / 4.0, None),
    "reshape": ([(2, 3, 2)], lambda X: topi.reshape(X, (3, 4)), None),
    "transpose": ([(2, 3, 2)], lambda X: topi.transpose(X, (2, 0, 1)), None),
    "concatenate": ([(2, 2), (2, 3)], lambda A, B: topi.concatenate([A, B, A], axis=1), None),
    "split": ([(5, 2)], lambda X: topi.split(X, [2], axis=0)[1], None),
    "matmul": ([(2, 3), (3, 2)], topi.matmul, None),
    "matmul_batched": ([(2, 2, 3), (3, 2)], topi.matmul, None),
    "homebrew_softmax": ([(2, 3), (4, 3)],
                         lambda X, W: (lambda E: E / topi.sum(E, axis=-1, keepdims=True))(
                             topi.exp(nn.dense(X, W))), None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_gradient_matches_finite_differences(case, rng, numeric_grad):
    shapes, build, domain = CASES[case]
    inputs = [ta.placeholder(s, "float64", name=f"in{k}") for k, s in enumerate(shapes)]
    Y = build(*inputs)
    H = ta.placeholder(Y.shape, "float64", name="H")
    grads = ta.gradient(Y, inputs, H)
    assert len(grads) == len(inputs)
    for g, x in zip(grads, inputs):
        assert g.shape == x.shape and g.dtype == x.dtype

    arrays = [rng.uniform(0.5, 1.5, s) if domain == "pos" else rng.standard_normal(s) for s in shapes]
    head = rng.standard_normal(Y.shape)
    got = ta.evaluate(grads, {**dict(zip(inputs, arrays)), H: head})

    def forward(*values):
        return ta.evaluate(Y, dict(zip(inputs, values)))

    want = numeric_grad(forward, arrays, head)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{case}: gradient {k}")
