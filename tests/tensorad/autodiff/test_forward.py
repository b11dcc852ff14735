"""Forward mode (jvp), Hessian-vector products and second-order gradients against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.autodiff import gradcheck, hessian_vector_product, jacobian_recursive, jvp
from tensorad.ir.rewrite import tensor_graph

F = "float64"


def _chain():
    x = ta.placeholder((2, 3), F, name="X")
    w = ta.placeholder((4, 3), F, name="W")
    k = ta.reduce_axis((0, 3), name="k")
    d = ta.compute((2, 4), lambda i, j: ta.sum(x[i, k] * w[j, k], axis=k), name="dense")
    m = ta.reduce_axis((0, 4), name="m")
    mx = ta.compute((2,), lambda i: ta.max(d[i, m], axis=m), name="rowmax")
    e = ta.compute((2, 4), lambda i, j: ta.exp(d[i, j] - mx[i]), name="exps")
    s = ta.compute((2,), lambda i: ta.sum(e[i, m], axis=m), name="sumexps")
    y = ta.compute((2, 4), lambda i, j: e[i, j] / s[i] * ta.if_then_else(j > 0, w[j - 1, 0], 1.0),
                   name="Y")
    return x, w, y


def test_jvp_matches_finite_differences(rng, numeric_grad):
    x, w, y = _chain()
    vx = ta.placeholder(x.shape, F, name="VX")
    vw = ta.placeholder(w.shape, F, name="VW")
    data = {x: rng.uniform(-1, 1, x.shape), w: rng.uniform(-1, 1, w.shape),
            vx: rng.uniform(-1, 1, x.shape), vw: rng.uniform(-1, 1, w.shape)}
    t = jvp(y, [x, w], [vx, vw])
    assert t.shape == y.shape and t.dtype == y.dtype
    got = ta.evaluate(t, data)
    jx, jw = numeric_grad(lambda a, b: ta.evaluate(y, {x: a, w: b}), [data[x], data[w]])
    want = (np.tensordot(jx, data[vx], axes=2) + np.tensordot(jw, data[vw], axes=2))
    np.testing.assert_allclose(got, want, atol=1e-7)


@pytest.mark.parametrize("red", ["sum", "max", "min", "prod", "argmax"])
def test_jvp_through_reductions_is_linear_in_size(red, rng, numeric_grad):
    x = ta.placeholder((3, 4), F, name="X")
    k = ta.reduce_axis((0, 4), name="k")
    if red == "argmax":
        am = ta.comm_reducer(
            lambda a, b: (ta.select(a[1] >= b[1], a[0], b[0]), ta.select(a[1] >= b[1], a[1], b[1])),
            lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")
        _, y = ta.compute((3,), lambda i: am((k, ta.sin(x[i, k])), axis=k), name="Y")
    else:
        y = ta.compute((3,), lambda i: getattr(ta, red)(ta.sin(x[i, k]) + 1.2, axis=k), name="Y")
    v = ta.placeholder(x.shape, F, name="V")
    t = jvp(y, [x], [v])
    assert max(int(np.prod(u.shape)) for u in tensor_graph([t])) <= 12
    data = {x: rng.uniform(-1, 1, x.shape), v: rng.uniform(-1, 1, x.shape)}
    jx = numeric_grad(lambda a: ta.evaluate(y, {x: a}), [data[x]])[0]
    np.testing.assert_allclose(ta.evaluate(t, data), np.tensordot(jx, data[v], axes=2), atol=1e-7)


def test_jvp_of_an_independent_output_is_zero():
    x = ta.placeholder((3,), F, name="X")
    z = ta.placeholder((3,), F, name="Z")
    y = ta.compute((3,), lambda i: ta.exp(z[i]), name="Y")
    t = jvp(y, [x], [ta.placeholder((3,), F, name="V")])
    np.testing.assert_array_equal(ta.evaluate(t, {z: np.ones(3)}), np.zeros(3))


def test_jvp_checks_tangent_shapes():
    x = ta.placeholder((3,), F, name="X")
    y = ta.compute((3,), lambda i: x[i] * 2.0, name="Y")
    with pytest.raises(ValueError, match=r"tangent of 'X' must be a tensor of shape \[3\]"):
        jvp(y, [x], [ta.placeholder((4,), F, name="V")])
    with pytest.raises(ValueError, match="1 inputs but 2 tangents"):
        jvp(y, [x], [ta.placeholder((3,), F), ta.placeholder((3,), F)])


def test_hessian_vector_product(rng, numeric_grad):
    x = ta.placeholder((4,), F, name="X")
    w = ta.placeholder((4, 4), F, name="W")
    k = ta.reduce_axis((0, 4), name="k")
    m = ta.reduce_axis((0, 4), name="m")
    h = ta.compute((4,), lambda i: ta.tanh(ta.sum(w[i, k] * x[k], axis=k)), name="h")
    loss = ta.compute((), lambda: ta.sum(h[m] * h[m] * x[m], axis=m), name="loss")
    vx = ta.placeholder((4,), F, name="VX")
    vw = ta.placeholder((4, 4), F, name="VW")
    hx, hw = hessian_vector_product(loss, [x, w], [vx, vw])
    assert hx.shape == (4,) and hw.shape == (4, 4)
    data = {x: rng.uniform(-1, 1, 4), w: rng.uniform(-1, 1, (4, 4)),
            vx: rng.uniform(-1, 1, 4), vw: rng.uniform(-1, 1, (4, 4))}
    gx, gw = jacobian_recursive(loss, [x, w])

    def grads(a, b):
        return np.concatenate([g.ravel() for g in ta.evaluate([gx, gw], {x: a, w: b})])

    jx, jw = numeric_grad(grads, [data[x], data[w]])
    hv = np.tensordot(jx, data[vx], axes=1) + np.tensordot(jw, data[vw], axes=2)
    got = np.concatenate([a.ravel() for a in ta.evaluate([hx, hw], data)])
    np.testing.assert_allclose(got, hv, atol=1e-6)


def test_hessian_vector_product_needs_a_scalar():
    x = ta.placeholder((3,), F, name="X")
    y = ta.compute((3,), lambda i: x[i] * x[i], name="Y")
    with pytest.raises(ValueError, match="must be a scalar"):
        hessian_vector_product(y, [x], [ta.placeholder((3,), F)])


@pytest.mark.parametrize("red", ["sum", "max", "prod", "argmax"])
def test_second_order_gradient_against_finite_differences(red):
    x = ta.placeholder((2, 3), F, name="X")
    k = ta.reduce_axis((0, 3), name="k")
    if red == "argmax":
        am = ta.comm_reducer(
            lambda a, b: (ta.select(a[1] >= b[1], a[0], b[0]), ta.select(a[1] >= b[1], a[1], b[1])),
            lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")
        _, y = ta.compute((2,), lambda i: am((k, x[i, k] * x[1 - i, k]), axis=k), name="Y")
    else:
        y = ta.compute((2,), lambda i: getattr(ta, red)(ta.sin(x[i, k] * x[1 - i, k]) + 1.5, axis=k),
                       name="Y")
    h = ta.placeholder((2,), F, name="H")
    g = jacobian_recursive(y, [x], h)[0]
    # grad of grad (reverse over reverse) and jvp of grad (forward over reverse), both vs FD
    assert gradcheck(g, [x, h])
    gg = jacobian_recursive(g, [x], ta.placeholder(g.shape, F, name="H2"))[0]
    assert gradcheck(gg, [x, h], forward=False, max_elements=16)
