"""Bad requests to autodiff through the facade: each has its own test, asserting the error type
and a message that says what was wrong.

Already covered in ``tests/tensorad/autodiff`` (on the inner functions): an integer input or
output of ``jacobian_recursive`` and ``jacobian``, a head whose shape is not prefix + the output's
(``(4, 3)``, ``(4,)``, ``(2,)`` for an output ``(3, 4)``), an override returning a tensor of the
wrong shape, a jvp tangent of the wrong shape and a tangent count mismatch, the hvp of a ``(3,)``
output, and gradcheck of integer or computed inputs.  What follows is the rest: things that are
not tensors where tensors are expected (which used to raise ``AttributeError`` -- or hang, for
``ta.Jacobian(Y, array)``), integer tensors in jvp/hvp and as a head, a prefixed head of the wrong
shape, overrides keyed by name, not callable or returning an array or a tensor without the head's
prefix, a tangent that is an array, and the hvp of a seed-style ``(1,)`` loss.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

F = "float64"


@pytest.fixture
def prog():
    X = ta.placeholder((3,), F, "X")
    N = ta.placeholder((3,), "int32", "N")
    Y = ta.compute((3,), lambda i: X[i] * X[i] + ta.cast(F, N[i]), name="Y")
    return X, N, Y


# ---- not tensors -----------------------------------------------------------------------------

def test_gradient_of_an_array(prog):
    X, _, _ = prog
    with pytest.raises(TypeError, match="jacobian_recursive \\(output\\): expected a tensor, got ndarray"):
        ta.gradient(np.zeros(3), [X])


def test_gradient_of_an_expression(prog):
    X, _, _ = prog
    with pytest.raises(TypeError, match="expected a tensor, got Expr"):
        ta.gradient(X[0] * 2.0, [X])


@pytest.mark.parametrize("bad, kind", [(np.zeros(3), "ndarray"), ("X", "str"), (None, "NoneType")])
def test_gradient_by_something_that_is_not_a_tensor(prog, bad, kind):
    _, _, Y = prog
    with pytest.raises(TypeError, match=f"jacobian_recursive: inputs must be tensors, got {kind}"):
        ta.gradient(Y, [bad])


def test_gradient_by_an_element_read(prog):
    X, _, Y = prog
    with pytest.raises(TypeError, match="inputs must be tensors, got Expr"):
        ta.gradient(Y, [X[0]])


def test_head_that_is_an_array(prog):
    X, _, Y = prog
    with pytest.raises(TypeError, match="jacobian_recursive: head must be a Tensor, got ndarray"):
        ta.gradient(Y, [X], np.ones(3))


def test_jacobian_by_an_array_does_not_hang(prog):
    _, _, Y = prog
    with pytest.raises(TypeError, match="jacobian: expected a tensor, got ndarray"):
        ta.Jacobian(Y, np.zeros(3))


def test_jacobian_by_a_list(prog):
    X, _, Y = prog
    with pytest.raises(TypeError, match="jacobian: expected a tensor, got list"):
        ta.Jacobian(Y, [X])


def test_iterating_a_tensor_is_an_error(prog):
    """``list(T)`` used to call ``T[0], T[1], ...`` forever (the cause of the hang above)."""
    X, _, _ = prog
    with pytest.raises(TypeError, match=r"tensor 'X' is not iterable: read its elements with X\[i, ...\]"):
        list(X)
    with pytest.raises(TypeError):  # NumPy says it "could not convert object to sequence"
        np.asarray(X, dtype=np.float64)


def test_jvp_by_an_array(prog):
    _, _, Y = prog
    with pytest.raises(TypeError, match="jvp \\(input\\): expected a tensor, got ndarray"):
        ta.jvp(Y, [np.zeros(3)], [ta.placeholder((3,), F, "V")])


def test_jvp_of_an_array(prog):
    X, _, _ = prog
    with pytest.raises(TypeError, match="jvp \\(output\\): expected a tensor, got ndarray"):
        ta.jvp(np.zeros(3), [X], [ta.placeholder((3,), F, "V")])


def test_jvp_tangent_that_is_an_array(prog):
    X, _, Y = prog
    with pytest.raises(ValueError, match=r"jvp: the tangent of 'X' must be a tensor of shape \[3\], "
                                         r"got array"):
        ta.jvp(Y, [X], [np.ones(3)])


def test_hvp_of_a_number(prog):
    X, _, _ = prog
    with pytest.raises(TypeError, match="expected a tensor, got float64"):
        ta.hessian_vector_product(np.float64(1.0), [X], [ta.placeholder((3,), F, "V")])


def test_hvp_by_an_array(prog):
    X, _, _ = prog
    loss = ta.topi.sum(ta.topi.exp(X))
    with pytest.raises(TypeError, match="hessian_vector_product \\(input\\): expected a tensor, got ndarray"):
        ta.hessian_vector_product(loss, [np.zeros(3)], [ta.placeholder((3,), F, "V")])


# ---- integer tensors ---------------------------------------------------------------------------

def test_jvp_by_an_integer_tensor(prog):
    _, N, Y = prog
    with pytest.raises(TypeError, match="jvp \\(input\\): tensor 'N' has dtype int32; only floating-point "
                                        "tensors are differentiable"):
        ta.jvp(Y, [N], [ta.placeholder((3,), "int32", "V")])


def test_hvp_of_an_integer_loss(prog):
    X, N, _ = prog
    with pytest.raises(TypeError, match="tensor 'total' has dtype int32"):
        ta.hessian_vector_product(ta.topi.sum(N, name="total"), [X], [ta.placeholder((3,), F, "V")])


def test_integer_head(prog):
    X, _, Y = prog
    with pytest.raises(TypeError, match="jacobian_recursive \\(head\\): tensor 'H' has dtype int32"):
        ta.gradient(Y, [X], ta.placeholder((3,), "int32", "H"))


@pytest.mark.parametrize("call", ["jvp", "hvp"])
def test_integer_tangent(prog, call):
    """An integer tangent is refused as an integer head is (a float one of another dtype is cast)."""
    X, _, Y = prog
    V = ta.placeholder((3,), "int32", "V")
    with pytest.raises(TypeError, match="\\(tangent\\): tensor 'V' has dtype int32; only floating-point"):
        if call == "jvp":
            ta.jvp(Y, [X], [V])
        else:
            ta.hessian_vector_product(ta.topi.sum(Y), [X], [V])


def test_facade_gradient_by_an_integer_tensor(prog):
    _, N, Y = prog
    with pytest.raises(TypeError, match="tensor 'N' has dtype int32; only floating-point tensors are "
                                        "differentiable \\(integer tensors have no gradient\\)"):
        ta.JacobianRecursive(Y, [N])


# ---- shapes ----------------------------------------------------------------------------------

def test_prefixed_head_of_the_wrong_shape():
    X = ta.placeholder((3, 4), F, "X")
    Y = ta.topi.exp(X)
    with pytest.raises(ValueError, match=r"head 'H' has shape \[2, 4, 3\], but it must be prefix \+ the "
                                         r"output's shape \[3, 4\]"):
        ta.gradient(Y, [X], ta.placeholder((2, 4, 3), F, "H"))


def test_hvp_of_a_seed_style_1_element_loss(prog):
    X, _, _ = prog
    loss = ta.topi.sum(ta.topi.exp(X), keepdims=True, name="L")  # shape (1,), as the seed's losses
    with pytest.raises(ValueError, match=r"the output must be a scalar \(shape \(\)\), 'L' has shape \[1\]"):
        ta.hessian_vector_product(loss, [X], [ta.placeholder((3,), F, "V")])


def test_hvp_vector_of_the_wrong_shape(prog):
    X, _, _ = prog
    loss = ta.topi.sum(ta.topi.exp(X))
    with pytest.raises(ValueError, match=r"hessian_vector_product: the tangent of 'X' must be a tensor of "
                                         r"shape \[3\], got \[2\]"):
        ta.hessian_vector_product(loss, [X], [ta.placeholder((2,), F, "V")])


# ---- overrides ---------------------------------------------------------------------------------

def test_override_keyed_by_name(prog):
    X, _, Y = prog
    with pytest.raises(TypeError, match="override maps tensors to functions .* got 'Y'"):
        ta.gradient(Y, [X], override={"Y": lambda out, inp, head: head})


def test_override_that_is_not_callable(prog):
    X, _, Y = prog
    with pytest.raises(TypeError, match="override maps tensors to functions fn\\(output, input, head\\)"):
        ta.gradient(Y, [X], override={Y: 2.0})


def test_override_returning_an_array(prog):
    X, _, Y = prog
    with pytest.raises(ValueError, match=r"override for 'Y': the adjoint contribution for 'X' must be a "
                                         r"tensor of shape \[3\], got array"):
        ta.gradient(Y, [X], ta.placeholder((3,), F, "H"), override={Y: lambda out, inp, head: np.zeros(3)})


def test_override_forgetting_the_head_prefix(prog):
    X, _, Y = prog
    H = ta.placeholder((2, 3), F, "H")
    bad = {Y: lambda out, inp, head: ta.compute((3,), lambda i: 2.0 * inp[i], name="dY")}
    with pytest.raises(ValueError, match=r"must be a tensor of shape \[2, 3\], got \[3\]"):
        ta.gradient(Y, [X], H, override=bad)
