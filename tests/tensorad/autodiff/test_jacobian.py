"""``jacobian``: the elementwise Jacobian, its seed form, every reducer, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.autodiff import jacobian
from tensorad.ir import Op

F = "float64"


def _fd_jacobian(numeric_grad, y, x, data):
    def forward(v):
        return ta.evaluate(y, {**data, x: v})

    return numeric_grad(forward, [data[x]])[0]


def test_dense_jacobian_has_the_seed_form(rng, numeric_grad):
    x = ta.placeholder((3, 4), F, name="X")
    w = ta.placeholder((5, 4), F, name="W")
    k = ta.reduce_axis((0, 4), name="k")
    y = ta.compute((3, 5), lambda i, j: ta.sum(x[i, k] * w[j, k], axis=k), name="Y")
    jac = jacobian(y, w)
    assert jac.shape == (3, 5, 5, 4)
    assert [a.name for a in jac.op.axes] == ["i", "j", "jac_i0", "jac_i1"]
    text = ta.PrintTensorRecursively(jac)
    # the seed's X(i, k) * select(delta, 1, 0), with the product inside the select: its zero
    # branch is a strong zero (tensorad/autodiff/zero.py)
    assert "source[0] = select(((jac_i0 == j) && (jac_i1 == k)), X(i, k), 0.000000)" in text
    assert "tensor W" not in text  # W(j, k) became the delta
    data = {x: rng.normal(size=(3, 4)), w: rng.normal(size=(5, 4))}
    np.testing.assert_allclose(ta.evaluate(jac, data), _fd_jacobian(numeric_grad, y, w, data), atol=1e-8)


@pytest.mark.parametrize("reducer", ["sum", "max", "min", "prod", "myprod", "generic"])
def test_every_reducer(reducer, rng, numeric_grad):
    custom = {
        "myprod": ta.comm_reducer(lambda a, b: a * b, lambda t: ta.const(1, t), name="myprod"),
        "generic": ta.comm_reducer(lambda a, b: a + b + a * b, lambda t: ta.const(0, t), name="por"),
    }
    red = custom.get(reducer) or getattr(ta, reducer)
    x = ta.placeholder((3, 4), F, name="X")
    k = ta.reduce_axis((0, 4), name="k")
    y = ta.compute((3,), lambda i: red(x[i, k] * 0.5, axis=k, where=k != i), name="Y")
    jac = jacobian(y, x)
    body = jac.op.body[0]
    assert body.op is Op.REDUCE
    if reducer == "sum":
        assert body.arg.combiner.arity == 1
    else:  # the seed's generic form: a reduction over (derivative, value) pairs
        comb = body.arg.combiner
        assert comb.arity == 2 and comb.lhs[0].name.endswith(".der")
    data = {x: rng.uniform(-1, 1, size=(3, 4))}
    np.testing.assert_allclose(ta.evaluate(jac, data), _fd_jacobian(numeric_grad, y, x, data), atol=1e-8)


def test_max_jacobian_prints_like_the_seed_max_pool():
    x = ta.placeholder((1, 4), F, name="X")
    r = ta.reduce_axis((0, 2), name="rv")
    y = ta.compute((1, 2), lambda i, j: ta.max(x[i, j * 2 + r], axis=r), name="Y")
    text = ta.PrintTensorRecursively(jacobian(y, x))
    assert "lhs [x.der, x]  rhs [y.der, y]" in text
    # the seed's ``x >= y``, and a NaN running value keeps its tangent (docs/conventions.md)
    assert "combiner [select(((x >= y) || (x != x)), x.der, y.der), max(x, y)]" in text
    assert "source[0] = select(((jac_i0 == i) && (jac_i1 == ((j * 2) + rv))), 1.000000, 0.000000)" in text
    assert "source[1] = X(i, ((j * 2) + rv))" in text


def test_multi_output_argmax(rng, numeric_grad):
    argmax = ta.comm_reducer(
        lambda a, b: (ta.select(a[1] >= b[1], a[0], b[0]), ta.select(a[1] >= b[1], a[1], b[1])),
        lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")
    x = ta.placeholder((3, 4), F, name="X")
    k = ta.reduce_axis((0, 4), name="k")
    idx, val = ta.compute((3,), lambda i: argmax((k, ta.exp(x[i, k])), axis=k), name="Y")
    data = {x: rng.uniform(-1, 1, size=(3, 4))}
    np.testing.assert_allclose(ta.evaluate(jacobian(val, x), data),
                               _fd_jacobian(numeric_grad, val, x, data), atol=1e-8)
    with pytest.raises(TypeError, match="int32"):
        jacobian(idx, x)


def test_indirect_reads_follow_the_chain_rule_and_identity():
    x = ta.placeholder((3,), F, name="X")
    e = ta.compute((3,), lambda i: ta.exp(x[i]), name="E")
    y = ta.compute((3,), lambda i: e[i] * 2.0, name="Y")
    data = {x: np.array([0.1, 0.2, 0.3])}
    np.testing.assert_allclose(ta.evaluate(jacobian(y, x), data), np.diag(2 * np.exp(data[x])),
                               rtol=1e-12)
    np.testing.assert_array_equal(ta.evaluate(jacobian(x, x), data), np.eye(3))
    other = ta.placeholder((2,), F, name="Z")
    np.testing.assert_array_equal(ta.evaluate(jacobian(other, x), {**data, other: np.ones(2)}),
                                  np.zeros((2, 3)))


def test_optimizer_is_applied_to_the_result():
    x = ta.placeholder((3,), F, name="X")
    y = ta.compute((3,), lambda i: x[i] * x[i], name="Y")
    seen = []

    def optimizer(t):
        seen.append(t)
        return t

    jac = jacobian(y, x, optimizer=optimizer)
    assert seen == [jac]


def test_integer_tensors_are_not_differentiable():
    x = ta.placeholder((3,), "int32", name="N")
    f = ta.placeholder((3,), F, name="X")
    y = ta.compute((3,), lambda i: ta.cast(F, x[i]) * f[i], name="Y")
    yi = ta.compute((3,), lambda i: x[i] * 2, name="YI")
    with pytest.raises(TypeError, match="'N' has dtype int32"):
        jacobian(y, x)
    with pytest.raises(TypeError, match="'YI' has dtype int32"):
        jacobian(yi, f)
