"""Bad sizes given to a program over a size variable are clear errors in every callable that runs it
(``ta.function``'s call, forward and backward, and the PyTorch and JAX bridges): arrays that disagree
on a size name both arrays, the size and what each gives; a size below its ``min`` or not a multiple of
its ``multiple_of`` names the size and its constraint."""

import numpy as np
import pytest

import tensorad as ta

DISAGREE = r"disagree on size n: X gives 4, V gives 6 \(axis 0\)"
BAD = [((4, 4), (6,), DISAGREE), ((0, 4), (0,), r"size n = 0 is outside its admissible range \[2, inf\]"),
       ((3, 4), (3,), "size n = 3 is not a multiple of 2")]


def _program():
    n = ta.size_var("n", min=2, multiple_of=2)
    X, V = ta.placeholder((n, 4), name="X"), ta.placeholder((n,), name="V")
    return ta.compute((n, 4), lambda i, j: X[i, j] * V[i], name="Y"), [X, V]


def _ones(*shape):
    return np.ones(shape, np.float32)


def test_function_names_the_size_and_the_arrays():
    f = ta.function(*_program())
    for x, v, message in BAD:
        for call in (f, f.forward):
            with pytest.raises(ValueError, match=message):
                call(_ones(*x), _ones(*v))
    y, residuals = f.forward(_ones(4, 4), 2 * _ones(4))
    np.testing.assert_array_equal(y, 2 * _ones(4, 4))
    with pytest.raises(ta.codegen.KernelArgumentError,
                       match=r"Y.head: expected shape \[4, 4\], got \[6, 4\]"):
        f.backward(residuals, _ones(6, 4))


def test_torch_function_names_the_size_and_the_arrays():
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    f = ta.torch.function(*_program())
    for x, v, message in BAD:
        with pytest.raises(ValueError, match=message):
            f(torch.ones(x), torch.ones(v))
    np.testing.assert_array_equal(f(torch.ones(4, 4), 3 * torch.ones(4)).numpy(), 3 * _ones(4, 4))


def test_jax_function_and_its_gradient_name_the_size_and_the_arrays():
    jax = pytest.importorskip("jax", reason="an optional extra; make test requires it")
    f = ta.jax.function(*_program())
    for x, v, message in BAD:
        with pytest.raises(ValueError, match=message):
            f(jax.numpy.ones(x), jax.numpy.ones(v))
    grad = jax.grad(lambda x, v: f(x, v).sum(), argnums=(0, 1))
    with pytest.raises(ValueError, match=DISAGREE):
        grad(jax.numpy.ones((4, 4)), jax.numpy.ones(6))
    gx, gv = grad(jax.numpy.ones((4, 4)), 2 * jax.numpy.ones(4))
    np.testing.assert_array_equal(np.asarray(gx), 2 * _ones(4, 4))
    np.testing.assert_array_equal(np.asarray(gv), 4 * _ones(4))
