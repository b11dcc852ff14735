"""Weak Python floats: an expression of Python floats takes the float dtype it meets.

A Python float (``2.0``, ``ta.const(2.0)``) is a weak float32 constant; an expression built only of
weak values and the integers they meet is weak; where it meets a strong float operand it is rebuilt at
that operand's dtype, each constant with its Python value.  A strong node (a tensor's body, a
comparison, a reduction) holds no weak operand."""

from __future__ import annotations

import pickle

import numpy as np

import tensorad as ta
from tensorad.ir import Op, walk
from tensorad.ir.expr import Expr


def _consts(e: Expr) -> list[Expr]:
    return [n for n in walk(e) if n.op is Op.CONST]


def test_a_python_float_is_weak_and_an_explicit_dtype_is_strong():
    weak, strong = ta.const(0.1), ta.const(0.1, "float32")
    assert weak.weak and not strong.weak
    assert weak.dtype == strong.dtype == "float32" and weak.value == strong.value == 0.1
    assert weak is not strong and weak is ta.const(0.1) and strong is ta.const(0.1, "float32")
    assert not ta.const(np.float32(0.1)).weak and not ta.const(3).weak
    assert pickle.loads(pickle.dumps(weak)) is weak and pickle.loads(pickle.dumps(strong)) is strong
    assert str(weak) == "0.100000" and str(strong) == "0.1f"


def test_an_expression_of_weak_values_is_weak_and_meeting_float64_rebuilds_it():
    X = ta.placeholder((4,), "float64", "X")
    i = ta.reduce_axis((0, 4), "i")
    e = (1.0 - ta.select(i > 1, 11 / 12, ta.sqrt(ta.const(2.0)))) / 3.0
    assert e.weak and e.dtype == "float32"
    y = e * X[i]
    assert y.dtype == "float64" and not any(n.weak for n in walk(y))
    assert {c.value for c in _consts(y) if c.dtype == "float64"} == {1.0, 11 / 12, 2.0, 3.0}
    assert y.src[0] is (X[i] * e).src[1]  # the same rebuilt subtree from either side


def test_an_integer_meeting_a_weak_float_is_weak_and_converts_once_to_the_float_it_meets():
    X = ta.placeholder((4,), "float64", "X")
    i = ta.reduce_axis((0, 4), "i")
    e = i * 0.1 + ta.exp(i) + i ** 2
    assert e.weak
    y = e + X[i]
    casts = [n for n in walk(y) if n.op is Op.CAST]
    assert casts and all(c.dtype == "float64" and c.src[0] is i for c in casts)
    assert ta.exp(i).weak and not (i + 1).weak and (i + 1).dtype == "int32"


def test_a_strong_float32_operand_rounds_the_weak_one_to_float32():
    X = ta.placeholder((4,), "float32", "X")
    i = ta.reduce_axis((0, 4), "i")
    y = (ta.const(1.0) - 0.1) * X[i]
    assert y.dtype == "float32" and not any(n.weak for n in walk(y))
    assert all(c.dtype == "float32" for c in _consts(y))


def test_comparisons_reductions_and_bodies_make_weak_values_float32():
    i = ta.reduce_axis((0, 4), "i")
    cond = i * 0.1 < ta.const(0.25)
    assert not cond.weak and all(not n.weak for n in walk(cond))
    assert all(c.dtype == "float32" for c in _consts(cond) if c.value in (0.1, 0.25))
    k = ta.reduce_axis((0, 3), "k")
    s = ta.sum(ta.const(0.5) * k, axis=k)
    assert s.dtype == "float32" and not any(n.weak for n in walk(s))
    T = ta.compute((4,), lambda j: ta.const(0.1) * 3.0 + j, "T")
    assert T.dtype == "float32" and not any(n.weak for n in walk(T.op.body[0]))
    T64 = ta.compute((4,), lambda j: ta.const(0.1) * 3.0 + j, "T64", dtype="float64")
    assert T64.op.body[0].dtype == "float64" and {c.dtype for c in _consts(T64.op.body[0])} == {"float64"}


def test_casts_of_weak_and_strong_constants():
    assert ta.cast("float64", ta.const(0.1)) is ta.const(0.1, "float64")
    assert ta.cast("float64", ta.const(0.1, "float32")).value == float(np.float32(0.1))
    assert ta.cast("float16", ta.const(0.1)) is ta.const(0.1, "float16")
    assert ta.cast("int32", ta.const(2.5) * 2.0).dtype == "int32"


def test_a_custom_reducer_identity_of_a_python_float_takes_the_source_dtype():
    X = ta.placeholder((3,), "float64", "X")
    k = ta.reduce_axis((0, 3), "k")
    mymin = ta.comm_reducer(lambda a, b: ta.minimum(a, b), lambda t: ta.const(0.1) * 10.0, "mymin")
    r = mymin(X[k], axis=k)
    (ident,) = r.arg.combiner.identity
    assert ident.dtype == "float64" and not ident.weak and not any(n.weak for n in walk(ident))


def test_a_long_chain_of_python_floats_is_rebuilt_without_deep_recursion():
    e = ta.const(0.0)
    for _ in range(5000):
        e = e + 0.001
    X = ta.placeholder((1,), "float64", "X")
    y = e * X[0]
    assert y.dtype == "float64" and not any(n.weak for n in walk(y))
    want = 0.0
    for _ in range(5000):
        want += 0.001
    T = ta.compute((1,), lambda j: e * X[j], "T")
    np.testing.assert_allclose(ta.evaluate(T, {X: np.ones(1)}), [want], rtol=1e-15)
