"""Subgradients at kinks and ties follow PyTorch (README "Conventions", docs/conventions.rst).

* ``relu`` at 0: 0;  ``abs`` at 0: 0;
* ``maximum(a, b)`` / ``minimum(a, b)`` at ``a == b``: half of the gradient to each operand;
* ``max``/``min`` reductions (and max pooling) over ties: the gradient split evenly among the
  tied elements (``torch.amax``).

Each is checked against a NumPy formula, on both the reference evaluator and a built kernel,
and against torch's autograd when torch is installed.
"""

import numpy as np
import pytest

import tensorad as ta

F = "float64"
KINKS = np.array([[0.0, 1.0, -1.0, 0.0], [2.0, 0.0, -3.0, 0.5]])


def _grads(loss, inputs, feed):
    grads = ta.JacobianRecursive(loss, inputs)
    ref = ta.evaluate(grads, feed)
    built = ta.build(grads, list(feed))(*feed.values())
    built = built if isinstance(built, tuple) else (built,)
    for r, b in zip(ref, built):
        np.testing.assert_allclose(b, r, rtol=1e-12)
    return ref


def _torch():
    return pytest.importorskip("torch", reason="an optional extra; make test requires it")


def test_relu_and_abs_at_zero_have_zero_gradient():
    x = ta.placeholder(KINKS.shape, F, name="X")
    loss = ta.topi.sum(ta.topi.add(ta.topi.nn.relu(x), ta.compute(x.shape, lambda i, j: ta.abs(x[i, j]))))
    (g,) = _grads(loss, [x], {x: KINKS})
    want = (KINKS > 0) * 1.0 + np.sign(KINKS)  # relu'(0) = 0 and sign(0) = 0
    np.testing.assert_array_equal(g, want)


def test_relu_passes_nan_like_torch():
    x = ta.placeholder((3,), F, name="X")
    y = ta.build([ta.topi.nn.relu(x)], [x])(np.array([np.nan, -1.0, 2.0]))
    np.testing.assert_array_equal(y, [np.nan, 0.0, 2.0])


def test_maximum_minimum_split_a_tie_in_half():
    a = ta.placeholder((2, 4), F, name="A")
    b = ta.placeholder((2, 4), F, name="B")
    av = np.array([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 0.0]])
    bv = np.array([[1.0, 0.0, 3.0, 2.0], [0.0, 5.0, 0.0, 1.0]])
    mx = ta.compute(a.shape, lambda i, j: ta.maximum(a[i, j], b[i, j]) + 3.0 * ta.minimum(a[i, j], b[i, j]))
    ga, gb = _grads(ta.topi.sum(mx), [a, b], {a: av, b: bv})
    tie = (av == bv) * 0.5
    np.testing.assert_array_equal(ga, (av > bv) + 3.0 * (av < bv) + 4.0 * tie)
    np.testing.assert_array_equal(gb, (bv > av) + 3.0 * (bv < av) + 4.0 * tie)


def test_max_reduction_and_max_pool_split_ties_evenly():
    x = ta.placeholder((1, 1, 4, 4), F, name="X")
    data = np.array([[[[1.0, 1.0, 0.0, 2.0],
                       [1.0, 0.0, 2.0, 2.0],
                       [0.0, 0.0, 3.0, 3.0],
                       [0.0, 0.0, 3.0, 3.0]]]])
    pool = ta.topi.nn.pool(x, (2, 2), (2, 2), [0, 0, 0, 0], "max")
    (g,) = _grads(ta.topi.sum(pool), [x], {x: data})
    want = np.zeros((4, 4))
    for i in range(2):
        for j in range(2):
            win = data[0, 0, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
            want[2 * i:2 * i + 2, 2 * j:2 * j + 2] = (win == win.max()) / (win == win.max()).sum()
    np.testing.assert_allclose(g[0, 0], want, rtol=1e-15)
    # all zeros: the one window of 0s shares the gradient four ways
    assert g[0, 0, 2, 0] == 0.25


def test_conventions_match_torch_autograd():
    torch = _torch()
    x = ta.placeholder(KINKS.shape, F, name="X")
    b = ta.placeholder(KINKS.shape, F, name="B")
    bv = np.array([[0.0, 1.0, 0.0, 1.0], [2.0, 1.0, -3.0, 0.5]])
    ours = ta.topi.add(ta.topi.add(ta.topi.nn.relu(x), ta.compute(x.shape, lambda i, j: ta.abs(x[i, j]))),
                       ta.compute(x.shape, lambda i, j: ta.maximum(x[i, j], b[i, j])))
    rows = ta.topi.max(x, axis=1)
    loss = ta.topi.add(ta.topi.sum(ours), ta.topi.sum(rows))
    data = KINKS.copy()
    data[1, 3] = 2.0  # a tie with the row's maximum
    gx, gb = _grads(loss, [x, b], {x: data, b: bv})
    tx = torch.tensor(data, requires_grad=True)
    tb = torch.tensor(bv, requires_grad=True)
    tl = (torch.relu(tx) + tx.abs() + torch.maximum(tx, tb)).sum() + torch.amax(tx, dim=1).sum()
    tl.backward()
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-15)
    np.testing.assert_allclose(gb, tb.grad.numpy(), rtol=1e-15)


def test_max_pool_ties_match_torch():
    torch = _torch()
    x = ta.placeholder((1, 2, 4, 4), F, name="X")
    data = np.round(np.random.default_rng(3).uniform(0, 2, size=x.shape))  # many ties
    pool = ta.topi.nn.pool(x, (2, 2), (2, 2), [0, 0, 0, 0], "max")
    (g,) = _grads(ta.topi.sum(pool), [x], {x: data})
    tx = torch.tensor(data, requires_grad=True)
    torch.amax(tx.reshape(1, 2, 2, 2, 2, 2), dim=(3, 5)).sum().backward()  # amax pools evenly
    np.testing.assert_allclose(g, tx.grad.numpy(), rtol=1e-15)
