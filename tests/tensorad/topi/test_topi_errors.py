"""Bad calls to ta.topi fail at the call with a clear error naming what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

topi, nn = ta.topi, ta.topi.nn


def P(shape, name="X", dtype="float32"):  # noqa: N802
    return ta.placeholder(shape, dtype, name=name)


def test_dense_shape_mismatches():
    with pytest.raises(ValueError, match=r"dense: X \(2, 3\) has 3 input features but W \(4, 5\)"):
        nn.dense(P((2, 3)), P((4, 5), "W"))
    with pytest.raises(ValueError, match=r"bias B must have shape \(4,\), got \(3,\)"):
        nn.dense(P((2, 3)), P((4, 3), "W"), P((3,), "B"))
    with pytest.raises(ValueError, match=r"dense: X must have at least 2 dimensions"):
        nn.dense(P((3,)), P((4, 3), "W"))
    with pytest.raises(ValueError, match=r"dense: X \(2, 3, 1\) has 1 input features"):
        nn.dense(P((2, 3, 1)), P((4, 3), "W"))  # (leading axes are allowed; the last is the input)
    with pytest.raises(TypeError, match=r"dense: W must be a tensor"):
        nn.dense(P((2, 3)), np.zeros((4, 3)))


def test_matmul_shape_mismatches():
    with pytest.raises(ValueError, match=r"matmul: contracted sizes differ: A \(2, 3\) has 3 columns"):
        topi.matmul(P((2, 3), "A"), P((4, 5), "B"))
    with pytest.raises(ValueError, match=r"cannot be broadcast"):
        topi.matmul(P((2, 3, 4), "A"), P((3, 4, 5), "B"))
    with pytest.raises(ValueError, match=r"at least 1-d"):
        topi.matmul(P((), "A"), P((3,), "B"))


def test_broadcast_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"add: shapes \(2, 3\) and \(4,\) cannot be broadcast"):
        topi.add(P((2, 3), "A"), P((4,), "B"))
    with pytest.raises(ValueError, match=r"divide: shapes"):
        P((2, 3), "A") / P((2, 2), "B")
    with pytest.raises(TypeError, match=r"at least one operand must be a tensor"):
        topi.multiply(2, 3)
    with pytest.raises(TypeError, match=r"subtract: rhs must be a tensor, a Python number or a scalar"):
        topi.subtract(P((2,)), "x")
    with pytest.raises(ValueError, match=r"cannot broadcast shape \(2, 3\) to \(3,\)"):
        topi.broadcast_to(P((2, 3)), (3,))


def test_integer_true_division_is_refused():
    with pytest.raises(TypeError, match=r"`/` on integer"):
        topi.divide(P((2,), "A", "int32"), 2)


def test_conv2d_bad_arguments():
    X, W = P((1, 3, 5, 5)), P((2, 3, 3, 3), "W")
    with pytest.raises(ValueError, match=r"conv2d: X \(1, 3, 5, 5\) has 3 channels but W \(2, 4, 3, 3\)"):
        nn.conv2d(X, P((2, 4, 3, 3), "W"), 1, 0)
    with pytest.raises(ValueError, match=r"larger than the padded input"):
        nn.conv2d(X, P((2, 3, 7, 3), "W"), 1, 0)
    with pytest.raises(ValueError, match=r"larger than the padded input"):
        nn.conv2d(X, W, 1, 0, dilation=3)  # dilated extent 7 > 5
    with pytest.raises(ValueError, match=r"X must be 4-d \(NCHW\)"):
        nn.conv2d(P((3, 5, 5)), W, 1, 0)
    with pytest.raises(ValueError, match=r"strides must be >= 1"):
        nn.conv2d(X, W, 0, 0)
    with pytest.raises(ValueError, match=r"padding .* must be >= 0"):
        nn.conv2d(X, W, 1, -1)
    with pytest.raises(TypeError, match=r"strides must be an int or a sequence of 2 ints"):
        nn.conv2d(X, W, (1, 1, 1), 0)


def test_pool_bad_arguments():
    X = P((1, 1, 4, 4))
    with pytest.raises(ValueError, match=r"pool_type must be 'avg' or 'max', got 'sum'"):
        nn.pool(X, 2, 2, 0, "sum")
    with pytest.raises(ValueError, match=r"larger than the padded input"):
        nn.pool(X, (5, 2), 1, 0, "max")
    with pytest.raises(ValueError, match=r"padding \[2, 0, 0, 0\] must be smaller than the kernel"):
        nn.pool(X, 2, 1, [2, 0, 0, 0], "avg")
    with pytest.raises(TypeError, match=r"kernel must be an int or a sequence of 2 ints"):
        nn.pool(X, [2, 2, 2], 1, 0, "avg")
    with pytest.raises(ValueError, match=r"at least 2 axes"):
        nn.pool(P((4,)), 2, 1, 0, "avg")


@pytest.mark.parametrize("call", [
    lambda X: topi.sum(X, axis=2), lambda X: topi.max(X, axis=-3), lambda X: nn.softmax(X, axis=5),
    lambda X: topi.split(X, 2, axis=2), lambda X: topi.concatenate([X, X], axis=2),
    lambda X: topi.transpose(X, (0, 2)), lambda X: topi.min(X, axis=(0, -2)),
])
def test_bad_axis(call):
    with pytest.raises(ValueError, match=r"axis|axes|permutation"):
        call(P((2, 3)))


def test_axis_must_be_an_int():
    with pytest.raises(TypeError, match=r"sum: axis must be an int"):
        topi.sum(P((2, 3)), axis=1.0)


def test_reshape_split_concatenate_errors():
    with pytest.raises(ValueError, match=r"cannot reshape \(2, 3\) \(size 6\) into \(4,\)"):
        topi.reshape(P((2, 3)), (4,))
    with pytest.raises(ValueError, match=r"at most one -1"):
        topi.reshape(P((2, 3)), (-1, -1))
    with pytest.raises(ValueError, match=r"cannot be split into 4 equal sections"):
        topi.split(P((6, 2)), 4)
    with pytest.raises(ValueError, match=r"nondecreasing"):
        topi.split(P((6, 2)), [4, 2])
    with pytest.raises(ValueError, match=r"differ outside axis 0"):
        topi.concatenate([P((2, 3), "A"), P((2, 4), "B")], 0)
    with pytest.raises(TypeError, match=r"nonempty list of tensors"):
        topi.concatenate([], 0)
    with pytest.raises(ValueError, match=r"axis 0 of X \(2, 3\) has size 2, not 1"):
        topi.squeeze(P((2, 3)), 0)


def test_float_only_math_on_integers():
    with pytest.raises(TypeError, match=r"exp: needs a float tensor, N is int32"):
        topi.exp(P((2,), "N", "int32"))
    with pytest.raises(TypeError, match=r"softmax: needs a float tensor"):
        nn.softmax(P((2,), "N", "int32"))


def test_arguments_must_be_tensors():
    with pytest.raises(TypeError, match=r"relu: input must be a tensor"):
        nn.relu(np.zeros(3))
    with pytest.raises(TypeError, match=r"flatten: input must be a tensor"):
        nn.flatten([1, 2])


@pytest.mark.parametrize("call, error, message", [
    (lambda: topi.mean(P((2, 3)), axis=(0, 0)), ValueError, "lists an axis twice"),
    (lambda: topi.var(P((3,), dtype="int32")), TypeError, "var: needs a float tensor"),
    (lambda: nn.layer_norm(P((2, 3)), P((4,), "g")), ValueError, r"gamma must have shape \(3,\), got \(4,\)"),
    (lambda: nn.layer_norm(P((2, 3)), eps=-1.0), ValueError, "eps must be a non-negative number"),
    (lambda: nn.batch_norm(P((2, 3, 4)), running_mean=P((3,), "m"), training=False), ValueError,
     "needs running_mean and running_var"),
    (lambda: nn.batch_norm(P((2, 3, 4)), P((2,), "g")), ValueError, r"gamma must have shape \(3,\)"),
    (lambda: nn.group_norm(P((2, 6, 4)), 4), ValueError, "num_groups must be a positive divisor of the 6"),
    (lambda: nn.gelu(P((2, 3)), approximate="fast"), ValueError, "approximate must be 'none' or 'tanh'"),
    (lambda: nn.conv2d(P((1, 4, 5, 5)), P((6, 4, 3, 3), "W"), groups=2), ValueError,
     r"expects 8 \(W is \[out, in/groups, kh, kw\], groups=2\)"),
    (lambda: nn.conv2d(P((1, 4, 5, 5)), P((5, 2, 3, 3), "W"), groups=2), ValueError,
     "groups=2 must divide the 4 input channels and the 5 output channels"),
    (lambda: nn.conv2d_transpose(P((1, 2, 4, 4)), P((3, 2, 3, 3), "W")), ValueError,
     r"has 2 channels but W \(3, 2, 3, 3\) expects 3 \(W is \[in, out, kh, kw\]\)"),
    (lambda: nn.conv2d_transpose(P((1, 2, 4, 4)), P((2, 2, 3, 3), "W"), 2, 0, 2), ValueError,
     "output_padding .* must be smaller than the stride"),
    (lambda: nn.conv2d_transpose(P((1, 2, 1, 1)), P((2, 2, 1, 1), "W"), 1, 1), ValueError,
     "leaves an empty output"),
    (lambda: nn.upsampling(P((1, 2, 3, 3)), 1.5), TypeError, "scale_factor .* must be an int"),
    (lambda: nn.upsampling(P((1, 2, 3, 3)), 2, "bicubic"), ValueError,
     "method must be 'nearest' or 'bilinear'"),
    (lambda: nn.scaled_dot_product_attention(P((2, 5, 4), "Q"), P((2, 6, 3), "K"), P((2, 6, 3), "V")),
     ValueError, "differ in their last axis"),
    (lambda: nn.scaled_dot_product_attention(P((2, 5, 4), "Q"), P((3, 6, 4), "K"), P((3, 6, 3), "V")),
     ValueError, "must share their leading axes"),
])
def test_layer_errors_name_the_problem(call, error, message):
    with pytest.raises(error, match=message):
        call()
