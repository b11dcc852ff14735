"""Kernel calls and ``ta.build`` options: each bad input has its own test, asserting the error
type and a message that names the tensor (or option) and what was expected.

``tests/codegen/test_kernel.py`` already covers: a wrong number of arrays, float64 given for
float32, a transposed shape, a list instead of an array, Fortran-order and strided inputs (copied,
right result), ``out=`` of the wrong shape, dtype, layout, count or writeability, ``out=`` that
overlaps an input, an unknown target, and bad ``vector_width``/``opt_level``/``num_threads``
values; ``tests/codegen/test_lower.py`` an unknown option of ``ta.lower``.  What follows is the
rest: integer and boolean arrays, the other direction of float32/float64, integer placeholders,
0-d inputs, reversed and broadcast views, ``out=`` that is not an array or has the wrong count
for several outputs, and the options of ``ta.build``.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta


@pytest.fixture(scope="module")
def scaled():
    """Y[i, j] = X[i, j] * N[j] + s: a float64 matrix, an int32 vector and a float32 scalar."""
    X = ta.placeholder((3, 4), "float64", "X")
    N = ta.placeholder((4,), "int32", "N")
    s = ta.placeholder((), "float32", "s")
    Y = ta.compute((3, 4), lambda i, j: X[i, j] * ta.cast("float64", N[j]) + ta.cast("float64", s[()]),
                   name="Y")
    return ta.build([Y], [X, N, s])


X0 = np.arange(12.0).reshape(3, 4)
N0 = np.array([1, -2, 3, 0], np.int32)
S0 = np.array(0.5, np.float32)


def _want(x=X0, n=N0, s=S0):
    return x * n + np.float64(s)


def test_valid_call(scaled):
    np.testing.assert_array_equal(scaled(X0, N0, S0), _want())


def test_integer_array_for_a_float_tensor(scaled):
    with pytest.raises(TypeError, match=r"input X: expected dtype float64, got int64 "
                                        r"\(convert with \.astype\(np\.float64\)\)"):
        scaled(np.arange(12).reshape(3, 4), N0, S0)


def test_boolean_array_for_a_float_tensor(scaled):
    with pytest.raises(TypeError, match="input X: expected dtype float64, got bool"):
        scaled(X0 > 3, N0, S0)


def test_float32_for_float64_is_not_cast(scaled):
    with pytest.raises(TypeError, match="input X: expected dtype float64, got float32"):
        scaled(X0.astype(np.float32), N0, S0)


def test_int64_for_an_int32_tensor(scaled):
    with pytest.raises(TypeError, match=r"input N: expected dtype int32, got int64 \(convert with "
                                        r"\.astype\(np\.int32\)\)"):
        scaled(X0, N0.astype(np.int64), S0)


def test_float_array_for_an_int_tensor(scaled):
    with pytest.raises(TypeError, match="input N: expected dtype int32, got float64"):
        scaled(X0, N0.astype(np.float64), S0)


def test_error_is_both_type_and_value_error(scaled):
    with pytest.raises(ta.codegen.KernelArgumentError) as info:
        scaled(X0, N0.astype(np.float64), S0)
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)


def test_python_float_for_a_0d_tensor(scaled):
    with pytest.raises(TypeError, match=r"input s: expected a numpy array of shape \[\] and dtype float32, "
                                        r"got float"):
        scaled(X0, N0, 0.5)


def test_numpy_scalar_for_a_0d_tensor_is_accepted(scaled):
    np.testing.assert_array_equal(scaled(X0, N0, np.float32(0.5)), _want())


def test_numpy_scalar_of_the_wrong_dtype(scaled):
    with pytest.raises(TypeError, match="input s: expected dtype float32, got float64"):
        scaled(X0, N0, np.float64(0.5))


def test_1_element_array_for_a_0d_tensor(scaled):
    with pytest.raises(ValueError, match=r"input s: expected shape \[\], got \[1\]"):
        scaled(X0, N0, np.ones(1, np.float32))


def test_missing_dimension(scaled):
    with pytest.raises(ValueError, match=r"input X: expected shape \[3, 4\], got \[12\]"):
        scaled(X0.ravel(), N0, S0)


def test_none_for_an_array(scaled):
    with pytest.raises(TypeError, match=r"input N: expected a numpy array of shape \[4\] and dtype int32, "
                                        r"got NoneType"):
        scaled(X0, None, S0)


def test_no_arrays_at_all(scaled):
    with pytest.raises(TypeError, match=r"kernel takes 3 input arrays \(X, N, s\), got 0"):
        scaled()


def test_unknown_keyword(scaled):
    with pytest.raises(TypeError, match="unexpected keyword argument 'outs'"):
        scaled(X0, N0, S0, outs=np.empty((3, 4)))


def test_reversed_and_broadcast_views_are_copied_and_left_alone(scaled):
    x = X0[::-1, ::-1]                                  # negative strides
    n = np.broadcast_to(np.int32(2), (4,))              # a zero stride, read-only
    before = x.copy()
    np.testing.assert_array_equal(scaled(x, n, S0), _want(x, n))
    np.testing.assert_array_equal(x, before)
    transposed = np.ascontiguousarray(X0.T).T           # a column-major view of the same values
    np.testing.assert_array_equal(scaled(transposed, N0, S0), _want())


def test_out_that_is_not_an_array(scaled):
    with pytest.raises(TypeError, match="out Y: expected a numpy array, got list"):
        scaled(X0, N0, S0, out=([[0.0] * 4] * 3,))


def test_out_of_an_int_dtype(scaled):
    with pytest.raises(TypeError, match="out Y: expected dtype float64, got int64"):
        scaled(X0, N0, S0, out=np.empty((3, 4), np.int64))


def test_out_with_the_wrong_count_for_several_outputs():
    A = ta.placeholder((3,), "float64", "A")
    P = ta.compute((3,), lambda i: A[i] + 1.0, name="P")
    Q = ta.compute((3,), lambda i: A[i] * 2.0, name="Q")
    kern = ta.build([P, Q], [A])
    with pytest.raises(ValueError, match=r"out= must be 2 array\(s\) \(P, Q\)"):
        kern(np.zeros(3), out=np.empty(3))
    with pytest.raises(ValueError, match=r"out Q: expected shape \[3\], got \[4\]"):
        kern(np.zeros(3), out=(np.empty(3), np.empty(4)))
    p, q = np.empty(3), np.empty(3)
    got = kern(np.ones(3), out=[p, q])  # a list works as well as a tuple
    assert got[0] is p and got[1] is q
    np.testing.assert_array_equal(q, [2.0, 2.0, 2.0])


# ---- ta.build ---------------------------------------------------------------------------------

@pytest.fixture
def simple():
    A = ta.placeholder((4,), "float32", "A")
    return A, ta.compute((4,), lambda i: A[i] * 2.0, name="Y")


def test_unknown_option_to_build(simple):
    A, Y = simple
    with pytest.raises(TypeError, match=r"unknown option 'num_thread'; expected one of .*num_threads"):
        ta.build([Y], [A], num_thread=2)


def test_option_of_another_library(simple):
    A, Y = simple
    with pytest.raises(TypeError, match=r"unknown option 'device'; expected one of "
                                        r"checked, choices, fastmath, finished_sums, fuse, hidden_sums, "
                                        r"inline"):
        ta.build([Y], [A], device="cpu")


@pytest.mark.parametrize("option", ["fastmath", "parallel", "fuse"])
def test_boolean_option_given_a_string(simple, option):
    A, Y = simple
    with pytest.raises(TypeError, match=f"option {option} must be True or False, got 'no'"):
        ta.build([Y], [A], **{option: "no"})


def test_microkernel_option_given_a_string(simple):
    A, Y = simple
    with pytest.raises(TypeError, match="option microkernel must be True or False or None, got 'yes'"):
        ta.build([Y], [A], microkernel="yes")


def test_negative_parallel_min_work(simple):
    A, Y = simple
    with pytest.raises(ValueError, match="parallel_min_work must be a non-negative int, got -1"):
        ta.build([Y], [A], parallel_min_work=-1)


def test_fractional_num_threads(simple):
    A, Y = simple
    with pytest.raises(ValueError, match="num_threads must be a positive int or None, got 2.0"):
        ta.build([Y], [A], num_threads=2.0)


def test_inline_option_that_is_not_a_tensor(simple):
    A, Y = simple
    with pytest.raises(TypeError, match="option inline: expected tensors, got 'Y'"):
        ta.build([Y], [A], inline=["Y"])


def test_target_that_is_not_a_string(simple):
    A, Y = simple
    with pytest.raises(ValueError, match="unsupported target None; tensorad compiles for 'llvm'"):
        ta.build([Y], [A], target=None)


def test_needed_placeholder_missing_from_inputs():
    A = ta.placeholder((4,), "float32", "A")
    B = ta.placeholder((4,), "float32", "B")
    Y = ta.compute((4,), lambda i: A[i] * B[i], name="Y")
    with pytest.raises(ValueError, match=r"tensor 'B' \[4\] is needed to compute the outputs but is "
                                         r"not among the inputs \(A\)"):
        ta.build([Y], [A])


def test_no_outputs(simple):
    A, _ = simple
    with pytest.raises(ValueError, match="no outputs given"):
        ta.build([], [A])


def test_input_that_is_not_a_tensor(simple):
    A, Y = simple
    with pytest.raises(TypeError, match=r"inputs\[1\] must be a tensor, got ndarray"):
        ta.build([Y], [A, np.zeros(4, np.float32)])


@pytest.mark.parametrize("call", [ta.build, ta.lower])
def test_output_among_the_inputs(simple, call):
    """An output listed among the inputs (TVM's argument lists name it) is refused, as
    ``ta.evaluate`` refuses it in its feed: read as an input, it would not be computed."""
    A, Y = simple
    with pytest.raises(TypeError, match=r"'Y' is both an output and an input"):
        call(Y, [A, Y])
    with pytest.raises(TypeError, match="feed key 'Y' is a computed tensor"):
        ta.evaluate(Y, {A: np.ones(4, np.float32), Y: np.ones(4, np.float32)})


def test_output_among_the_inputs_of_a_symbolic_program():
    n = ta.size_var("n")
    A = ta.placeholder((n,), "float32", "A")
    Y = ta.compute((n,), lambda i: A[i] * 2.0, name="Y")
    with pytest.raises(TypeError, match=r"'Y' is both an output and an input"):
        ta.build(Y, [A, Y])


def test_a_generic_row_kernel_names_its_outputs_as_a_static_kernel_does():
    """A generic kernel (a symbolic batch) named an ``out=`` array by its position, "out 0", where
    a static kernel of the same program names the tensor, "out Y"; it also said only that an
    output overlapped "another argument".  Both kernels give the same messages."""
    n = ta.size_var("n")
    X = ta.placeholder((n, 4), "float32", "X")
    Y = ta.compute((n, 4), lambda i, j: X[i, j] * 2.0, name="Y")
    generic = ta.build(Y, [X])
    assert generic.generic
    Y5, X5 = ta.bind([Y, X], n=5)
    static = ta.build(Y5, [X5])
    x = np.ones((5, 4), np.float32)
    cases = [(np.empty((4, 4), np.float32), r"out Y: expected shape \[5, 4\], got \[4, 4\]"),
             (np.empty((5, 4), np.float64), r"out Y: expected dtype float32, got float64"),
             (np.empty((4, 5), np.float32).T, r"out Y: must be a C-contiguous"),
             (x, r"out Y: overlaps input X"),
             ((np.empty((5, 4), np.float32),) * 2, r"out= must be 1 array\(s\) \(Y\)")]
    for out, message in cases:
        for kernel in (generic, static):
            with pytest.raises(ta.codegen.KernelArgumentError, match=message):
                kernel(x, out=out)
    y = np.empty((5, 4), np.float32)
    assert generic(x, out=y) is y
    np.testing.assert_array_equal(y, 2 * x)
