"""Programs with size variables built once (``ta.build``, ``ta.function``) and run at sizes 1, 7 and 64;
``ta.lower`` at given sizes and ``.work_at``; the kernel's own bounded cache of static kernels."""

import numpy as np
import pytest

import tensorad as ta
from tests.tensorad.test_size_vars import CASES, SIZES, loss_and_gradient, rand


@pytest.mark.parametrize("case", CASES)
def test_built_forward_and_gradient_at_each_size(case):
    program, arrays, oracle = CASES[case]
    Y, inputs = program()
    H, grads = loss_and_gradient(Y, inputs)
    forward = ta.build(Y, inputs)
    backward = ta.build(grads, [*inputs, H])
    for n in SIZES:
        values, h = arrays(n), rand(n, *Y.shape[1:])
        want_y, want_grads = oracle(*values, h)
        np.testing.assert_allclose(forward(*values), want_y, rtol=1e-4, atol=1e-4)
        got_grads = backward(*values, h)
        for got, want in zip([got_grads] if len(grads) == 1 else got_grads, want_grads):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(forward.static) == len(SIZES)


def test_kernel_keeps_a_bounded_cache_of_static_kernels():
    n = ta.size_var("n")
    X = ta.placeholder((n,), name="X")
    Y = ta.compute((n,), lambda i: X[i] * 2.0, name="Y")
    kernel = ta.symbolic.SizedCallable(lambda new: ta.build(new[Y], [new[X]]), [Y, X], [X], "k", max_sizes=2)
    for size in (1, 2, 3, 2):
        np.testing.assert_array_equal(kernel(np.arange(size, dtype="float32")), 2 * np.arange(size))
    assert len(kernel.static) == 2
    assert kernel.at(n=2) is kernel.at(n=2)


def test_kernel_arrays_disagreeing_on_a_size_name_both_arrays():
    n = ta.size_var("n")
    X, V = ta.placeholder((n, 4), name="X"), ta.placeholder((n,), name="V")
    kernel = ta.build(ta.compute((n, 4), lambda i, j: X[i, j] * V[i], name="Y"), [X, V])
    with pytest.raises(ValueError, match=r"disagree on size n: X gives 3, V gives 2"):
        kernel(rand(3, 4), rand(2))
    with pytest.raises(ValueError, match="size n = 0 is outside its admissible range"):
        kernel(rand(0, 4), rand(0))


def test_lower_at_sizes_and_work_at():
    Y, inputs = CASES["dense"][0]()
    lowered = ta.lower(Y, inputs)
    with pytest.raises(TypeError, match=r"\.work_at\(n=\.\.\.\)"):
        _ = lowered.work
    static = ta.lower(*CASES["dense"][0](7)).work  # written with integer sizes
    assert lowered.work_at(n=7) == ta.lower(Y, inputs, sizes={"n": 7}).work == static == 7 * 5 * 8


def test_function_on_symbolic_program():
    Y, inputs = CASES["softmax"][0]()
    f = ta.function(Y, inputs)
    for n in (1, 7):
        x = rand(n, 6)
        np.testing.assert_allclose(f(x), CASES["softmax"][2](x.astype("float64"), x)[0], rtol=1e-5)


def test_function_forward_and_backward_optimized_at_each_size():
    """``ta.function`` binds before it differentiates: each size's backward is the optimized one."""
    Y, inputs = CASES["dense"][0]()
    f = ta.function(Y, inputs)
    for n in (1, 7):
        values, h = CASES["dense"][1](n), rand(n, 5)
        want_y, want_grads = CASES["dense"][2](*values, h)
        y, residuals = f.forward(*values)
        np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-5)
        for got, want in zip(f.backward(residuals, h), want_grads):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    static = f.at(n=7)
    X7, W7, B7 = static.inputs
    plain = ta.function(ta.topi.nn.dense(X7, W7, B7), [X7, W7, B7])
    assert static.lower_backward().work == plain.lower_backward().work
