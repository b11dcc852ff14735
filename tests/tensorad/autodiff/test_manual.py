"""The seed's manual path: Jacobian -> generalized_matmul with a head -> inline -> (optimize)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.autodiff import generalized_matmul, inline_non_reductions, jacobian, jacobian_recursive
from tensorad.ir.rewrite import op_reads

F = "float64"


@pytest.mark.parametrize("ndims", [0, 1, 2])
def test_generalized_matmul_matches_numpy(ndims, rng):
    a = ta.placeholder((2, 3, 4), F, name="A")
    b_shape = {0: (5,), 1: (4, 5), 2: (3, 4, 5)}[ndims]
    b = ta.placeholder(b_shape, F, name="B")
    c = generalized_matmul(a, b, ndims)
    da, db = rng.normal(size=a.shape), rng.normal(size=b.shape)
    want = np.tensordot(da, db, axes=ndims)
    assert c.shape == want.shape
    np.testing.assert_allclose(ta.evaluate(c, {a: da, b: db}), want, atol=1e-12)


def test_generalized_matmul_shape_errors():
    a = ta.placeholder((2, 3), F, name="A")
    b = ta.placeholder((4, 5), F, name="B")
    with pytest.raises(ValueError, match="do not match"):
        generalized_matmul(a, b, 1)
    with pytest.raises(ValueError, match="cannot contract 3 axes"):
        generalized_matmul(a, b, 3)


def test_inline_non_reductions(rng):
    x = ta.placeholder((3,), F, name="X")
    e = ta.compute((3,), lambda i: ta.exp(x[i]), name="E")
    f = ta.compute((3,), lambda i: e[i] * 2.0, name="F")
    k = ta.reduce_axis((0, 3), name="k")
    s = ta.compute((3,), lambda i: ta.sum(f[k] * x[i], axis=k), name="S")
    r = ta.compute((3,), lambda i: s[i] + f[i], name="R")
    inlined = inline_non_reductions(r, [f, e, s])  # s is a reduction: kept as a read
    assert {t.name for t in op_reads(inlined.op)} == {"S", "X"}
    data = {x: rng.normal(size=3)}
    np.testing.assert_allclose(ta.evaluate(inlined, data), ta.evaluate(r, data))
    s2 = inline_non_reductions(s, [f])  # inlining into a reduction's source
    assert {t.name for t in op_reads(s2.op)} == {"E", "X"}
    np.testing.assert_allclose(ta.evaluate(s2, data), ta.evaluate(s, data))
    assert inline_non_reductions(r, []) is r


def test_seed_manual_path_agrees_with_jacobian_recursive(rng):
    x = ta.placeholder((3, 4), F, name="X")
    w = ta.placeholder((5, 4), F, name="W")
    k = ta.reduce_axis((0, 4), name="k")
    y = ta.compute((3, 5), lambda i, j: ta.sum(x[i, k] * w[j, k], axis=k), name="Y")
    h = ta.placeholder((3, 5), F, name="H")
    d_w = jacobian(y, w)                              # [3, 5, 5, 4]
    manual = generalized_matmul(h, d_w, 2)            # [5, 4]
    manual = inline_non_reductions(manual, [d_w])     # d_w is a reduction: left as is
    sig = ta.compute((3, 5), lambda i, j: ta.sigmoid(x[i, j % 4]) * w[j, j % 4], name="sig")
    d_sig = jacobian(sig, w)                          # a non-reduction Jacobian: inlined
    manual2 = inline_non_reductions(generalized_matmul(h, d_sig, 2), [d_sig])
    assert d_sig not in op_reads(manual2.op)
    data = {x: rng.normal(size=(3, 4)), w: rng.normal(size=(5, 4)), h: rng.normal(size=(3, 5))}
    auto = jacobian_recursive(y, [w], h)[0]
    auto2 = jacobian_recursive(sig, [w], h)[0]
    np.testing.assert_allclose(ta.evaluate(manual, data), ta.evaluate(auto, data), atol=1e-12)
    np.testing.assert_allclose(ta.evaluate(manual2, data), ta.evaluate(auto2, data), atol=1e-12)


def test_facade_names():
    assert ta.generalized_matmul is generalized_matmul
    assert ta.InlineNonReductions is inline_non_reductions
    assert ta.gradient is ta.JacobianRecursive
