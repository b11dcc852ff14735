"""Integer-label losses (``cross_entropy``, ``nll_loss``) against NumPy formulas written here,
central differences, ``torch`` where it is installed, and the hand-written gradient's work; and
the stabilizing shift (the row max of a log-sum-exp), which autodiff treats as a constant:
first and second derivatives must still be exact."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

nn = ta.topi.nn
LABELS = np.array([1, 6, -100, 0, 3], np.int32)


def np_cross_entropy(x, labels, reduction="mean"):
    m = x.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(x - m).sum(-1, keepdims=True)))[..., 0]
    keep = labels != -100
    picked = np.take_along_axis(x, np.where(keep, labels, 0)[..., None], -1)[..., 0]
    per = np.where(keep, lse - picked, 0.0)
    return {"none": per, "sum": per.sum(), "mean": per.sum() / keep.sum()}[reduction]


def _program(reduction, shape=(5, 7)):
    x = ta.placeholder(shape, "float64", "X")
    labels = ta.placeholder(shape[:-1], "int32", "L")
    return x, labels, nn.cross_entropy(x, labels, reduction)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_value_and_gradient(reduction, numeric_grad):
    x, labels, y = _program(reduction)
    xv = np.random.default_rng(0).normal(size=(5, 7)) * 3
    head = np.random.default_rng(1).normal(size=y.shape)
    h = ta.placeholder(y.shape, "float64", "H")
    grad = ta.JacobianRecursive(y, [x], head=h)[0]
    got, gx = ta.build([y, grad], [x, labels, h])(xv, LABELS, head)
    np.testing.assert_allclose(got, np_cross_entropy(xv, LABELS, reduction), rtol=1e-12)
    want = numeric_grad(lambda a: np_cross_entropy(a, LABELS, reduction), [xv], head)[0]
    np.testing.assert_allclose(gx, want, rtol=1e-6, atol=1e-8)


def test_cross_entropy_matches_torch():
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    x, labels, y = _program("mean", (2, 3, 7))
    grad = ta.JacobianRecursive(y, [x])[0]
    xv = np.random.default_rng(2).normal(size=(2, 3, 7))
    lv = np.array([[0, 6, 2], [-100, 1, 1]], np.int32)
    got, gx = ta.build([y, grad], [x, labels])(xv, lv)
    tx = torch.tensor(xv.reshape(6, 7), requires_grad=True)
    ty = torch.nn.functional.cross_entropy(tx, torch.tensor(lv.reshape(6), dtype=torch.long))
    ty.backward()
    np.testing.assert_allclose(got, ty.item(), rtol=1e-12)
    np.testing.assert_allclose(gx, tx.grad.numpy().reshape(2, 3, 7), rtol=1e-10, atol=1e-14)


def test_nll_loss_of_log_softmax_is_cross_entropy():
    x = ta.placeholder((5, 7), "float64", "X")
    labels = ta.placeholder((5,), "int32", "L")
    y = nn.nll_loss(nn.log_softmax(x), labels)
    xv = np.random.default_rng(3).normal(size=(5, 7))
    np.testing.assert_allclose(ta.build([y], [x, labels])(xv, LABELS), np_cross_entropy(xv, LABELS),
                               rtol=1e-12)
    assert ta.gradcheck(y, [x], feed={labels: LABELS})  # (labels out of range raise)


def test_cross_entropy_gradient_work_is_hand_written():
    """Hand-written: row max (N*C), sum of exponentials (N*C), dX = (softmax - onehot) h / n
    (N*C), and the count of rows not ignored (N).  Differentiating through the row max (a
    winner reduction and its adjoint, 2 N*C more) is what the shift attribute avoids."""
    n, c = 5, 7
    x, labels, y = _program("mean", (n, c))
    h = ta.placeholder((), "float64", "H")
    grad = ta.JacobianRecursive(y, [x], head=h)[0]
    assert ta.lower([grad], [x, labels, h]).work <= 3 * n * c + n


@pytest.mark.parametrize("build", [
    lambda x, labels: nn.cross_entropy(x, labels),
    lambda x, labels: ta.topi.sum(nn.softmax(x) * ta.topi.tanh(x)),
    lambda x, labels: ta.topi.sum(nn.log_softmax(x, axis=0) * x),
])
def test_second_derivatives_through_a_shift(build, numeric_grad):
    """The Hessian (Jacobian of the gradient) and H.v against central differences of the
    first derivative built by tensorad (itself checked against finite differences above)."""
    x = ta.placeholder((3, 4), "float64", "X")
    labels = ta.placeholder((3,), "int32", "L")
    loss = build(x, labels)
    grad = ta.JacobianRecursive(loss, [x])[0]
    xv = np.random.default_rng(4).normal(size=(3, 4))
    lv = np.array([2, 0, 3], np.int32)
    first = ta.build([grad], [x, labels])
    hess = ta.evaluate([ta.Jacobian(grad, x)], {x: xv, labels: lv})[0]
    want = numeric_grad(lambda a: first(a, lv), [xv])[0]  # the Jacobian of the gradient
    np.testing.assert_allclose(hess, want, rtol=1e-6, atol=1e-8)
    v = ta.placeholder((3, 4), "float64", "V")
    vv = np.random.default_rng(5).normal(size=(3, 4))
    hv = ta.evaluate(ta.hessian_vector_product(loss, [x], [v]), {x: xv, labels: lv, v: vv})[0]
    np.testing.assert_allclose(hv, np.einsum("ijkl,kl->ij", want, vv), rtol=1e-6, atol=1e-8)


def test_labels_must_be_integers_of_the_row_shape():
    x = ta.placeholder((5, 7), "float64", "X")
    with pytest.raises(TypeError, match="labels must be an integer tensor"):
        nn.cross_entropy(x, ta.placeholder((5,), "float64", "L"))
    with pytest.raises(ValueError, match=r"labels \(5, 7\) must have the shape of input"):
        nn.cross_entropy(x, ta.placeholder((5, 7), "int32", "L"))
    with pytest.raises(ValueError, match="reduction must be one of"):
        nn.cross_entropy(x, ta.placeholder((5,), "int32", "L"), "avg")
