"""Reverse mode through every reducer: sum, max, min, prod (with zeros), argmax, custom ones.

Max, min, argmax and prod have dedicated adjoints (DESIGN.md lesson 2): a winner reduction
computed once and the head routed to it, or zero counts and products of the nonzero factors.
They must be exact (finite differences), pick the first winner at ties, and never build a
Jacobian-sized temporary.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.autodiff import jacobian_recursive
from tensorad.ir.rewrite import tensor_graph

F = "float64"


def argmax_reducer(first: bool = True):
    """(index, value); ``first``: ties keep the left operand (the first maximum in fold order)."""
    def combine(a, b):
        keep = a[1] >= b[1] if first else a[1] > b[1]
        return ta.select(keep, a[0], b[0]), ta.select(keep, a[1], b[1])

    return ta.comm_reducer(combine, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")


MYPROD = ta.comm_reducer(lambda a, b: a * b, lambda t: ta.const(1, t), name="myprod")
PROB_OR = ta.comm_reducer(lambda a, b: a + b + a * b, lambda t: ta.const(0, t), name="prob_or")
REDUCERS = {"sum": ta.sum, "max": ta.max, "min": ta.min, "prod": ta.prod, "myprod": MYPROD,
            "generic": PROB_OR}


def _head():
    return ta.placeholder((3,), F, name="H")


@pytest.mark.parametrize("name", list(REDUCERS))
def test_reducer_gradient(name, check_reverse):
    x = ta.placeholder((3, 4), F, name="X")
    w = ta.placeholder((4,), F, name="W")
    k = ta.reduce_axis((0, 4), name="k")
    red = REDUCERS[name]
    y = ta.compute((3,), lambda i: red(x[i, k] * w[k] + x[(i + 1) % 3, k] * 0.5, axis=k), name="Y")
    check_reverse(y, [x, w])


@pytest.mark.parametrize("name", ["sum", "max", "min", "prod"])
def test_reducer_with_where_and_two_axes(name, check_reverse):
    x = ta.placeholder((2, 3, 3), F, name="X")
    r = ta.reduce_axis((0, 3), name="r")
    s = ta.reduce_axis((1, 3), name="s")
    red = REDUCERS[name]
    y = ta.compute((2,), lambda i: red(ta.sin(x[i, r, s]) + 1.5, axis=[r, s], where=r + s != 2), name="Y")
    check_reverse(y, [x])


@pytest.mark.parametrize("zeros", [0, 1, 2])
def test_prod_with_zero_factors(zeros, check_reverse, rng):
    x = ta.placeholder((2, 4), F, name="X")
    k = ta.reduce_axis((0, 4), name="k")
    y = ta.compute((2,), lambda i: ta.prod(x[i, k], axis=k), name="Y")
    data = rng.uniform(0.5, 1.5, size=(2, 4))
    data[0, :zeros] = 0.0  # zeros at the start of row 0, at the end of row 1
    data[1, 4 - zeros:] = 0.0
    got = check_reverse(y, [x], data={x: data})[0]
    if zeros == 2:  # the product of the others always contains a zero
        assert np.all(got == 0.0)
    if zeros == 1:  # only the zero factor has a nonzero derivative
        assert np.count_nonzero(got[0]) == 1 and got[0, 0] != 0


@pytest.mark.parametrize("linked", [False, True])
def test_prod_adjoint_uses_zero_count_or_exclusive_scans_not_jacobian(linked):
    """A plain box product differentiates from its zero count and nonzero product (one reduction of two
    outputs), a product whose ``where`` reads data from exclusive scans; neither builds the generic
    Jacobian."""
    x = ta.placeholder((3, 5), F, name="X")
    k = ta.reduce_axis((0, 5), name="k")
    y = ta.compute((3,), lambda i: ta.prod(x[i, k], axis=k, where=x[i, k] > 0 if linked else None), name="Y")
    g = jacobian_recursive(y, [x], _head())[0]
    names = {t.name for t in tensor_graph([g])}
    assert ({"Y.before", "Y.after"} if linked else {"Y.zeros_prod"}) <= names
    if not linked:
        (op,) = {t.op for t in tensor_graph([g]) if t.name == "Y.zeros_prod"}
        assert op.num_outputs == 2
    assert "Y.jacobian" not in names


@pytest.mark.parametrize("red", [ta.max, ta.min])
def test_max_min_ties_split_the_gradient_evenly(red):
    # PyTorch's amax/amin (and max/min without dim) give each of n tied elements 1/n
    x = ta.placeholder((2, 4), F, name="X")
    k = ta.reduce_axis((0, 4), name="k")
    y = ta.compute((2,), lambda i: red(x[i, k], axis=k), name="Y")
    h = ta.placeholder((2,), F, name="H")
    g = jacobian_recursive(y, [x], h)[0]
    data = np.array([[1.0, 3.0, 3.0, 0.0], [-2.0, 0.5, 0.5, 0.5]])
    if red is ta.min:
        data = -data
    got = ta.evaluate(g, {x: data, h: np.array([1.0, 3.0])})
    np.testing.assert_array_equal(got, [[0, 0.5, 0.5, 0], [0, 1, 1, 1]])
    built = ta.build([g], [x, h])(data, np.array([1.0, 3.0]))
    np.testing.assert_array_equal(built, got)


def _find_head(g):
    return [t for t in tensor_graph([g]) if t.name == "H"][0]


def test_max_ties_on_several_axes_split_evenly():
    x = ta.placeholder((3, 3), F, name="X")
    r = ta.reduce_axis((0, 3), name="r")
    s = ta.reduce_axis((0, 3), name="s")
    y = ta.compute((), lambda: ta.max(x[r, s], axis=[r, s]), name="Y")
    g = jacobian_recursive(y, [x])[0]
    data = np.zeros((3, 3))
    data[2, 0] = data[1, 2] = data[2, 2] = 5.0  # three maxima: a third each
    want = np.zeros((3, 3))
    want[2, 0] = want[1, 2] = want[2, 2] = 1.0 / 3.0
    np.testing.assert_allclose(ta.evaluate(g, {x: data}), want, rtol=1e-15)


@pytest.mark.parametrize("first", [True, False])
def test_argmax_gradient_follows_the_forward_choice(first, check_reverse):
    am = argmax_reducer(first)
    x = ta.placeholder((2, 4), F, name="X")
    k = ta.reduce_axis((0, 4), name="k")
    idx, val = ta.compute((2,), lambda i: am((k, x[i, k] * 2.0), axis=k), name="AM")
    check_reverse(val, [x])
    g = jacobian_recursive(val, [x], ta.placeholder((2,), F, name="H"))[0]
    data = np.array([[1.0, 3.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    feed = {x: data, _find_head(g): np.ones(2)}
    got = ta.evaluate(g, feed)
    chosen = ta.evaluate(idx, {x: data})
    want = np.zeros((2, 4))
    want[[0, 1], chosen] = 2.0
    np.testing.assert_array_equal(got, want)
    assert list(chosen) == ([1, 0] if first else [2, 3])


def test_argmax_tuple_with_value_and_index_outputs_used(check_reverse):
    am = argmax_reducer()
    x = ta.placeholder((3, 4), F, name="X")
    k = ta.reduce_axis((0, 4), name="k")
    idx, val = ta.compute((3,), lambda i: am((k, ta.tanh(x[i, k])), axis=k), name="AM")
    y = ta.compute((3,), lambda i: val[i] * ta.cast(F, idx[i] + 1), name="Y")
    check_reverse(y, [x])


def test_max_adjoint_has_no_jacobian_sized_temporaries():
    x = ta.placeholder((1, 2, 8, 8), F, name="X")
    r = ta.reduce_axis((0, 2), name="r")
    s = ta.reduce_axis((0, 2), name="s")
    y = ta.compute((1, 2, 4, 4), lambda n, c, i, j: ta.max(x[n, c, i * 2 + r, j * 2 + s], axis=[r, s]),
                   name="maxpool")
    g = jacobian_recursive(y, [x], ta.placeholder(y.shape, F, name="H"))[0]
    sizes = {t.name: int(np.prod(t.shape)) for t in tensor_graph([g])}
    assert max(sizes.values()) <= 128, sizes  # the size of X; never X.size * Y.size
    reductions = {t.op for t in tensor_graph([g]) if not t.is_placeholder and t.op.is_reduction}
    # the winner: one pass over the window giving the max and an int32 sum of a code of the points
    # equal to it (their count and, for a lone winner, its flattened index k0 * 2 + k1), no other pass
    assert [[b.dtype for b in op.body] for op in reductions if op.name.startswith("maxpool")] == [
        ["float64", "int32"]]


def test_max_pool_gradient(check_reverse):
    x = ta.placeholder((1, 2, 4, 4), F, name="X")
    r = ta.reduce_axis((0, 2), name="r")
    s = ta.reduce_axis((0, 2), name="s")
    y = ta.compute((1, 2, 2, 2), lambda n, c, i, j: ta.max(x[n, c, i * 2 + r, j * 2 + s], axis=[r, s]),
                   name="maxpool")
    check_reverse(y, [x])


def test_max_of_a_product_of_the_input_with_itself(check_reverse):
    # max_k A[i,k] * A[k,j]: n^5 work with a generic Jacobian; here a winner per (i, j)
    a = ta.placeholder((3, 3), F, name="A")
    k = ta.reduce_axis((0, 3), name="k")
    y = ta.compute((3, 3), lambda i, j: ta.max(a[i, k] * a[k, j], axis=k), name="Y")
    check_reverse(y, [a])
    g = jacobian_recursive(y, [a], ta.placeholder((3, 3), F, name="H"))[0]
    assert max(int(np.prod(t.shape)) for t in tensor_graph([g])) <= 9


def test_custom_max_written_with_select(check_reverse):
    mx = ta.comm_reducer(lambda a, b: ta.select(a > b, a, b), lambda t: ta.min_value(t), name="selmax")
    x = ta.placeholder((3, 4), F, name="X")
    k = ta.reduce_axis((0, 4), name="k")
    y = ta.compute((3,), lambda i: mx(ta.exp(x[i, k]), axis=k), name="Y")
    check_reverse(y, [x])
    g = jacobian_recursive(y, [x], _head())[0]
    assert any(t.name == "Y.winner" for t in tensor_graph([g]))


def test_empty_max_has_zero_gradient(rng):
    x = ta.placeholder((3, 3), F, name="X")
    k = ta.reduce_axis((0, 3), name="k")
    y = ta.compute((3,), lambda i: ta.max(x[i, k], axis=k, where=k < i), name="Y")  # row 0: empty
    g = jacobian_recursive(y, [x], _head())[0]
    got = ta.evaluate(g, {x: rng.uniform(-1, 1, (3, 3)), _find_head(g): np.ones(3)})
    assert np.all(got[0] == 0) and got[1, 0] == 1 and got[2].sum() == 1


def test_generic_combiner_contracts_its_jacobian(check_reverse):
    x = ta.placeholder((3, 4), F, name="X")
    k = ta.reduce_axis((0, 4), name="k")
    y = ta.compute((3,), lambda i: PROB_OR(x[i, k] * 0.3, axis=k), name="Y")
    g = jacobian_recursive(y, [x], _head())[0]
    assert any(t.name == "Y.jacobian" for t in tensor_graph([g]))
    check_reverse(y, [x])
