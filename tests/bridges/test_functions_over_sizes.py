"""``ta.function``, ``ta.torch.function`` and ``ta.jax.function`` of a program over a size variable build
each kernel once: calls at 1, 7, 64 and 300 rows (past a generic kernel's first block) compile nothing
after the first.  Oracles: NumPy float64 formulas written here, and PyTorch float64 autograd."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

SIZES = (1, 7, 64, 300)


def _program():
    """``softmax(tanh(X W^T + B))`` over ``n`` rows of ``X``."""
    n = ta.size_var("n")
    X, W = ta.placeholder((n, 12), name="X"), ta.placeholder((5, 12), name="W")
    B = ta.placeholder((5,), name="B")
    return ta.topi.nn.softmax(ta.topi.tanh(ta.topi.nn.dense(X, W, B))), [X, W, B]


def _numpy(x, w, b, h):
    """The outputs and the gradients of ``sum(Y * h)`` by ``x, w, b``, in float64."""
    x, w, b, h = (a.astype(np.float64) for a in (x, w, b, h))
    t = np.tanh(x @ w.T + b)
    e = np.exp(t - t.max(-1, keepdims=True))
    y = e / e.sum(-1, keepdims=True)
    dt = y * (h - (h * y).sum(-1, keepdims=True)) * (1 - t * t)
    return y, (dt @ w, dt.T @ x, dt.sum(0))


def _values(rng, rows):
    return [rng.standard_normal(s).astype(np.float32) for s in ((rows, 12), (5, 12), (5,), (rows, 5))]


def test_function_builds_once_for_every_count_of_rows(builds):
    f = ta.function(*_program())
    rng = np.random.default_rng(0)
    compiled = None
    for rows in SIZES:
        x, w, b, h = _values(rng, rows)
        want, grads = _numpy(x, w, b, h)
        np.testing.assert_allclose(f(x, w, b), want, rtol=1e-5, atol=1e-6)
        y, residuals = f.forward(x, w, b)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
        for got, g in zip(f.backward(residuals, h), grads, strict=True):
            np.testing.assert_allclose(got, g, rtol=1e-4, atol=1e-5)
        compiled = len(builds) if compiled is None else compiled
        assert len(builds) == compiled, f"{rows} rows compiled again"
    assert f.generic and f.why == ""


def test_function_backward_of_residuals_given_as_a_tuple(builds):
    """Residuals that passed through a framework as plain arrays run at the sizes they give."""
    f = ta.function(*_program())
    rng = np.random.default_rng(1)
    for rows in (3, 9):
        x, w, b, h = _values(rng, rows)
        _, residuals = f.forward(x, w, b)
        for got, g in zip(f.backward(tuple(residuals), h), _numpy(x, w, b, h)[1], strict=True):
            np.testing.assert_allclose(got, g, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_torch_function_builds_once_against_float64_autograd(builds):
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    f = ta.torch.function(*_program())
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(5, 12, generator=gen, requires_grad=True)
    b = torch.randn(5, generator=gen, requires_grad=True)
    compiled = None
    for rows in SIZES:
        x = torch.randn(rows, 12, generator=gen, requires_grad=True)
        y = f(x, w, b)
        h = torch.randn(y.shape, generator=gen)
        got = torch.autograd.grad(y, [x, w, b], h)
        x64, w64, b64 = (a.detach().double().requires_grad_() for a in (x, w, b))
        y64 = torch.softmax(torch.tanh(x64 @ w64.T + b64), -1)
        want = torch.autograd.grad(y64, [x64, w64, b64], h.double())
        np.testing.assert_allclose(y.detach().numpy(), y64.detach().numpy(), rtol=1e-5, atol=1e-6)
        for g, e in zip(got, want, strict=True):
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-5)
        compiled = len(builds) if compiled is None else compiled
        assert len(builds) == compiled, f"{rows} rows compiled again"
    assert f.function.generic


@pytest.mark.slow
def test_jax_function_builds_once(builds):
    jax = pytest.importorskip("jax", reason="an optional extra; make test requires it")
    f = ta.jax.function(*_program())
    rng = np.random.default_rng(2)
    compiled = None
    for rows in SIZES:
        x, w, b, h = _values(rng, rows)
        want, grads = _numpy(x, w, b, h)
        y = f(x, w, b)
        got = jax.grad(lambda x, w, b, h=h: (f(x, w, b) * h).sum(), argnums=(0, 1, 2))(x, w, b)
        np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-6)
        for g, e in zip(got, grads, strict=True):
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-4, atol=1e-5)
        compiled = len(builds) if compiled is None else compiled
        assert len(builds) == compiled, f"{rows} rows compiled again"
    assert f.function.generic


@pytest.mark.slow
def test_function_work_is_the_static_programs():
    """The residuals are planned per case of the size the gradients are optimized for (one row, and
    more): from 2 rows the forward with residuals and the backward do the static function's work; at
    one row the backward recomputes what the other case does not save (the forward saves no more for
    it)."""
    f = ta.function(*_program())
    for rows in (1, 7, 64, 300):
        X, W, B = ta.placeholder((rows, 12), name="X"), ta.placeholder((5, 12), name="W"), \
            ta.placeholder((5,), name="B")
        static = ta.function(ta.topi.nn.softmax(ta.topi.tanh(ta.topi.nn.dense(X, W, B))), [X, W, B])
        assert f.residual_kernel.work_at(rows) == static.lower_forward().work
        backward, want = f.backward_kernel.work_at(rows), static.lower_backward().work
        assert backward == want if rows > 1 else want <= backward <= 2 * want


@pytest.mark.slow
def test_a_torch_op_family_builds_once_for_its_batch_sizes(builds):
    """``@ta.torch.op``: the call at 7 rows makes the family over the batch; at 64 and 300 rows it
    compiles nothing more.  Oracle: PyTorch float64."""
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    layer = ta.torch.op(lambda X, W: ta.topi.tanh(ta.topi.nn.dense(X, W)))
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(4, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    compiled = {}
    for rows in (3, 7, 64, 300):
        x = torch.randn(rows, 6, dtype=torch.float64, generator=gen, requires_grad=True)
        y = layer(x, w)
        got = torch.autograd.grad(y.sum(), [x, w])
        x64, w64 = (a.detach().clone().requires_grad_() for a in (x, w))
        want = torch.autograd.grad(torch.tanh(x64 @ w64.T).sum(), [x64, w64])
        for g, e in zip(got, want, strict=True):
            torch.testing.assert_close(g, e)
        compiled[rows] = len(builds)
    assert compiled[7] == compiled[64] == compiled[300] > compiled[3]
    # torch.func differentiates the gradient program again (the family's gradients bound at 300 rows)
    got = torch.func.grad(lambda w: layer(x, w).sum())(w)
    torch.testing.assert_close(got, torch.autograd.grad(torch.tanh(x64 @ w64.T).sum(), w64)[0])


@pytest.mark.slow
def test_a_layer_norm_and_a_mean_loss_build_once(builds):
    """A layer norm saves a value the passes share (its extent the size itself) and a mean loss's
    gradient reads the size as a value: the backward reads the saved values as inputs of its own, so
    both are generic kernels (the mean's in stages).  Oracles: ``ta.evaluate`` of the gradients in
    float64, and NumPy formulas."""
    n = ta.size_var("n")
    X, W = ta.placeholder((n, 6), name="X"), ta.placeholder((4, 6), name="W")
    G = ta.placeholder((4,), name="G")
    Y = ta.topi.nn.layer_norm(ta.topi.nn.dense(X, W), G, G)
    f = ta.function(Y, [X, W, G])
    step = ta.value_and_grad(ta.topi.mean(ta.topi.tanh(ta.topi.nn.dense(X, W))), [W], [X, W])
    H = ta.placeholder(Y.shape, name="H")
    grads = ta.JacobianRecursive(Y, [X, W, G], H)
    rng = np.random.default_rng(3)
    w, g = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    compiled = None
    for rows in (1, 7, 64, 300):
        x, h = (rng.standard_normal((rows, m)).astype(np.float32) for m in (6, 4))
        _, residuals = f.forward(x, w, g)
        got = f.backward(residuals, h)
        if rows <= 7:
            feed = {t: a.astype(np.float64) for t, a in ((X, x), (W, w), (G, g), (H, h))}
            for a, e in zip(got, ta.evaluate(grads, feed), strict=True):
                np.testing.assert_allclose(a, e, rtol=1e-3, atol=1e-4)
        value, (gw,) = step(x, w)
        t = np.tanh(x.astype(np.float64) @ w.T.astype(np.float64))
        np.testing.assert_allclose(value, t.mean(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gw, ((1 - t * t) / t.size).T @ x, rtol=1e-4, atol=1e-6)
        compiled = len(builds) if compiled is None else compiled
        assert len(builds) == compiled, f"{rows} rows compiled again"
    assert f.generic and step.function.generic, (f.why, step.function.why)
