"""``jacobian_recursive``: reverse accumulation against finite differences, its form, its options.

Gradients are built without the optimizer (the raw head-product form must be right on its
own) and checked with the ``check_reverse`` fixture (conftest.py): random data, random head,
central finite differences of ``ta.evaluate`` of the forward program.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.autodiff import jacobian_recursive
from tensorad.ir import Op
from tensorad.ir.rewrite import op_reads, tensor_graph

F = "float64"


def _reductions(t):
    return [u for u in tensor_graph([t]) if not u.is_placeholder and u.op.is_reduction]


def test_dense_gradient_is_one_head_product(check_reverse):
    x = ta.placeholder((3, 4), F, name="X")
    w = ta.placeholder((5, 4), F, name="W")
    b = ta.placeholder((5,), F, name="B")
    k = ta.reduce_axis((0, 4), name="k")
    y = ta.compute((3, 5), lambda i, j: ta.sum(x[i, k] * w[j, k], axis=k) + b[j], name="Y")
    check_reverse(y, [x, w, b])
    plain = ta.compute((3, 5), lambda i, j: ta.sum(x[i, k] * w[j, k], axis=k), name="Y")
    h = ta.placeholder((3, 5), F, name="H")
    gw = jacobian_recursive(plain, [w], h)[0]
    text = ta.PrintTensorRecursively(gw)
    assert "condition ((j == ax0) && (k == ax1))" in text
    assert "source[0] = (H(i, j) * X(i, k))" in text


def test_transposed_and_repeated_reads_give_separate_terms(check_reverse):
    # Y covers only part of A (3x3 of 4x4), so each read site's term is a reduction to solve
    a = ta.placeholder((4, 4), F, name="A")
    y = ta.compute((3, 3), lambda i, j: a[i, j] + a[j, i] * a[j, i], name="Y")
    check_reverse(y, [a])
    g = jacobian_recursive(y, [a], ta.placeholder((3, 3), F, name="H"))[0]
    body = g.op.body[0]
    assert body.op is Op.ADD  # two terms, one per read site, each its own reduction
    terms = [r for r in op_reads(g.op)]
    assert len(terms) == 2 and all(t.op.is_reduction for t in terms)
    conds = sorted(str(t.op.body[0].src[0]) for t in terms)
    assert conds == ["((i == ax0) && (j == ax1))", "((j == ax0) && (i == ax1))"]


def test_bijective_reads_give_direct_terms_without_reductions(check_reverse):
    # Y covers all of A: the equation phi(i, j) == (ax0, ax1) has the one solution, so each
    # site's term is the head at the inverse point (no reduction left for the optimizer)
    a = ta.placeholder((3, 3), F, name="A")
    y = ta.compute((3, 3), lambda i, j: a[i, j] + a[j, i] * a[j, i], name="Y")
    check_reverse(y, [a])
    g = jacobian_recursive(y, [a], ta.placeholder((3, 3), F, name="H"))[0]
    assert g.op.body[0].op is Op.ADD
    assert not _reductions(g)


def test_reversed_read(check_reverse):
    x = ta.placeholder((6,), F, name="X")
    y = ta.compute((6,), lambda i: x[i] * x[5 - i], name="Y")
    check_reverse(y, [x])


def test_chain_dense_exp_softmax(check_reverse):
    x = ta.placeholder((2, 3), F, name="X")
    w = ta.placeholder((4, 3), F, name="W")
    k = ta.reduce_axis((0, 3), name="k")
    d = ta.compute((2, 4), lambda i, j: ta.sum(x[i, k] * w[j, k], axis=k), name="dense")
    e = ta.compute((2, 4), lambda i, j: ta.exp(d[i, j]), name="exps")
    m = ta.reduce_axis((0, 4), name="m")
    s = ta.compute((2,), lambda i: ta.sum(e[i, m], axis=m), name="sumexps")
    y = ta.compute((2, 4), lambda i, j: e[i, j] / s[i], name="softmax")
    check_reverse(y, [x, w])
    # the adjoint of exps is built once, as the sum of its two consumers' contributions
    gx = jacobian_recursive(y, [x], ta.placeholder((2, 4), F, name="H"))[0]
    adj_e = [t for t in tensor_graph([gx]) if t.name == "exps.grad"]
    assert len(adj_e) == 1
    assert len([t for t in tensor_graph([gx]) if t.name == "dense.grad"]) == 1


def test_where_and_lifted_reduction(check_reverse):
    x = ta.placeholder((4, 4), F, name="X")
    k = ta.reduce_axis((0, 4), name="k")
    y = ta.compute((4,), lambda i: ta.sum(x[i, k] * x[k, i], axis=k, where=k <= i) * 0.5 + x[i, i],
                   name="Y")
    check_reverse(y, [x])


def test_if_then_else_padding(check_reverse):
    x = ta.placeholder((2, 3, 3), F, name="X")
    w = ta.placeholder((3, 3), F, name="W")
    padded = ta.compute((2, 5, 5), lambda c, i, j: ta.if_then_else(
        (i >= 1) & (i < 4) & (j >= 1) & (j < 4), x[c, i - 1, j - 1], 0.0), name="pad")
    r = ta.reduce_axis((0, 3), name="r")
    s = ta.reduce_axis((0, 3), name="s")
    y = ta.compute((2, 3, 3), lambda c, i, j: ta.sum(padded[c, i + r, j + s] * w[r, s], axis=[r, s]),
                   name="conv")
    check_reverse(y, [x, w])


def test_flatten_with_div_and_mod(check_reverse):
    x = ta.placeholder((2, 3, 4), F, name="X")
    y = ta.compute((2, 12), lambda n, i: x[n, i // 4, i % 4] * 2.0, name="flatten")
    check_reverse(y, [x])


def test_avg_and_strided_windows(check_reverse):
    x = ta.placeholder((5, 5), F, name="X")
    r = ta.reduce_axis((0, 3), name="r")
    s = ta.reduce_axis((0, 3), name="s")
    y = ta.compute((2, 2), lambda i, j: ta.sum(x[i * 2 + r, j * 2 + s], axis=[r, s]) / 9.0, name="avg")
    check_reverse(y, [x])


def test_head_with_a_prefix(check_reverse, rng):
    x = ta.placeholder((3,), F, name="X")
    y = ta.compute((3,), lambda i: ta.exp(x[i]) * x[(i + 1) % 3], name="Y")
    h = ta.placeholder((2, 4, 3), F, name="H")
    got = check_reverse(y, [x], head=h)
    assert got[0].shape == (2, 4, 3)


def test_head_none_is_the_full_jacobian(check_reverse):
    x = ta.placeholder((2, 3), F, name="X")
    y = ta.compute((3,), lambda j: ta.tanh(x[0, j] * x[1, 2 - j]), name="Y")
    got = check_reverse(y, [x], head=None)
    assert got[0].shape == (3, 2, 3)


def test_scalar_output_with_default_head(check_reverse):
    x = ta.placeholder((4,), F, name="X")
    k = ta.reduce_axis((0, 4), name="k")
    loss = ta.compute((), lambda: ta.sum(x[k] * x[k], axis=k), name="loss")
    got = check_reverse(loss, [x], head=None)
    assert got[0].shape == (4,)


def test_zero_dim_input(check_reverse):
    s = ta.placeholder((), F, name="S")
    x = ta.placeholder((3,), F, name="X")
    y = ta.compute((3,), lambda i: x[i] * s[()] + s[()] * s[()], name="Y")
    check_reverse(y, [s, x])


def test_unreached_inputs_get_zero_tensors(rng):
    x = ta.placeholder((3,), F, name="X")
    z = ta.placeholder((2, 2), "float32", name="Z")
    y = ta.compute((3,), lambda i: x[i] * 2.0, name="Y")
    gx, gz = jacobian_recursive(y, [x, z], ta.placeholder((3,), F, name="H"))
    assert gz.shape == (2, 2) and gz.dtype == "float32"
    assert gz.op.body[0].op is Op.CONST and gz.op.body[0].arg == 0


def test_irrelevant_tensors_are_never_differentiated():
    x = ta.placeholder((3,), F, name="X")
    c = ta.placeholder((3,), F, name="C")
    side = ta.compute((3,), lambda i: ta.exp(c[i]), name="side")  # does not depend on X
    y = ta.compute((3,), lambda i: x[i] * side[i], name="Y")
    g = jacobian_recursive(y, [x], ta.placeholder((3,), F, name="H"))[0]
    names = {t.name for t in tensor_graph([g])}
    assert "side.grad" not in names and "C.grad" not in names


def test_gradient_by_an_intermediate_tensor(check_reverse, rng, numeric_grad):
    x = ta.placeholder((3,), F, name="X")
    e = ta.compute((3,), lambda i: ta.exp(x[i]), name="E")
    y = ta.compute((3,), lambda i: e[i] * e[(i + 1) % 3] + x[i], name="Y")
    h = ta.placeholder((3,), F, name="H")
    ge, gx = jacobian_recursive(y, [e, x], h)
    data = {x: rng.uniform(-1, 1, 3), h: rng.uniform(-1, 1, 3)}
    ev = ta.evaluate(e, data)
    want_e = numeric_grad(lambda v: v * np.roll(v, -1) + data[x], [ev], head=data[h])[0]
    np.testing.assert_allclose(ta.evaluate(ge, data), want_e, atol=1e-8)
    check_reverse(y, [x])  # the total derivative by X goes through E as well


def test_mixed_dtypes(check_reverse, rng):
    x = ta.placeholder((3,), "float32", name="X")
    w = ta.placeholder((3,), F, name="W")
    y = ta.compute((3,), lambda i: ta.cast(F, ta.exp(x[i])) * w[i], name="Y")
    h = ta.placeholder((3,), F, name="H")
    gx, gw = jacobian_recursive(y, [x, w], h)
    assert (gx.dtype, gw.dtype) == ("float32", F)
    data = {x: rng.uniform(-1, 1, 3).astype("float32"), w: rng.uniform(-1, 1, 3), h: rng.uniform(-1, 1, 3)}
    want = data[h] * np.exp(data[x].astype(F)) * data[w]
    np.testing.assert_allclose(ta.evaluate(gx, data), want, rtol=1e-5)


def test_override_replaces_a_derivative_and_is_called_once_per_pair(check_reverse):
    x = ta.placeholder((3,), F, name="X")
    w = ta.placeholder((3,), F, name="W")
    mid = ta.compute((3,), lambda i: x[i] * w[i], name="mid")
    y = ta.compute((3,), lambda i: ta.sin(mid[i]), name="Y")
    calls = []

    def mid_grad(out, inp, head):
        calls.append((out, inp))
        other = w if inp == x else x  # d(x*w)/dx = w, d(x*w)/dw = x
        return ta.compute(head.shape, lambda i: head[i] * other[i] * 1.0, name=f"custom_{inp.name}")

    check_reverse(y, [x, w], override={mid: mid_grad})
    assert calls == [(mid, x), (mid, w)]


def test_override_result_shape_is_checked():
    x = ta.placeholder((3,), F, name="X")
    y = ta.compute((3,), lambda i: x[i] * 2.0, name="Y")
    bad = {y: lambda out, inp, head: ta.placeholder((4,), F, name="bad")}
    with pytest.raises(ValueError, match=r"override for 'Y'.*shape \[3\]"):
        jacobian_recursive(y, [x], ta.placeholder((3,), F, name="H"), override=bad)


def test_optimizer_sees_every_adjoint():
    x = ta.placeholder((3,), F, name="X")
    e = ta.compute((3,), lambda i: ta.exp(x[i]), name="E")
    y = ta.compute((3,), lambda i: e[i] * 2.0, name="Y")
    seen = []
    jacobian_recursive(y, [x], ta.placeholder((3,), F, name="H"),
                       optimizer=lambda t: seen.append(t.name) or t)
    assert seen == ["E.grad", "X.grad"]


def test_integer_gradient_is_a_type_error():
    n = ta.placeholder((3,), "int32", name="N")
    x = ta.placeholder((3,), F, name="X")
    y = ta.compute((3,), lambda i: ta.cast(F, n[i]) * x[i], name="Y")
    with pytest.raises(TypeError, match="'N' has dtype int32; only floating-point"):
        jacobian_recursive(y, [n])
    yi = ta.compute((3,), lambda i: n[i] + 1, name="YI")
    with pytest.raises(TypeError, match="'YI' has dtype int32"):
        jacobian_recursive(yi, [x])


@pytest.mark.parametrize("shape", [(3, 4), (4,), (2,)])
def test_mismatched_head_shape_is_a_value_error(shape):
    x = ta.placeholder((3,), F, name="X")
    y = ta.compute((3, 4), lambda i, j: x[i] * 2.0, name="Y")
    h = ta.placeholder(shape[::-1] if shape == (3, 4) else shape, F, name="H")
    msg = r"head 'H' has shape .* must be prefix \+ the output's shape \[3, 4\]"
    with pytest.raises(ValueError, match=msg):
        jacobian_recursive(y, [x], h)


def test_gradients_are_deterministic():
    def build():
        x = ta.placeholder((3, 3), F, name="X")
        k = ta.reduce_axis((0, 3), name="k")
        y = ta.compute((3,), lambda i: ta.max(x[i, k] + x[k, i], axis=k), name="Y")
        return ta.PrintTensorRecursively(jacobian_recursive(y, [x], ta.placeholder((3,), F, name="H"))[0])

    assert build() == build()


def test_multi_output_elementwise_op(check_reverse):
    x = ta.placeholder((3,), F, name="X")
    w = ta.placeholder((3,), F, name="W")
    s, c = ta.compute((3,), lambda i: (ta.sin(x[i]) * w[i], ta.cos(x[(i + 1) % 3])), name="SC")
    y = ta.compute((3,), lambda i: s[i] * c[2 - i] + c[i], name="Y")
    check_reverse(y, [x, w])
    check_reverse(c, [x, w])  # the output is one output of a tuple op


def test_output_that_is_an_input(rng):
    x = ta.placeholder((2,), F, name="X")
    h = ta.placeholder((3, 2), F, name="H")
    gx, = jacobian_recursive(x, [x], h)
    assert gx is h
    ident, = jacobian_recursive(x, [x])
    np.testing.assert_array_equal(ta.evaluate(ident, {}), np.eye(2))


def test_override_receives_the_original_tensor_objects():
    # API.md: "called ... with the original tensor objects" (`out is t2` was False)
    x = ta.placeholder((3,), F, name="X")
    t1 = ta.compute((3,), lambda i: x[i] * 2.0, name="T1")
    t2 = ta.compute((3,), lambda i: ta.exp(t1[i]), name="T2")
    loss = ta.compute((), lambda: t2[0] + t2[2], name="L")
    seen = []

    def t2_grad(out, inp, head):
        seen.append((out is t2, inp is t1))
        return ta.compute((3,), lambda i: head[i] * ta.exp(t1[i]), name="custom")

    gx = jacobian_recursive(loss, [x], override={t2: t2_grad})[0]
    assert seen == [(True, True)]
    xv = np.array([0.1, -0.2, 0.3])
    want = np.array([2 * np.exp(0.2), 0.0, 2 * np.exp(0.6)])
    np.testing.assert_allclose(ta.evaluate(gx, {x: xv}), want, rtol=1e-12)
