"""A NaN in a max/min window: the NaN is the winner (docs/conventions.md, the rule written in
tensorad/autodiff/combiners.py: ``beats``/``ties_result``).

The result of such a window is NaN (IEEE maximum/minimum).  Before, the tie tests compared each
point with the NaN result by ``==``, which no point passes: the whole window got no gradient
(``evaluate`` and every build agreed on it), and forward mode took the tangent of whichever
point came after the NaN.  Now a NaN beats every number and NaNs tie with each other: a
window's NaNs share its head evenly (one NaN takes all of it: the index ``torch.max(x, dim)``
and ``numpy.argmax`` give), and the tangent is the mean of its NaNs' tangents (of its tied
points' in general: forward mode transposes the even split).  The oracle is a NumPy loop
written here, and ``torch.max`` of each window (without ``dim``: it splits evenly among the
points equal to the result, a NaN counting as equal to a NaN result).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

import tensorad as ta

N, K = 7, 3
HASWELL = "llvm -mcpu=haswell"
BUILDS = [{}, {"target": HASWELL, "checked": True, "num_threads": 2},
          {"fastmath": False, "target": "llvm -mcpu=x86-64", "num_threads": 2}]
FORMS = ["plain", "pad", "where", "inexact"]


def _program(kind: str, form: str, dtype: str = "float64"):
    """``Y[i] = max/min over a window of 3`` in one of the forms whose winners are found by
    different code: the lone-winner sum and its saved destination (``plain``), the same through
    padding read under a guard (``pad``), under a ``where`` (``where``: windows of 1 to 3
    points), and a source that rounds, whose values are saved (``inexact``: the winner
    reduction of value, index and count)."""
    op = ta.max if kind == "max" else ta.min
    pad = -np.inf if kind == "max" else np.inf
    size = N + K - 1 if form in ("plain", "where", "inexact") else N
    X = ta.placeholder((size,), dtype, name="X")
    r = ta.reduce_axis((0, K), name="r")
    if form == "plain":
        body = lambda i: op(X[i + r], axis=[r])  # noqa: E731
    elif form == "pad":
        body = lambda i: op(ta.if_then_else((i + r >= 1) & (i + r <= N), X[i + r - 1], pad), axis=[r])  # noqa: E731
    elif form == "where":
        body = lambda i: op(X[i + r], axis=[r], where=r <= i % 3)  # noqa: E731
    else:
        body = lambda i: op(X[i + r] * 0.5 + 1.0, axis=[r])  # noqa: E731
    return X, ta.compute((N,), body, name="Y")


def _windows(form: str) -> list[list[int | None]]:
    """The points of ``X`` each output's window reads (in the reduction's order); ``None``: a padding
    term (the identity's infinity, a term of the reduction like any other, with no point to send a
    share of the head to)."""
    if form == "pad":
        return [[i + r - 1 if 1 <= i + r <= N else None for r in range(K)] for i in range(N)]
    if form == "where":
        return [[i + r for r in range(K) if r <= i % 3] for i in range(N)]
    return [[i + r for r in range(K)] for i in range(N)]


def oracle(kind: str, form: str, x: np.ndarray, h: np.ndarray, u: np.ndarray):
    """``(Y, dX, jvp)``: NaN wins, NaNs tie, ties split the head evenly, and the tangent is the
    mean of the tied points' tangents -- the transpose of the even split (docs/conventions.md;
    a window of -inf points only, the identity of max, ties them all)."""
    scale = 0.5 if form == "inexact" else 1.0
    s = x * scale + 1.0 if form == "inexact" else x
    pad = -np.inf if kind == "max" else np.inf
    y, g, t = np.zeros(N), np.zeros(x.shape), np.zeros(N)
    for i, win in enumerate(_windows(form)):
        v = np.array([pad if c is None else s[c] for c in win])
        if np.isnan(v).any():
            y[i], tied = np.nan, np.isnan(v)
        else:
            y[i] = v.max() if kind == "max" else v.min()
            tied = v == y[i]
        points = [c for c, k in zip(win, tied) if k]
        for c in points:
            if c is not None:
                g[c] += h[i] * scale / tied.sum()
        t[i] = np.mean([0.0 if c is None else u[c] for c in points]) * scale
    return y, g, t


@functools.cache
def _kernels(kind: str, form: str):
    X, Y = _program(kind, form)
    H = ta.placeholder(Y.shape, "float64", name="H")
    U = ta.placeholder(X.shape, "float64", name="U")
    (g,) = ta.gradient(Y, [X], H)
    t = ta.jvp(Y, [X], [U])
    builds = [ta.build([Y, g, t], [X, H, U], **o) for o in BUILDS]
    return X, H, U, Y, g, t, builds


def _data(rng, size):
    x = rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 2.0, -1.0], size)
    x[rng.integers(size)] = np.nan  # at least one NaN window
    return x


def _check(kind, form, x, h, u, every_build=True):
    X, H, U, Y, g, t, builds = _kernels(kind, form)
    want = oracle(kind, form, x, h, u)
    got = [ta.evaluate([Y, g, t], {X: x, H: h, U: u})]
    got += [b(x, h, u) for b in (builds if every_build else builds[:1])]
    for k, outs in enumerate(got):
        for name, a, w in zip(("Y", "dX", "jvp"), outs, want):
            where = "evaluate" if k == 0 else BUILDS[k - 1]
            say = f"{kind} {form} {name} ({where})"
            if k and where.get("fastmath", True):  # (fast math: a sum of a point's shares may
                # be reassociated or fused, so it rounds within an ulp or two of the loop's order)
                np.testing.assert_allclose(a, w, rtol=4e-16, atol=4e-16, err_msg=say)
            else:
                np.testing.assert_array_equal(a, w, err_msg=say)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", ["max", "min"])
def test_a_nan_window_gives_its_head_to_its_nans_in_evaluate_and_every_build(kind, form):
    x = np.array([1.0, np.nan, 3.0, np.nan, 0.0, -np.inf, 2.0, 5.0, np.nan])
    x = x[:_program(kind, form)[0].shape[0]]
    x[0] = -np.inf if kind == "max" else np.inf  # the identity's infinity beside a NaN
    _check(kind, form, x, np.arange(1.0, N + 1), np.arange(10.0, 10.0 + x.size))


@settings(max_examples=examples(40), deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(["max", "min"]), form=st.sampled_from(FORMS))
def test_random_windows_with_nan_inf_and_ties(seed, kind, form):
    rng = np.random.default_rng(seed)
    x = _data(rng, _program(kind, form)[0].shape[0])
    _check(kind, form, x, rng.integers(-3, 4, N).astype(float), rng.integers(-3, 4, x.size).astype(float),
           every_build=False)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_the_gradient_is_torch_max_of_each_window(kind):
    """``torch.max(w)`` without ``dim``: an even split among the points equal to the result,
    the NaNs when it is NaN (torch's ``evenly_distribute_backward``)."""
    rng = np.random.default_rng(5)
    X, H, U, Y, g, t, builds = _kernels(kind, "plain")
    for _ in range(5):
        x, h = _data(rng, N + K - 1), rng.integers(-3, 4, N).astype(float)
        xt = torch.tensor(x, requires_grad=True)
        outs = [(xt[i:i + K].max() if kind == "max" else xt[i:i + K].min()) for i in range(N)]
        torch.autograd.backward(outs, [torch.tensor(v) for v in h])
        np.testing.assert_array_equal(builds[0](x, h, np.zeros_like(x))[1], xt.grad.numpy())


@pytest.mark.parametrize("kind", ["max", "min"])
def test_padding_is_a_term_that_ties_with_infinite_points(kind):
    """The padding's infinity is a term of the window like any other: where the window's points are
    that infinity too, it is one of the tied terms and takes its share of the head, as
    ``torch.amax`` of the explicitly padded tensor gives.  (The test's own oracle had left the
    padding out of the window, so a draw with such a window failed.)"""
    inf = np.inf if kind == "max" else -np.inf
    x = np.array([-inf, -inf, 1.0, -1.0, 1.0, np.nan, 0.0])
    h = np.array([-3.0, 2.0, 0.0, -2.0, -3.0, -3.0, 2.0])
    xt = torch.tensor(x, requires_grad=True)
    xp = torch.nn.functional.pad(xt, (1, 1), value=-inf)
    outs = [xp[i:i + K].amax() if kind == "max" else xp[i:i + K].amin() for i in range(N)]
    torch.autograd.backward(outs, [torch.tensor(v) for v in h])
    assert xt.grad[0] == h[0] / 3
    _check(kind, "pad", x, h, np.arange(10.0, 10.0 + x.size))
    X, H, U, Y, g, t, builds = _kernels(kind, "pad")
    # (the points of windows without NaN: amax's backward has no rule for a NaN winner)
    np.testing.assert_array_equal(ta.evaluate(g, {X: x, H: h})[:3], xt.grad.numpy()[:3])


@pytest.mark.parametrize("form", ["pad", "inexact"])
@pytest.mark.parametrize("kind", ["max", "min"])
def test_function_saves_the_winners_and_splits_forward_and_backward_builds(kind, form):
    """``ta.function`` saves the winners (the lone winner's destination and count; the winner
    reduction and the stored source) in the forward; the backward built otherwise (the fuzz's
    split check) reads them."""
    X, Y = _program(kind, form, "float32")
    x = np.array([np.nan, 1.0, np.nan, 3.0, 3.0, -np.inf, np.nan, 2.0, np.nan], np.float32)[:X.shape[0]]
    h = np.arange(1.0, N + 1, dtype=np.float32)
    want = oracle(kind, form, x.astype(float), h.astype(float), np.zeros(x.size))
    fwd = ta.function(Y, [X], fastmath=True, target=HASWELL)
    bwd = ta.function(Y, [X], fastmath=False, target="llvm -mcpu=x86-64")
    y, res = fwd.forward(x)
    np.testing.assert_array_equal(y, want[0].astype(np.float32))
    (gx,) = bwd.backward(res, h)
    np.testing.assert_array_equal(gx, want[1].astype(np.float32))


def test_max_pool_float32_with_nan_as_torch_max_of_each_window():
    """The 3x3 stride-2 padded max pool (the ``max_pool3s2`` benchmark's layer), vectorized."""
    X = ta.placeholder((1, 2, 7, 7), "float32", name="X")
    Y = ta.topi.nn.pool(X, 3, 2, 1, "max")
    H = ta.placeholder(Y.shape, "float32", name="H")
    (g,) = ta.gradient(Y, [X], H)
    rng = np.random.default_rng(2)
    x = rng.choice(np.array([np.nan, np.inf, 0.0, 1.0, 2.0], np.float32), X.shape,
                   p=[0.1, 0.1, 0.2, 0.3, 0.3])
    h = rng.integers(1, 4, Y.shape).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    padded = torch.nn.functional.pad(xt, (1, 1, 1, 1), value=-np.inf)
    outs, heads = [], []
    for idx in np.ndindex(*Y.shape):
        c, a, b = idx[1], 2 * idx[2], 2 * idx[3]
        outs.append(padded[0, c, a:a + 3, b:b + 3].max())
        heads.append(torch.tensor(h[idx]))
    torch.autograd.backward(outs, heads)
    for options in ({"target": HASWELL, "num_threads": 1}, {"fastmath": False}):
        got = ta.build([Y, g], [X, H], **options)(x, h)
        np.testing.assert_array_equal(got[0], torch.stack(outs).reshape(Y.shape).detach().numpy())
        np.testing.assert_array_equal(got[1], xt.grad.numpy(), err_msg=str(options))


def _first_nan_argmax(x, y):  # numpy.argmax's rule: the first NaN, else the first maximum
    keep = (x[1] >= y[1]) | (x[1] != x[1])
    return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])


def test_an_argmax_combiner_that_keeps_a_nan_routes_the_gradient_to_its_index():
    """A custom selecting reducer's winner is what its own combiner chose (conventions.md):
    written to keep a NaN, it returns numpy.argmax's index, and the gradient goes there."""
    argmax = ta.comm_reducer(_first_nan_argmax, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)),
                             name="argmax_nan")
    X = ta.placeholder((4, 5), "float64", name="X")
    r = ta.reduce_axis((0, 5), name="r")
    idx, val = ta.compute((4,), lambda i: argmax((r, X[i, r]), axis=r), name="A")
    H = ta.placeholder((4,), "float64", name="H")
    (g,) = ta.gradient(val, [X], H)
    x = np.array([[1, np.nan, 3, np.nan, 0], [np.nan] * 5, [2, 2, -np.inf, 1, 0],
                  [-np.inf, 0, np.inf, np.nan, 1.0]])
    h = np.array([1.0, 2.0, 3.0, 4.0])
    want = np.zeros_like(x)
    want[np.arange(4), np.argmax(x, axis=1)] = h
    for got in (ta.evaluate([idx, g], {X: x, H: h}), ta.build([idx, g], [X, H])(x, h)):
        np.testing.assert_array_equal(got[0], np.argmax(x, axis=1))
        np.testing.assert_array_equal(got[1], want)
