"""Copy elision (codegen/passes/copy_elision.py): an output that copies a temporary whole computes it, and the
temporary's other readers read that output -- one pass and one buffer fewer, the same values.
Oracles: NumPy formulas written here, torch float64 autograd for the residual layer norm, and
the work counted by hand."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

SHAPE = (5, 13)
N = SHAPE[0] * SHAPE[1]


def _program():
    X = ta.placeholder(SHAPE, "float64", "X")
    Y = ta.placeholder(SHAPE, "float64", "Y")
    # costly (exp) and read twice per element: a materialized temporary
    T = ta.compute(SHAPE, lambda i, j: X[i, j] * Y[i, j] + ta.exp(X[i, j]), "T")
    A = ta.compute(SHAPE, lambda i, j: T[i, j], "A")
    B = ta.compute(SHAPE, lambda i, j: T[i, j], "B")
    C = ta.compute(SHAPE, lambda i, j: T[i, j] * 2.0 - Y[i, j], "C")
    return X, Y, T, A, B, C


def _data():
    rng = np.random.default_rng(3)
    return rng.normal(size=SHAPE), rng.normal(size=SHAPE)


@pytest.mark.parametrize("fuse", [True, False])
def test_outputs_copying_a_temporary_compute_it_once(fuse):
    X, Y, T, A, B, C = _program()
    x, y = _data()
    t = x * y + np.exp(x)
    lowered = ta.lower([A, B, C], [X, Y], fuse=fuse)
    # elided: A computes T (N), B copies A (N), C reads A (N); else T's nest is one more
    assert lowered.work == (3 * N if fuse else 4 * N)
    a, b, c = ta.build([A, B, C], [X, Y], fuse=fuse)(x, y)
    np.testing.assert_allclose(a, t, rtol=1e-13)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(c, 2 * t - y, rtol=1e-13)


def test_a_temporary_that_is_an_output_is_not_elided():
    X, Y, T, A, B, C = _program()
    x, y = _data()
    assert ta.lower([T, A, B], [X, Y]).work == 3 * N
    t, a, b = ta.build([T, A, B], [X, Y])(x, y)
    np.testing.assert_array_equal(a, t)
    np.testing.assert_array_equal(b, t)


def test_a_transposed_or_cast_copy_is_not_elided():
    X, Y, T, *_ = _program()
    x, y = _data()
    Tt = ta.compute(SHAPE[::-1], lambda j, i: T[i, j], "Tt")
    Tc = ta.compute(SHAPE, lambda i, j: ta.cast("float32", T[i, j]), "Tc")
    tt, tc = ta.build([Tt, Tc], [X, Y])(x, y)
    t = x * y + np.exp(x)
    np.testing.assert_allclose(tt, t.T, rtol=1e-13)
    np.testing.assert_allclose(tc, t.astype(np.float32), rtol=1e-7)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_residual_layer_norm_gradients_match_torch(target):
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    rows, d = 7, 19
    X, R = (ta.placeholder((rows, d), "float64", n) for n in ("X", "R"))
    g, b = (ta.placeholder((d,), "float64", n) for n in ("g", "b"))
    Yt = ta.topi.nn.layer_norm(X + R, g, b)
    H = ta.placeholder((rows, d), "float64", "H")
    grads = ta.JacobianRecursive(Yt, [X, R, g, b], head=H)
    rng = np.random.default_rng(5)
    xv, rv, hv = (rng.normal(size=(rows, d)) for _ in range(3))
    gv, bv = rng.uniform(0.5, 1.5, d), rng.normal(size=d)
    kernel = ta.build(list(grads), [X, R, g, b, H], target=target)
    got = kernel(xv, rv, gv, bv, hv)
    ts = [torch.tensor(a, requires_grad=True) for a in (xv, rv, gv, bv)]
    y = torch.nn.functional.layer_norm(ts[0] + ts[1], (d,), ts[2], ts[3])
    want = torch.autograd.grad(y, ts, torch.tensor(hv))
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w.numpy(), rtol=1e-10, atol=1e-12)
    # dX and dR are one value: asking for dR too costs one copying pass (before: a temporary
    # for both, and two copies)
    without_r = ta.lower([grads[0], grads[2], grads[3]], [X, R, g, b, H]).work
    assert kernel.work == without_r + rows * d
