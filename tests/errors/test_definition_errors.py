"""Bad definitions: each has its own test asserting the error type and a helpful message."""

from __future__ import annotations

import pytest

import tensorad as ta
from tensorad.ir import Expr, Op, var


@pytest.fixture
def A():
    return ta.placeholder((4, 4), name="A")


def test_integer_true_division(A):
    with pytest.raises(TypeError, match=r"`/` on integer expressions .* use `//`"):
        ta.compute((4,), lambda i: A[i, 0] * ta.cast("float32", i / 2))


def test_truth_value_of_a_comparison(A):
    with pytest.raises(TypeError, match=r"use ta.select\(cond, a, b\) or ta.if_then_else"):
        ta.compute((4,), lambda i: A[i, 0] if A[i, 0] > 0.0 else 0.0)


def test_arithmetic_on_booleans(A):
    with pytest.raises(TypeError, match="arithmetic '\\+' on boolean expressions; use & and \\|"):
        (A[0, 0] > 0.0) + (A[0, 1] > 0.0)


def test_logic_on_floats(A):
    with pytest.raises(TypeError, match="expected a condition .* got a float32 expression"):
        A[0, 0] & A[0, 1]


def test_non_boolean_select_condition(A):
    with pytest.raises(TypeError, match="expected a condition"):
        ta.select(A[0, 0], 1.0, 2.0)


def test_fcompute_arity_mismatch(A):
    with pytest.raises(TypeError, match="fcompute takes 2 index arguments but the shape has 1"):
        ta.compute((4,), lambda i, j: A[i, j])


def test_wrong_number_of_indices(A):
    with pytest.raises(IndexError, match=r"A has 2 dimensions \(4, 4\) but is indexed with 1"):
        ta.compute((4,), lambda i: A[i])


def test_slice_index(A):
    with pytest.raises(TypeError, match="slices are not expressions"):
        ta.compute((4,), lambda i: A[i, :])


def test_float_index(A):
    with pytest.raises(TypeError, match="index 1 must be an integer expression, got float32"):
        ta.compute((4,), lambda i: A[i, A[0, 0]])


def test_tensor_used_as_scalar(A):
    with pytest.raises(TypeError, match=r"tensor 'A' used as a scalar: read an element with A\[i, ...\]"):
        ta.compute((4,), lambda i: A[i, 0] + A)


def test_non_affine_index(A):
    with pytest.raises(ta.OutOfBoundsError, match=r"\(i \* j\)\) is not quasi-affine"):
        ta.compute((4, 4), lambda i, j: A[i * j, 0])


def test_out_of_bounds_definition(A):
    with pytest.raises(ta.OutOfBoundsError, match=r"read A\(\(i \+ 1\), j\) .* at i=3, j=\d"):
        ta.compute((4, 4), lambda i, j: A[i + 1, j], name="shift")


def test_reduce_axis_with_empty_range():
    with pytest.raises(ValueError, match=r"empty or negative range \[3, 1\)"):
        ta.reduce_axis((3, 1), name="k")


def test_reduce_axis_with_bad_dom():
    with pytest.raises(TypeError, match="dom must be a pair"):
        ta.reduce_axis(5, name="k")


def test_reducing_over_a_compute_axis(A):
    with pytest.raises(ValueError, match="reduces over 'j', an axis of the compute itself"):
        ta.compute((4, 4), lambda i, j: ta.sum(A[i, j], axis=j))


def test_reducing_over_something_that_is_not_an_axis(A):
    with pytest.raises(TypeError, match="axis must be a ta.reduce_axis"):
        ta.compute((4,), lambda i: ta.sum(A[i, 0], axis=3))


def test_axis_listed_twice(A):
    k = ta.reduce_axis((0, 4), "k")
    with pytest.raises(ValueError, match="an axis is listed twice"):
        ta.compute((4,), lambda i: ta.sum(A[i, k], axis=[k, k]))


def test_where_that_is_not_a_condition(A):
    k = ta.reduce_axis((0, 4), "k")
    with pytest.raises(TypeError, match="`where` must be a condition, got a int32"):
        ta.compute((4,), lambda i: ta.sum(A[i, k], axis=k, where=k))


def test_reducing_booleans(A):
    k = ta.reduce_axis((0, 4), "k")
    with pytest.raises(TypeError, match="cannot reduce a boolean expression"):
        ta.compute((4,), lambda i: ta.sum(A[i, k] > 0.0, axis=k))


def test_reduce_axis_used_outside_its_reduction(A):
    k = ta.reduce_axis((0, 4), "k")
    with pytest.raises(ValueError, match="variable 'k' is neither an axis of this compute nor a reduce axis"):
        ta.compute((4,), lambda i: A[i, k])


def test_axis_of_another_compute(A):
    other = ta.compute((4,), lambda q: A[q, 0], name="other")
    with pytest.raises(ValueError, match="variable 'q' is neither an axis"):
        ta.compute((4,), lambda i: A[i, 0] + ta.cast("float32", other.op.axes[0]))


def test_mixed_multi_output_body(A):
    k = ta.reduce_axis((0, 4), "k")
    with pytest.raises(ValueError, match="mixes reductions and non-reductions"):
        ta.compute((4,), lambda i: (ta.sum(A[i, k], axis=k), A[i, 0]))


def test_multi_output_from_two_reducer_calls(A):
    k = ta.reduce_axis((0, 4), "k")
    with pytest.raises(ValueError, match="must come from one reducer call"):
        ta.compute((4,), lambda i: (ta.sum(A[i, k], axis=k), ta.max(A[i, k], axis=k)))


def test_combiner_with_wrong_arity(A):
    bad = ta.comm_reducer(lambda x, y: x + y, lambda a, b: (ta.const(0, a),), name="bad")
    k = ta.reduce_axis((0, 4), "k")
    with pytest.raises(ValueError, match="reducer 'bad': combiner and identity must return 2 values"):
        ta.compute((4,), lambda i: bad((A[i, k], A[i, k]), axis=k))


def test_combiner_variable_outside_its_combiner(A):
    x = ta.sum.instantiate(("float32",)).lhs[0]
    with pytest.raises(ValueError, match="combiner variable 'x' outside its combiner"):
        ta.compute((4,), lambda i: A[i, 0] + x)


def test_unsupported_dtype():
    with pytest.raises(TypeError, match="unsupported dtype 'complex64'"):
        ta.placeholder((2,), "complex64")


def test_negative_shape():
    with pytest.raises(ValueError, match=r"negative dimension in shape \(-2,\)"):
        ta.placeholder((-2,), name="X")


def test_non_integer_shape():
    with pytest.raises(TypeError, match=r"shape must be a tuple of ints, got \(2.5,\)"):
        ta.compute((2.5,), lambda i: ta.const(0.0))


def test_non_integer_constant_for_int_dtype():
    with pytest.raises(TypeError, match="constant 1.5 is not an integer but dtype is int32"):
        ta.const(1.5, "int32")


def test_non_expression_body():
    with pytest.raises(TypeError, match="cannot use str 'x' in a tensor expression"):
        ta.compute((2,), lambda i: "x")


def test_empty_tuple_body():
    with pytest.raises(ValueError, match="fcompute returned an empty tuple"):
        ta.compute((2,), lambda i: ())


def test_make_compute_axes_must_start_at_zero(A):
    i = var("i", 1, 4)
    with pytest.raises(TypeError, match=r"axes must be variables with range \[0, extent\)"):
        ta.lang.make_compute("T", (i,), (A[i, 0],))


@pytest.mark.parametrize("call, fix", [
    (lambda A: ta.tanh(A), r"ta\.topi\.tanh\(A\)"),
    (lambda A: ta.erf(A), r"ta\.topi\.erf\(A\)"),
    (lambda A: ta.exp(A), r"ta\.topi\.exp\(A\)"),
    (lambda A: ta.sum(A, axis=0), r"ta\.topi\.sum\(A, axis=0\)"),
    (lambda A: ta.max(A, axis=1), r"ta\.topi\.max\(A, axis=1\)"),
    (lambda A: ta.power(A, 2.0), r"ta\.topi\.power\(\.\.\.\)"),
    (lambda A: ta.maximum(0.0, A), r"ta\.topi\.maximum\(\.\.\.\)"),
])
def test_scalar_function_of_a_tensor_names_the_topi_call(A, call, fix):
    with pytest.raises(TypeError, match=r"tensor 'A' used as a scalar: read an element with "
                                        r"A\[i, \.\.\.\], or call " + fix):
        call(A)


def test_a_raw_data_index_outside_a_gather_names_the_fix(A):
    """``A[I[i], 0]`` is a gather (checked at run time); a read built around the language with
    a bare data index cannot be proved and says how to write it."""
    idx = ta.placeholder((4,), "int32", name="I")
    ta.compute((4,), lambda i: A[idx[i], 0])  # fine: a gather
    with pytest.raises(ta.OutOfBoundsError, match=r"indexes A with data \(index 0, I\(i\), reads tensor I\) "
                                                  r"outside a gather index: build the read with A\[\.\.\.\]"):
        ta.compute((4,), lambda i: Expr(Op.READ, A.dtype, (idx[i], ta.const(0)), A))


def test_a_bad_gather_mode_or_axis_is_a_clear_error(A):
    idx = ta.placeholder((4,), "int32", name="I")
    with pytest.raises(ValueError, match="gather mode must be one of 'raise', 'clip', 'wrap', got 'nearest'"):
        A.take(idx[0], 0, mode="nearest")
    empty = ta.placeholder((0, 3), name="Z")
    with pytest.raises(IndexError, match="Z: cannot gather along axis 0 of size 0"):
        empty[idx[0], 0]
    with pytest.raises(TypeError, match="indices must be an integer tensor"):
        ta.topi.take(A, ta.placeholder((2,), name="F"))
