"""``gradcheck`` passes correct derivatives, catches wrong ones, and passes random programs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from strategies import examples, random_program

import tensorad as ta
from tensorad.autodiff import GradcheckError, gradcheck, jacobian_recursive
from tensorad.autodiff.retype import promote_to_float64
from tensorad.ir.rewrite import tensor_graph

F = "float64"


def test_gradcheck_passes_a_float32_program_in_float64():
    x = ta.placeholder((3, 4), "float32", name="X")
    w = ta.placeholder((4,), "float32", name="W")
    k = ta.reduce_axis((0, 4), name="k")
    y = ta.compute((3,), lambda i: ta.log(ta.sum(ta.exp(x[i, k] * w[k]), axis=k)), name="Y")
    assert gradcheck(y, [x, w]) is True
    assert gradcheck(y, [x, w], max_elements=4)  # along random directions


def test_promotion_makes_every_float_value_float64():
    x = ta.placeholder((3,), "float32", name="X")
    n = ta.placeholder((3,), "int32", name="N")
    k = ta.reduce_axis((0, 3), name="k")
    y = ta.compute((), lambda: ta.max(x[k] * 2.0 + ta.cast("float32", n[k]), axis=k), name="Y")
    wide = promote_to_float64([y])
    for t in tensor_graph([wide[y]]):
        assert t.dtype in (F, "int32")
    assert wide[n] == n and wide[x] != x


def test_gradcheck_catches_a_wrong_override():
    x = ta.placeholder((3,), F, name="X")
    e = ta.compute((3,), lambda i: ta.exp(x[i]), name="E")
    y = ta.compute((3,), lambda i: e[i] * 2.0, name="Y")
    right = {e: lambda out, inp, head: ta.compute(head.shape, lambda i: head[i] * out[i], name="ok")}
    wrong = {e: lambda out, inp, head: ta.compute(head.shape, lambda i: head[i] * 1.0, name="bad")}
    assert gradcheck(y, [x], override=right)
    with pytest.raises(GradcheckError, match=r"reverse-mode gradient by 'X' at index \(\d,\): analytic"):
        gradcheck(y, [x], override=wrong)


def test_gradcheck_reports_the_worst_mismatch():
    x = ta.placeholder((4,), F, name="X")
    # round() through an integer cast: piecewise constant, so the derivative is 0, but
    # finite differences across a step are huge: make x land on steps so FD sees them
    y = ta.compute((4,), lambda i: ta.cast(F, ta.cast("int32", x[i] * 1e6)), name="Y")
    with pytest.raises(GradcheckError, match="worst: .* at index"):
        gradcheck(y, [x], eps=1e-3)


def test_gradcheck_input_errors():
    x = ta.placeholder((3,), F, name="X")
    n = ta.placeholder((3,), "int32", name="N")
    y = ta.compute((3,), lambda i: x[i] * ta.cast(F, n[i]), name="Y")
    with pytest.raises(ValueError, match="must be placeholders"):
        gradcheck(y, [y])
    with pytest.raises(TypeError, match="'N' has dtype int32"):
        gradcheck(y, [n])


@settings(max_examples=examples(150), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(random_program(max_inputs=3, max_computes=4, depth=2))
def test_random_programs_pass_gradcheck(program):
    inputs = [p for p in program.placeholders if p.dtype in ta.FLOAT_DTYPES]
    assert gradcheck(program.output, inputs, low=-2.0, high=2.0)


@settings(max_examples=examples(60), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(random_program(dtype=F, max_inputs=2, max_computes=3, depth=2))
def test_random_programs_second_order(program):
    inputs = [p for p in program.placeholders if p.dtype in ta.FLOAT_DTYPES]
    y = program.output
    h = ta.placeholder(y.shape, F, name="H")
    for g in jacobian_recursive(y, inputs, h):
        assert gradcheck(g, inputs + [h], low=-2.0, high=2.0)
