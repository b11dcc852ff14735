"""A max/argmax gradient lands where the forward saved: one int per window, no index arithmetic.

The forward of a selecting reduction saves, per output point, the row-major offset in the read
tensor of the winner's tap (the window position composed with the window's index map), or a
negative code for a window with ties or no lone winner; the backward's scatter adds the head at
that offset.  Checked against PyTorch float64 autograd and NumPy formulas written here (ties
split evenly, -inf padding, strides, dilation, 1-D, a user's argmax), ``checked=True``, 1 and 2
threads; the work test counts the operations of the backward's per-window add.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch  # (a test dependency: `make test` installs the torch extra; a missing one fails)

import tensorad as ta
from tensorad import topi
from tensorad.ir.expr import Op
from tensorad.ir.rewrite import walk


def _grad(x: np.ndarray, y_of, h: np.ndarray, **opts) -> np.ndarray:
    X = ta.placeholder(x.shape, "float64", name="X")
    Y = y_of(X)
    f = ta.function(Y, [X], **opts)
    _, res = f.forward(x)
    return np.asarray(f.backward(res, h)[0])


def _even_split_maxpool2d(x, h, k, s, p, d):
    """Max pool's gradient with ties split evenly (PyTorch's ``amax`` convention), -inf pads."""
    n, c, H, W = x.shape
    kh, kw = k
    xp = np.full((n, c, H + 2 * p, W + 2 * p), -np.inf)
    xp[:, :, p:p + H, p:p + W] = x
    ho, wo = h.shape[2:]
    g = np.zeros_like(xp)
    for i in range(ho):
        for j in range(wo):
            win = xp[:, :, i * s:i * s + d * (kh - 1) + 1:d, j * s:j * s + d * (kw - 1) + 1:d]
            best = win.max(axis=(2, 3), keepdims=True)
            tied = win == best
            share = h[:, :, i, j][:, :, None, None] / tied.sum(axis=(2, 3), keepdims=True)
            g[:, :, i * s:i * s + d * (kh - 1) + 1:d, j * s:j * s + d * (kw - 1) + 1:d] += tied * share
    return g[:, :, p:p + H, p:p + W]


@pytest.mark.parametrize("k,s,p,threads", [((3, 3), 2, 1, 1), ((3, 3), 2, 1, 2), ((2, 2), 2, 0, 1),
                                           ((3, 2), 1, 1, 2), ((5, 5), 3, 2, 1)])
def test_max_pool_gradient_vs_torch(k, s, p, threads):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 11, 9))
    tx = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.max_pool2d(tx, k, s, p)
    h = rng.standard_normal(tuple(y.shape))
    y.backward(torch.tensor(h))
    got = _grad(x, lambda X: topi.nn.pool(X, k, s, [p] * 4, "max"), h, num_threads=threads, checked=True)
    np.testing.assert_allclose(got, tx.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_ties_and_all_minus_inf_windows(threads):
    """Integer data ties inside windows (the head split evenly); a window of -inf reads only
    input elements tied with its -inf padding."""
    rng = np.random.default_rng(4)
    x = rng.integers(-2, 2, (2, 2, 8, 7)).astype(np.float64)
    x[0, 0, :3, :3] = -np.inf
    h = rng.standard_normal((2, 2, 4, 4))
    got = _grad(x, lambda X: topi.nn.pool(X, 3, 2, [1, 1, 1, 1], "max"), h, num_threads=threads, checked=True)
    # the top-left window ties its -inf elements with the padding, which takes its share
    want = _even_split_maxpool2d(x, h, (3, 3), 2, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_dilated_max_window_vs_numpy():
    """A dilated 2-D max written in the language, padding read under the window's guard."""
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 3, (1, 2, 9, 10)).astype(np.float64)
    h = rng.standard_normal((1, 2, 4, 5))

    def pool(X):
        ry, rx = ta.reduce_axis((0, 3), "ry"), ta.reduce_axis((0, 3), "rx")

        def body(n, c, i, j):
            r, q = 2 * i + 2 * ry - 1, 2 * j + 2 * rx - 1
            inside = (r >= 0) & (r < 9) & (q >= 0) & (q < 10)
            return ta.max(ta.if_then_else(inside, X[n, c, r, q], float("-inf")), [ry, rx])
        return ta.compute((1, 2, 4, 5), body, "dilated")

    got = _grad(x, pool, h, checked=True)
    np.testing.assert_allclose(got, _even_split_maxpool2d(x, h, (3, 3), 2, 1, 2), rtol=1e-12, atol=1e-12)


def test_one_d_max_and_min():
    rng = np.random.default_rng(6)
    x = rng.integers(-3, 3, (4, 17)).astype(np.float64)
    h = rng.standard_normal((4, 6))
    for red, pick in ((ta.max, np.max), (ta.min, np.min)):
        def pool(X, red=red):
            r = ta.reduce_axis((0, 4), "r")
            pad = float("-inf") if red is ta.max else float("inf")

            def body(b, o):
                q = 3 * o + r
                return red(ta.if_then_else((q >= 1) & (q <= 17), X[b, q - 1], pad), r)
            return ta.compute((4, 6), body, "p1")
        want = np.zeros_like(x)
        for i in range(6):
            lo = max(3 * i - 1, 0)
            hi = min(3 * i + 3, 17)
            win = x[:, lo:hi]
            tied = win == pick(win, axis=1, keepdims=True)
            want[:, lo:hi] += tied * (h[:, i:i + 1] / tied.sum(axis=1, keepdims=True))
        np.testing.assert_allclose(_grad(x, pool, h, checked=True), want, rtol=1e-12, atol=1e-12)


def test_user_argmax_comm_reducer():
    """A user's argmax: the value's gradient goes to the element its own combiner chose."""
    rng = np.random.default_rng(7)
    x = rng.integers(-3, 3, (5, 12)).astype(np.float64)
    h = rng.standard_normal((5, 4))
    def combine(a, b):
        return ta.select(a[0] >= b[0], a[0], b[0]), ta.select(a[0] >= b[0], a[1], b[1])
    def identity(t0, t1):
        return ta.const(float("-inf"), t0), ta.const(-1, t1)
    argmax = ta.comm_reducer(combine, identity, "argmax")

    def pool(X):
        r = ta.reduce_axis((0, 3), "r")
        v, _ = ta.compute((5, 4), lambda b, i: argmax((X[b, 3 * i + r], r), r), "am")
        return v
    want = np.zeros_like(x)
    for i in range(4):
        win = x[:, 3 * i:3 * i + 3]
        first = np.argmax(win, axis=1)  # (ties: the first, as the combiner's ``>=`` keeps)
        want[np.arange(5), 3 * i + first] += h[:, i]
    np.testing.assert_allclose(_grad(x, pool, h, checked=True), want, rtol=1e-12, atol=1e-12)


def test_backward_add_reads_one_saved_int_and_does_no_division():
    """The per-window add of a 3x3/2 max pool's backward: tested on one saved int, at an
    address that is that int (its digits by the row length, which code generation folds).
    Before: the window position ``ry * 3 + rx`` clipped, divided and remaindered by 3, the
    padding tested, the tie count read and divided into the head."""
    X = ta.placeholder((2, 4, 12, 12), name="X")
    f = ta.function(topi.nn.pool(X, 3, 2, [1, 1, 1, 1], "max"), [X])
    assert len(f.saved) == 2  # the destinations and the maxima (the tie test's values)
    lowered = f.lower_backward()
    stores = [s for s in _stores(lowered.program.steps) if s.buffer.name.startswith("X.grad")]
    first = stores[0]  # the lone winners' add
    ops = [n.op for e in (*first.index, first.value) for n in walk(e)]
    assert ops.count(Op.DIV) == 0 and ops.count(Op.CAST) == 0  # no 1 / T
    divisors = {int(n.src[1].arg) for e in first.index for n in walk(e) if n.op in (Op.FLOORDIV, Op.MOD)}
    assert divisors == {12}  # only the row length: (e // 12) * 12 + e % 12 is e
    reads = {n.arg.name for e in (*first.index, first.value) for n in walk(e) if n.op is Op.READ}
    assert reads - {first.buffer.name} == {"max_pool.dest", "max_pool.head"}


def _stores(steps):
    from tensorad.codegen.program import If, Loop, Nest, Store
    out = []

    def visit(stmts):
        for s in stmts:
            if isinstance(s, Store):
                out.append(s)
            elif isinstance(s, Loop):
                visit(s.body)
            elif isinstance(s, If):
                visit(s.then)
                visit(s.orelse)
    for st in steps:
        if isinstance(st, Nest):
            visit(st.body)
    return out


def test_forward_with_residuals_reads_without_guards():
    """A padded 3x3/2 max pool's forward with residuals: the maximum and one sum of the points
    equal to it, each reading ``X`` under loop bounds (no ``if_then_else`` around a read: a
    guarded read in a vector loop is a branch per lane).  Before: one reduction carrying the
    value, index and ties with the padding guard in its body, which LLVM vectorized with a
    predicated scalar load per lane and tap (its ``pred.load`` blocks, 720 mentions in the
    optimized IR; haswell, LLVM 22; conditional branches 99 -> 8)."""
    X = ta.placeholder((1, 4, 56, 56), name="X")
    f = ta.function(topi.nn.pool(X, 3, 2, [1, 1, 1, 1], "max"), [X], target="llvm -mcpu=haswell")
    lowered = f.lower_forward()
    assert "max_pool+max_pool.dest" in lowered.text  # one pass over X's rows (and the padding's sum)
    stores = _stores(lowered.program.steps)
    reads = [n for s in stores for e in (*s.index, s.value) for n in walk(e)]
    assert not any(n.op is Op.IF_THEN_ELSE for n in reads)
    assert "pred.load" not in f.residual_kernel.llvm_ir


@pytest.mark.parametrize("threads", [1, 2])
def test_tied_products_where_the_derivative_moves_with_the_window(threads):
    """``Y[b, i] = max_r X[b, i + r] W[r]``: the derivative reads ``W[r]``, so no destination
    is saved and the scatter takes the winner's point from the index (the sentinel when tied:
    the tie term adds every tied point).  Integer data: ties everywhere; vs NumPy."""
    rng = np.random.default_rng(8)
    x, w = rng.integers(-2, 3, (3, 12)).astype(np.float64), np.array([1.0, 2.0, 1.0, -1.0])
    h = rng.standard_normal((3, 9))
    X, W = ta.placeholder(x.shape, "float64", "X"), ta.placeholder(w.shape, "float64", "W")
    r = ta.reduce_axis((0, 4), "r")
    Y = ta.compute((3, 9), lambda b, i: ta.max(X[b, i + r] * W[r], r), "Y")
    f = ta.function(Y, [X, W], num_threads=threads, checked=True)
    _, res = f.forward(x, w)
    gx, gw = f.backward(res, h)
    want_x, want_w = np.zeros_like(x), np.zeros_like(w)
    for b in range(3):
        for i in range(9):
            v = x[b, i:i + 4] * w
            tied = v == v.max()
            share = h[b, i] / tied.sum()
            want_x[b, i:i + 4] += tied * share * w
            want_w += tied * share * x[b, i:i + 4]
    np.testing.assert_allclose(gx, want_x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw, want_w, rtol=1e-12, atol=1e-12)


def test_a_box_too_large_for_the_sum_keeps_the_winner_reduction():
    """A max over 3000 points (the sum of ``1 + K k`` over its ties could pass an int32): the
    winner reduction, its ties coded in the destination as ``-1 - T``; vs NumPy."""
    rng = np.random.default_rng(9)
    x = rng.integers(-3, 3, (2, 3000)).astype(np.float64)
    x[1, 17] = 5.0  # one lone winner
    h = rng.standard_normal(2)
    def big(X):
        k = ta.reduce_axis((0, 3000), "k")
        return ta.compute((2,), lambda b: ta.max(X[b, k], k), "Y")
    got = _grad(x, big, h, checked=True)
    tied = x == x.max(axis=1, keepdims=True)
    np.testing.assert_allclose(got, tied * (h / tied.sum(axis=1))[:, None], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_max_over_a_middle_axis_with_ties_and_nans_vs_numpy(dtype):
    """``Y[n, c] = max_a X[n, a, c]`` over 70 points a column of 37 (its reads walk memory along ``c``: the
    maximum, then one sum of the points equal to it).  Ties, NaNs (every NaN tied) and a column of
    ``-inf``; a NumPy formula."""
    rng = np.random.default_rng(12)
    x = rng.integers(-2, 3, (3, 70, 37)).astype(dtype)
    x[0, [3, 50], 4] = np.nan
    x[1, :, 36] = -np.inf
    x[2, 9, 33] = np.nan
    h = rng.standard_normal((3, 37)).astype(dtype)
    X, H = ta.placeholder(x.shape, dtype, name="X"), ta.placeholder(h.shape, dtype, name="H")
    a = ta.reduce_axis((0, 70), "a")
    Y = ta.compute((3, 37), lambda n, c: ta.max(X[n, a, c], axis=a), name="Y")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    got = ta.build([dX], [X, H])(x, h)
    best = np.max(x, axis=1, keepdims=True)
    tied = np.where(np.isnan(best), np.isnan(x), x == best)
    np.testing.assert_allclose(got, tied * (h[:, None, :] / tied.sum(axis=1, keepdims=True)), rtol=1e-6)
