"""Column sums over the rows of a fused pass (:func:`tensorad.codegen.loops.nest_groups.column_sum`).

A reduction over the rows of a pass that already reads its terms row by row (a layer norm's
``dgamma[j] = sum_i H[i, j] * xhat[i, j]`` and ``dbeta[j] = sum_i H[i, j]`` beside ``dX``) accumulates in
that pass: the rows run once, not once more for the columns.  When the pass runs in parallel, each chunk
of rows adds into partial columns of its own, combined at the end.  Checked here: the program's shape
(one nest stores ``dX`` and the column sums; ``work`` unchanged), the same kernels for a layer norm
written by hand with ``ta.compute`` and for ``ta.topi.nn.layer_norm``, and values against NumPy
formulas written here, at odd sizes, 1 and 2 threads, parallel loops forced, with bounds checks."""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.codegen.program import Nest

import tensorad as ta

RNG = np.random.default_rng(7)
EPS = 1e-5


def _nests(lowered) -> list[Nest]:
    return [s for s in lowered.program.steps if isinstance(s, Nest)]


def _hand_layer_norm(X, g, b):
    """Mean, variance and normalization written with ``ta.compute``, as a user writes them."""
    n, d = X.shape
    k = ta.reduce_axis((0, d), "k")
    mu = ta.compute((n,), lambda i: ta.sum(X[i, k], axis=k) / d, "mu")
    k2 = ta.reduce_axis((0, d), "k2")
    var = ta.compute((n,), lambda i: ta.sum((X[i, k2] - mu[i]) * (X[i, k2] - mu[i]), axis=k2) / d, "var")
    return ta.compute((n, d), lambda i, j: (X[i, j] - mu[i]) / ta.sqrt(var[i] + EPS) * g[j] + b[j], "y")


def _layer_norm(hand: bool, n: int, d: int):
    X = ta.placeholder((n, d), "float32", "X")
    g, b = ta.placeholder((d,), "float32", "g"), ta.placeholder((d,), "float32", "b")
    y = _hand_layer_norm(X, g, b) if hand else ta.topi.nn.layer_norm(X, g, b, eps=EPS)
    return X, g, b, y


def _numpy_backward(x, g, h):
    """Layer norm's gradients (X, gamma, beta) in float64."""
    x, g, h = (a.astype(np.float64) for a in (x, g, h))
    mu = x.mean(1, keepdims=True)
    rs = 1 / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + EPS)
    xh = (x - mu) * rs
    dxh = h * g
    dx = rs * (dxh - dxh.mean(1, keepdims=True) - xh * (dxh * xh).mean(1, keepdims=True))
    return dx, (h * xh).sum(0), h.sum(0)


@pytest.mark.parametrize("hand", [False, True])
def test_layer_norm_backward_sums_its_columns_in_the_pass_over_rows(hand):
    """``dgamma`` and ``dbeta`` run in the nest that computes ``dX``, in its loop over the columns, with
    partial columns per chunk of rows; the work is the terms', as in nests of their own."""
    X, g, b, y = _layer_norm(hand, 512, 768)
    f = ta.function(y, [X, g, b], wrt=[X, g, b], target="llvm -mcpu=haswell")
    lowered = f.lower_backward()
    (fused,) = [s for s in _nests(lowered) if "column sum" in s.note]
    assert "X.grad" in fused.name and "b.grad" in fused.name and fused.parallel
    assert "column sum over the rows (in the loop of X.grad)" in fused.note
    assert {t.name for t in lowered.program.temps} >= {"g.grad.partial", "b.grad.partial"}
    unfused = ta.function(y, [X, g, b], wrt=[X, g, b], target="llvm -mcpu=haswell", parallel=False)
    serial = unfused.lower_backward()
    assert serial.work == lowered.work  # (no partial columns without parallel loops)
    assert not any(t.name.endswith(".partial") for t in serial.program.temps)


def test_a_layer_norm_written_by_hand_gets_the_kernels_of_topi():
    """The same nests (their notes, and no more work) whether the layer norm is ``ta.topi``'s or
    written with ``ta.compute``: the pass is recognized by structure (the hand spelling's mean,
    ``sum / width``, is inlined into the row pass where topi's ``rstd`` is a value of its own)."""
    shapes = []
    for hand in (False, True):
        X, g, b, y = _layer_norm(hand, 64, 96)
        H = ta.placeholder(y.shape, "float32", "H")
        lowered = ta.lower(ta.JacobianRecursive(y, [X, g, b], H), [X, g, b, H], target="llvm -mcpu=haswell")
        shapes.append([(s.work, "column sum over the rows" in s.note) for s in _nests(lowered)])
    assert [c for _, c in shapes[0]] == [c for _, c in shapes[1]]
    assert all(hand <= topi for (topi, _), (hand, _) in zip(*shapes))
    assert any(column for _, column in shapes[0])


@pytest.mark.parametrize("hand", [False, True])
@pytest.mark.parametrize("n, d", [(37, 13), (129, 1000), (3, 1), (1, 5)])
@pytest.mark.parametrize("threads", [1, 2])
def test_layer_norm_backward_matches_numpy(hand, n, d, threads):
    """Every gradient within float32 rounding of the float64 formula, parallel loops forced (chunks of
    rows, the last one short), with bounds checks on every access."""
    X, g, b, y = _layer_norm(hand, n, d)
    H = ta.placeholder(y.shape, "float32", "H")
    grads = ta.JacobianRecursive(y, [X, g, b], H)
    kernel = ta.build(grads, [X, g, b, H], num_threads=threads, parallel_min_work=0, checked=True)
    x, h = RNG.standard_normal((n, d)).astype(np.float32), RNG.standard_normal((n, d)).astype(np.float32)
    gv, bv = RNG.uniform(0.5, 1.5, d).astype(np.float32), RNG.standard_normal(d).astype(np.float32)
    for got, want in zip(kernel(x, gv, bv, h), _numpy_backward(x, gv, h)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("threads", [1, 2])
def test_column_sum_and_max_read_a_row_pass_at_its_rows(threads):
    """A sum reading a row softmax at its row, and a maximum of a product of inputs, both over the rows:
    they join the softmax's pass (partial columns combined by their own combiners) and match NumPy."""
    n, d = 37, 13
    X, W = ta.placeholder((n, d), "float32", "X"), ta.placeholder((n, d), "float32", "W")
    k, k2, r, r2 = (ta.reduce_axis((0, e), nm) for e, nm in ((d, "k"), (d, "k2"), (n, "r"), (n, "r2")))
    m = ta.compute((n,), lambda i: ta.max(X[i, k], axis=k), "m")
    E = ta.compute((n, d), lambda i, j: ta.exp(X[i, j] - m[i]), "E")
    s = ta.compute((n,), lambda i: ta.sum(E[i, k2], axis=k2), "s")
    S = ta.compute((n, d), lambda i, j: E[i, j] / s[i], "S")
    c = ta.compute((d,), lambda j: ta.sum(W[r, j] * S[r, j], axis=r), "c")
    mx = ta.compute((d,), lambda j: ta.max(W[r2, j] * X[r2, j], axis=r2), "mx")
    lowered = ta.lower([S, c, mx], [X, W], parallel_min_work=0)
    (fused,) = [st for st in _nests(lowered) if "column sum" in st.note]
    assert "S" in fused.name and "c" in fused.name and fused.note.count("column sum over the rows") == 2
    kernel = ta.build([S, c, mx], [X, W], num_threads=threads, parallel_min_work=0, checked=True)
    x, w = RNG.standard_normal((n, d)).astype(np.float32), RNG.standard_normal((n, d)).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    soft = e / e.sum(1, keepdims=True)
    got = kernel(x, w)
    np.testing.assert_allclose(got[0], soft, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], (w * soft).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[2], (w * x).max(0))


def test_generic_kernel_sums_partial_columns_of_the_rows_it_is_given():
    """Over a size variable of rows, a block's partial columns add only the rows below its count (no
    padded block), and the gradients match NumPy at several row counts."""
    n, d = ta.size_var("n"), 24
    X = ta.placeholder((n, d), "float32", "X")
    g, b = ta.placeholder((d,), "float32", "g"), ta.placeholder((d,), "float32", "b")
    y = ta.topi.nn.layer_norm(X, g, b, eps=EPS)
    H = ta.placeholder(y.shape, "float32", "H")
    kernel = ta.build(ta.JacobianRecursive(y, [X, g, b], H), [X, g, b, H], parallel_min_work=0)
    gv, bv = RNG.uniform(0.5, 1.5, d).astype(np.float32), RNG.standard_normal(d).astype(np.float32)
    assert kernel.generic and kernel.why == ""
    for rows in (1, 7, 300):
        x, h = (RNG.standard_normal((rows, d)).astype(np.float32) for _ in range(2))
        for got, want in zip(kernel(x, gv, bv, h), _numpy_backward(x, gv, h)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))


def test_column_sums_of_two_shapes_reading_a_row_maximum():
    """Column sums of two widths in one pass, one reading a row maximum held in an accumulator: each
    width in a loop of its own, both matching NumPy at 1 and 2 threads."""
    n, d = 37, 13
    X, W = ta.placeholder((n, d), "float32", "X"), ta.placeholder((n, 5), "float32", "W")
    k, r, r2 = ta.reduce_axis((0, d), "k"), ta.reduce_axis((0, n), "r"), ta.reduce_axis((0, n), "r2")
    m = ta.compute((n,), lambda i: ta.max(X[i, k], axis=k), "m")
    S = ta.compute((n, d), lambda i, j: ta.exp(X[i, j] - m[i]), "S")
    c = ta.compute((d,), lambda j: ta.sum(S[r, j], axis=r), "c")
    c2 = ta.compute((5,), lambda j: ta.sum(W[r2, j] * m[r2], axis=r2), "c2")
    lowered = ta.lower([S, c, c2], [X, W], parallel_min_work=0)
    (fused,) = [st for st in _nests(lowered) if "column sum" in st.note]
    assert "c2" in fused.name and "m" in fused.name
    x, w = RNG.standard_normal((n, d)).astype(np.float32), RNG.standard_normal((n, 5)).astype(np.float32)
    for threads in (1, 2):
        got = ta.build([S, c, c2], [X, W], parallel_min_work=0, num_threads=threads, checked=True)(x, w)
        np.testing.assert_allclose(got[1], np.exp(x - x.max(1, keepdims=True)).sum(0), rtol=1e-5)
        np.testing.assert_allclose(got[2], (w * x.max(1)[:, None]).sum(0), rtol=1e-5, atol=1e-5)
