"""Hand-built head products (the forms autodiff produces) and what the optimizer makes of them.

Each test writes a gradient term the way autodiff does -- a sum over the consumer's points
with the read's equation in the where-condition -- then checks the optimized tensor's shape of
work (which reductions are left, over which extents) and its values against NumPy formulas.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta
from tensorad.ir import Op, tensor_graph
from tensorad.lang import check_op_bounds

opt = ta.OptimizeAndLiftNonzeronessConditions
RNG = np.random.default_rng(0)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _reduce_extents(t: ta.Tensor) -> list[int]:
    body = t.op.body[t.value_index]
    return [a.hi - a.lo for a in body.arg.axes] if body.op is Op.REDUCE else []


def _all_in_bounds(t: ta.Tensor) -> None:
    for u in tensor_graph([t]):
        if not u.is_placeholder:
            check_op_bounds(u.op)


def test_facade_binds_the_optimizer():
    from tensorad.simplify import optimize_and_lift_nonzeroness

    assert ta.OptimizeAndLiftNonzeronessConditions is optimize_and_lift_nonzeroness


def test_dense_weight_gradient_keeps_only_the_batch_sum():
    X, H = ta.placeholder((4, 6), name="X"), ta.placeholder((4, 5), name="H")
    i, j2, k2 = ta.reduce_axis((0, 4), "i"), ta.reduce_axis((0, 5), "j"), ta.reduce_axis((0, 6), "k")
    dW = ta.compute((5, 6), lambda jw, kw: ta.sum(H[i, j2] * X[i, k2], [i, j2, k2],
                                                  where=(j2 == jw) & (k2 == kw)), name="dW")
    out = opt(dW)
    assert _reduce_extents(out) == [4] and out.op.body[0].src[0] is ta.const(True)
    x, h = _rand(4, 6), _rand(4, 5)
    np.testing.assert_allclose(ta.evaluate(out, {X: x, H: h}), h.T @ x, rtol=1e-5)
    _all_in_bounds(out)


def test_avg_pool_gradient_iterates_over_the_window_footprint_only():
    H = ta.placeholder((4, 3), name="H")  # 3x3 windows, stride 2, over a 9x7 input
    oh, ow = ta.reduce_axis((0, 4), "oh"), ta.reduce_axis((0, 3), "ow")
    kh, kw = ta.reduce_axis((0, 3), "kh"), ta.reduce_axis((0, 3), "kw")
    dX = ta.compute((9, 7), lambda h, w: ta.sum(H[oh, ow] * (1.0 / 9), [oh, ow, kh, kw],
                                                where=(2 * oh + kh == h) & (2 * ow + kw == w)),
                    name="dX")
    out = opt(dX)
    assert _reduce_extents(out) == [2, 2]  # deskewed: at most 2 windows hold a point per axis
    h = _rand(4, 3)
    want = np.zeros((9, 7), np.float32)
    for a in range(4):
        for b in range(3):
            want[2 * a:2 * a + 3, 2 * b:2 * b + 3] += h[a, b] / 9
    np.testing.assert_allclose(ta.evaluate(out, {H: h}), want, rtol=1e-5)
    assert ta.lower([out], [H]).work == sum(1 for y in range(9) for a in range(4) if 0 <= y - 2 * a < 3) \
        * sum(1 for x in range(7) for b in range(3) if 0 <= x - 2 * b < 3)
    _all_in_bounds(out)


def test_flatten_gradient_solves_div_mod_and_has_no_reduction():
    H = ta.placeholder((2, 60), name="H")  # X [2, 3, 4, 5] flattened
    n2, k = ta.reduce_axis((0, 2), "n"), ta.reduce_axis((0, 60), "k")
    dX = ta.compute((2, 3, 4, 5), lambda n, a, b, c: ta.sum(
        H[n2, k], [n2, k], where=(n2 == n) & (k // 20 == a) & ((k // 5) % 4 == b) & (k % 5 == c)),
        name="dX")
    out = opt(dX)
    assert not out.op.is_reduction
    assert "H(n, (((20 * a) + (5 * b)) + c))" in str(out)
    h = _rand(2, 60)
    np.testing.assert_array_equal(ta.evaluate(out, {H: h}), h.reshape(2, 3, 4, 5))


def test_max_pool_gather_keeps_the_data_dependent_test_as_a_guard():
    H = ta.placeholder((3, 3), name="H")  # 3x3 windows, stride 2, over a 7x7 input
    Win = ta.placeholder((3, 3), dtype="int32", name="Win")  # flat index of the winner in its window
    oh, ow = ta.reduce_axis((0, 3), "oh"), ta.reduce_axis((0, 3), "ow")
    kh, kw = ta.reduce_axis((0, 3), "kh"), ta.reduce_axis((0, 3), "kw")
    dX = ta.compute((7, 7), lambda h, w: ta.sum(
        H[oh, ow], [oh, ow, kh, kw],
        where=(2 * oh + kh == h) & (2 * ow + kw == w) & (kh * 3 + kw == Win[oh, ow])), name="dX")
    out = opt(dX)
    assert _reduce_extents(out) == [2, 2]
    red = out.op.body[0]
    assert not any(n.op is Op.READ for n in _walk(red.src[0]))  # the where-condition is affine
    h = _rand(3, 3)
    win = RNG.integers(0, 9, (3, 3)).astype(np.int32)
    want = np.zeros((7, 7), np.float32)
    for a in range(3):
        for b in range(3):
            want[2 * a + win[a, b] // 3, 2 * b + win[a, b] % 3] += h[a, b]
    np.testing.assert_allclose(ta.evaluate(out, {H: h, Win: win}), want, rtol=1e-6)
    _all_in_bounds(out)


def _walk(e):
    from tensorad.ir import walk

    return walk(e)


def test_equation_with_a_winner_substitutes_a_variable_used_as_a_value():
    B = ta.placeholder((4,), name="B")
    Win = ta.placeholder((4,), dtype="int32", name="Win")
    k = ta.reduce_axis((0, 6), "k")
    T = ta.compute((4,), lambda i: ta.sum(B[i] * ta.cast("float32", k), k, where=k == Win[i]), name="T")
    out = opt(T)
    assert not out.op.is_reduction  # k := Win[i], guarded by 0 <= Win[i] <= 5
    b, win = _rand(4), np.array([0, 5, 2, 7], np.int32)  # 7: no k matches
    want = np.where(win < 6, b * win, 0).astype(np.float32)
    np.testing.assert_allclose(ta.evaluate(out, {B: b, Win: win}), want, rtol=1e-6)


def test_equation_with_a_winner_read_as_an_address_solves_a_variable_that_indexes_a_read():
    A = ta.placeholder((4, 6), name="A")
    Win = ta.placeholder((4,), dtype="int32", name="Win")
    k = ta.reduce_axis((0, 6), "k")
    T = ta.compute((4,), lambda i: ta.sum(A[i, k] * 2.0, k, where=k == Win[i]), name="T")
    out = opt(T)
    assert _reduce_extents(out) == []  # A[i, Win[i]], a clipped gather where 0 <= Win[i] < 6
    a, win = _rand(4, 6), np.array([0, 5, 2, 7], np.int32)
    want = np.array([2 * a[r, w] if w < 6 else 0.0 for r, w in enumerate(win)], np.float32)
    np.testing.assert_allclose(ta.evaluate(out, {A: a, Win: win}), want, rtol=1e-6)
    _all_in_bounds(out)


def test_softmax_head_product_splits_into_a_point_term_and_a_row_sum():
    H, Y = ta.placeholder((3, 5), name="H"), ta.placeholder((3, 5), name="Y")
    i2, j2 = ta.reduce_axis((0, 3), "i2"), ta.reduce_axis((0, 5), "j2")
    dX = ta.compute((3, 5), lambda i, j: ta.sum(
        H[i2, j2] * Y[i2, j2] * (ta.select(j2 == j, 1.0, 0.0) - Y[i2, j]), [i2, j2], where=i2 == i),
        name="dX")
    out = opt(dX)
    reds = [t for t in tensor_graph([out]) if not t.is_placeholder and t.op.is_reduction]
    assert [_reduce_extents(t) for t in reds] == [[5]]  # only sum_j H*Y is left
    h, y = _rand(3, 5), _rand(3, 5)
    want = h * y - y * (h * y).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(ta.evaluate(out, {H: h, Y: y}), want, rtol=1e-5, atol=1e-6)


def test_terms_with_different_index_maps_are_solved_separately():
    H = ta.placeholder((5, 5), name="H")  # the head of Y[i, j] = A[i, j] + A[j, i]
    i, j = ta.reduce_axis((0, 5), "i"), ta.reduce_axis((0, 5), "j")
    dA = ta.compute((5, 5), lambda p, q: ta.sum(
        H[i, j] * (ta.select((i == p) & (j == q), 1.0, 0.0) + ta.select((j == p) & (i == q), 1.0, 0.0)),
        [i, j]), name="dA")
    out = opt(dA)
    assert not out.op.is_reduction and ta.lower([out], [H]).work == 25
    h = _rand(5, 5)
    np.testing.assert_allclose(ta.evaluate(out, {H: h}), h + h.T, rtol=1e-6)


def test_mirrored_reads_give_two_terms():
    V = ta.placeholder((10,), name="V")
    Z = ta.compute((10,), lambda i: V[i] * V[9 - i], name="Z")
    HZ = ta.placeholder((10,), name="HZ")
    (dV,) = ta.JacobianRecursive(Z, [V], HZ)
    assert ta.lower([dV], [V, HZ]).work == 10
    v, hz = _rand(10), _rand(10)
    np.testing.assert_allclose(ta.evaluate(dV, {V: v, HZ: hz}), hz * v[::-1] + hz[::-1] * v[::-1],
                               rtol=1e-5)


def test_jacobian_of_dense_and_the_seed_manual_path():
    X, W = ta.placeholder((4, 6), name="X"), ta.placeholder((5, 6), name="W")
    Y = ta.topi.nn.dense(X, W)
    J = ta.Jacobian(Y, W)
    assert not J.op.is_reduction  # select(j == jac_i0, X(i, jac_i1), 0): no sum left
    H = ta.placeholder(Y.shape, name="H")
    G = opt(ta.InlineNonReductions(ta.generalized_matmul(H, J, 2), [J]))
    assert _reduce_extents(G) == [4]
    x, h = _rand(4, 6), _rand(4, 5)
    np.testing.assert_allclose(ta.evaluate(G, {X: x, H: h}), h.T @ x, rtol=1e-5)
    raw = ta.Jacobian(Y, W, optimize=False)
    np.testing.assert_allclose(ta.evaluate(J, {X: x}), ta.evaluate(raw, {X: x}))


def test_a_sum_over_an_empty_domain_is_zero():
    A = ta.placeholder((4,), name="A")
    k = ta.reduce_axis((0, 4), "k")
    T = ta.compute((3,), lambda i: ta.sum(A[k], k, where=(k == i + 5)), name="T")
    assert opt(T).op.body[0] is ta.const(0.0, "float32")


def test_other_reducers_keep_their_meaning():
    A = ta.placeholder((4, 6), name="A")
    k = ta.reduce_axis((0, 6), "k")
    M = ta.compute((4,), lambda i: ta.max(A[i, k] * 1.0, k, where=k < 3), name="M")
    out = opt(M)
    a = _rand(4, 6)
    np.testing.assert_allclose(ta.evaluate(out, {A: a}), a[:, :3].max(axis=1))


def test_a_piecewise_solution_becomes_a_select_chain():
    X = ta.placeholder((10,), name="X")
    Y = ta.compute((6,), lambda i: X[ta.select(i < 3, 2 * i, i + 3)] * 2.0, name="Y")
    H = ta.placeholder((6,), name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    assert not dX.op.is_reduction  # i = j // 2 on even j <= 4, i = j - 3 on 6 <= j <= 8
    h = _rand(6)
    want = np.zeros(10, np.float32)
    want[[0, 2, 4, 6, 7, 8]] = 2 * h
    np.testing.assert_allclose(ta.evaluate(dX, {X: _rand(10), H: h}), want, rtol=1e-6)
    _all_in_bounds(dX)
